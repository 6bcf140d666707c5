import { request } from "@playwright/test";
import { SHOTS, apiAs, cancelEverything, expect, hydrated, launch, signIn, test } from "./helpers";

test.beforeEach(async ({ baseURL }) => {
  await cancelEverything(baseURL!);
});

test("a personal API token is created on the profile page, shown once, used, and refused once revoked", async ({ page, baseURL }) => {
  await signIn(page, "alice");
  await page.getByTestId("viewer").click();
  await expect(page).toHaveURL(/\/profile$/);
  await hydrated(page);
  await expect(page.getByTestId("profile-teams")).toHaveText("nlp (member)");
  await expect(page.getByTestId("no-tokens")).toBeVisible();
  await page.getByTestId("token-name").fill("e2e-agent");
  await page.getByTestId("token-days").fill("7");
  await page.getByTestId("token-create").click();
  const secret = await page.getByTestId("token-secret").inputValue();
  expect(secret).toMatch(/^gantry_[A-Za-z0-9_-]{43}$/);
  const row = page.getByTestId("token-e2e-agent");
  await expect(row).toContainText("live");
  await expect(row).not.toContainText(secret);
  await page.screenshot({ path: `${SHOTS}/profile-token-created.png`, fullPage: true });

  // The token speaks for alice, with her rights only.
  const api = await request.newContext({ baseURL, extraHTTPHeaders: { authorization: `Bearer ${secret}` } });
  const me = await api.get("/api/v1/me");
  expect(me.status()).toBe(200);
  expect((await me.json()).user).toBe("alice");
  expect((await api.get("/api/v1/quotas")).status()).toBe(403);

  // Shown once: a reload lists it without the secret.
  await page.reload();
  await hydrated(page);
  await expect(page.getByTestId("token-secret")).toHaveCount(0);
  await expect(page.getByTestId("token-e2e-agent")).toContainText("gantry_");
  expect(await page.content()).not.toContain(secret);

  await page.getByTestId("revoke-e2e-agent").click();
  await expect(page.getByTestId("token-e2e-agent")).toContainText("revoked");
  expect((await api.get("/api/v1/me")).status()).toBe(401);
  await api.dispose();
});

test("a cross-site form post with the user's cookie is refused and changes nothing", async ({ page, baseURL, browserErrors }) => {
  // The refused post's 403 is the point of the test.
  browserErrors.allow(/\/cancel\): Failed to load resource: the server responded with a status of 403/);
  const alice = await apiAs(baseURL!, "alice");
  const job = await launch(alice, { template: "llama-3.1-8b-fsdp", gpus: 8, name: "e2e-csrf-target" });
  await signIn(page, "alice");
  // Another origin on the same host (another port: the same *site*, so the SameSite=Lax
  // cookie goes along): a page there posts a form to Gantry's cancel route.
  const evil = "http://127.0.0.1:9/evil.html";
  await page.route(evil, (route) =>
    route.fulfill({
      contentType: "text/html",
      body: `<form id="f" method="post" action="${baseURL}/api/v1/jobs/${job.id}/cancel"></form>
             <script>document.getElementById("f").submit()</script>`,
    }),
  );
  const refused = page.waitForResponse((r) => r.url().endsWith(`/api/v1/jobs/${job.id}/cancel`));
  await page.goto(evil);
  const res = await refused;
  expect(res.status()).toBe(403);
  expect(await res.text()).toContain("cross-site request refused");
  // The cookie did go along: only the Origin check stopped it.
  expect((await res.request().allHeaders())["cookie"]).toContain("gantry_session");
  const after = await (await alice.get(`/api/v1/jobs/${job.id}`)).json();
  expect(after.state).not.toBe("cancelled");
  await alice.dispose();
});

test("an admin sees every user's live tokens and revokes one: its owner's calls are refused from then on", async ({ page, baseURL }) => {
  const alice = await apiAs(baseURL!, "alice");
  const name = `e2e-leaked-${Date.now()}`;
  const made = await alice.post("/api/v1/tokens", { data: { name, expires_in_days: 30 } });
  expect(made.status()).toBe(201);
  const { token } = await made.json();
  const api = await request.newContext({ baseURL, extraHTTPHeaders: { authorization: `Bearer ${token}` } });
  expect((await api.get("/api/v1/me")).status()).toBe(200);
  // Not a member's page: alice's token cannot list anyone's.
  expect((await api.get("/api/v1/admin/tokens")).status()).toBe(403);

  await signIn(page, "carol");
  await page.goto("/admin/tokens?user=alice");
  await hydrated(page);
  const row = page.getByTestId(`admin-token-alice-${name}`);
  await expect(row).toContainText(token.slice(0, 10));
  await expect(row).not.toContainText(token);
  await expect(page.getByTestId("admin-tokens-count")).toContainText("live token");
  await row.getByTestId("admin-token-revoke").click();
  await page.screenshot({ path: `${SHOTS}/admin-tokens-confirm.png`, fullPage: true });
  await row.getByTestId("admin-token-revoke-confirm").click();
  await expect(row).toHaveCount(0);
  expect((await api.get("/api/v1/me")).status()).toBe(401);

  // The audit log names the owner as the target and carol as the one who did it.
  const carol = await apiAs(baseURL!, "carol");
  const audit = await (await carol.get("/api/v1/audit?action=token.revoke&target=alice")).json();
  const entry = audit.entries.find((e: { before?: { name?: string } }) => e.before?.name === name);
  expect(entry?.actor).toBe("carol");
  // Revoked already: a second revocation is a 404 that says so.
  const again = await carol.delete(`/api/v1/tokens/${entry.before.id}`);
  expect(again.status()).toBe(404);
  await Promise.all([api.dispose(), alice.dispose(), carol.dispose()]);
});

test("the admins' token list pages: 50 a page, the next by a link, and back to the first", async ({ page, baseURL }) => {
  // 51 live tokens at least, from three users (each may hold 20).
  const made: { ctx: Awaited<ReturnType<typeof apiAs>>; id: string }[] = [];
  const owners = await Promise.all(["bob", "dave", "erin"].map((u) => apiAs(baseURL!, u)));
  const carol = await apiAs(baseURL!, "carol");
  try {
    for (const [i, ctx] of owners.entries()) {
      for (let n = 0; n < 17; n++) {
        const res = await ctx.post("/api/v1/tokens", { data: { name: `e2e-page-${i}-${n}` } });
        expect(res.status(), await res.text()).toBe(201);
        made.push({ ctx, id: (await res.json()).info.id });
      }
    }
    const { total } = await (await carol.get("/api/v1/admin/tokens?limit=1")).json();
    expect(total).toBeGreaterThanOrEqual(51);

    await signIn(page, "carol");
    await page.goto("/admin/tokens");
    await hydrated(page);
    const rows = page.locator("[data-testid=admin-tokens] tbody tr");
    await expect(page.getByTestId("admin-tokens-count")).toHaveText(`50 of ${total} live tokens, by user`);
    await expect(rows).toHaveCount(50);
    await expect(page.getByTestId("admin-tokens-first")).toHaveCount(0);
    await page.getByTestId("admin-tokens-next").click();
    await expect(page).toHaveURL(/\/admin\/tokens\?cursor=/);
    const rest = Math.min(total - 50, 50);
    await expect(rows).toHaveCount(rest);
    await expect(page.getByTestId("admin-tokens-count")).toHaveText(`${rest} of ${total} live tokens, by user (a later page)`);
    await page.screenshot({ path: `${SHOTS}/admin-tokens-page-2.png`, fullPage: true });
    await page.getByTestId("admin-tokens-first").click();
    await expect(page).toHaveURL(/\/admin\/tokens$/);
    await expect(rows).toHaveCount(50);

    // Filtered by a user, the pages keep the filter: dave's 17, ten a page through the API,
    // and on the page all of them with no next page.
    const seen: string[] = [];
    let cursor = "";
    for (let i = 0; i < 5; i++) {
      const res = await carol.get(`/api/v1/admin/tokens?user=dave&limit=10${cursor && `&cursor=${cursor}`}`);
      expect(res.status()).toBe(200);
      const body = await res.json();
      seen.push(...body.tokens.map((t: { user: string; name: string }) => `${t.user}/${t.name}`));
      if (!body.next_cursor) break;
      cursor = body.next_cursor;
    }
    expect(seen.filter((s) => s.startsWith("dave/e2e-page-"))).toHaveLength(17);
    expect(seen.every((s) => s.startsWith("dave/"))).toBe(true);
    expect(new Set(seen).size).toBe(seen.length);
    await page.goto("/admin/tokens?user=dave");
    await hydrated(page);
    await expect(rows).toHaveCount(seen.length);
    await expect(page.getByTestId("admin-tokens-next")).toHaveCount(0);
  } finally {
    for (const { ctx, id } of made) {
      expect((await ctx.delete(`/api/v1/tokens/${id}`)).status()).toBe(204);
    }
    await Promise.all([...owners, carol].map((c) => c.dispose()));
  }
});
