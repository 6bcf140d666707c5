import { SHOTS, apiAs, cancelEverything, expect, hydrated, launch, signIn, test } from "./helpers";

// The job page under its Content-Security-Policy (any violation is a console error, which the
// shared fixture fails on), its site files under content-hashed names, compressed and cached
// for a year as immutable, so a second visit fetches only the page itself.
test("the job page hydrates under its security policy; its hashed site files come compressed and cached", async ({ page, baseURL }) => {
  await cancelEverything(baseURL!);
  const alice = await apiAs(baseURL!, "alice");
  const job = await launch(alice, { template: "llama-3.1-8b-fsdp", gpus: 8, name: "e2e-headers" });
  await signIn(page, "alice");

  const assets: { url: string; headers: Record<string, string> }[] = [];
  page.on("response", (r) => {
    if (new URL(r.url()).pathname.startsWith("/pkg/")) assets.push({ url: r.url(), headers: r.headers() });
  });
  const res = await page.goto(`/jobs/${job.id}`);
  expect(res!.status()).toBe(200);
  const csp = res!.headers()["content-security-policy"];
  expect(csp).toContain("frame-ancestors 'none'");
  expect(csp).toMatch(/script-src 'self' 'nonce-[A-Za-z0-9_-]{16,}'/);
  expect(res!.headers()["x-content-type-options"]).toBe("nosniff");
  await hydrated(page);
  await expect(page.getByTestId("job-state")).toBeVisible();

  for (const kind of ["js", "wasm", "css"]) {
    const a = assets.find((x) => x.url.endsWith(`.${kind}`));
    expect(a, `the page loaded its ${kind}`).toBeTruthy();
    expect(new URL(a!.url).pathname).toMatch(new RegExp(`^/pkg/gantry\\.[A-Za-z0-9_-]{16,}\\.${kind}$`));
    expect(a!.headers["cache-control"]).toBe("public, max-age=31536000, immutable");
    expect(a!.headers["content-encoding"]).toBe("br");
  }

  // A second visit: the page again, nothing from /pkg over the network.
  await page.goto(`/jobs/${job.id}`);
  await hydrated(page);
  const fromNetwork = await page.evaluate(() =>
    performance
      .getEntriesByType("resource")
      .filter((e) => new URL(e.name).pathname.startsWith("/pkg/") && (e as PerformanceResourceTiming).transferSize > 0)
      .map((e) => e.name),
  );
  expect(fromNetwork, "the second visit takes /pkg from the cache").toEqual([]);
  await page.screenshot({ path: `${SHOTS}/job-headers.png` });
  await alice.dispose();
});

// A page asked for again by the same session while nothing changed is served from what was
// rendered (server `http::page_cache`), with a nonce of its own: it must hydrate and work the
// same, under its own policy (a nonce left over from the first answer would be a CSP
// violation, a console error).
test("a page served again from the page cache hydrates under a nonce of its own", async ({ page, baseURL }) => {
  await cancelEverything(baseURL!);
  const alice = await apiAs(baseURL!, "alice");
  const job = await launch(alice, { template: "llama-3.1-8b-fsdp", gpus: 8, name: "e2e-page-cache" });
  await signIn(page, "alice");
  const first = await page.goto(`/jobs/${job.id}`);
  expect(first!.headers()["x-page-cache"]).toBe("miss");
  const nonceOf = (csp: string) => /'nonce-([^']+)'/.exec(csp)![1];
  const firstNonce = nonceOf(first!.headers()["content-security-policy"]);
  await hydrated(page);

  // The sim writes now and then (admissions, the clock), and any write means a new render:
  // a few reloads find the cached answer.
  let hit = null;
  for (let i = 0; i < 10 && !hit; i++) {
    const res = await page.reload();
    if (res!.headers()["x-page-cache"] === "hit") hit = res;
  }
  expect(hit, "a reload was served from the page cache").toBeTruthy();
  const nonce = nonceOf(hit!.headers()["content-security-policy"]);
  expect(nonce).not.toBe(firstNonce);
  expect(await page.locator(`script[nonce]`).count()).toBeGreaterThan(0);
  await hydrated(page);
  // Interactive: the job is cancelled from it.
  await page.getByTestId("cancel").click();
  await page.getByTestId("confirm-cancel").click();
  await expect(page.getByTestId("job-state")).toHaveText("cancelled");
  await alice.dispose();
});
