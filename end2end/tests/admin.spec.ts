import { SHOTS, apiAs, cancelEverything, expect, hydrated, launch, signIn, test } from "./helpers";

test.describe.serial("admin: quotas", () => {
  test.beforeEach(async ({ baseURL }) => {
    await cancelEverything(baseURL!);
  });

  test("an admin edits a quota, previews it, saves, and a queued job starts", async ({ page, baseURL }) => {
    // vision may hold 8 + 8 GPUs in hgx-h200: with 8 running, a 16-GPU job waits.
    const dave = await apiAs(baseURL!, "dave");
    const running = await launch(dave, { template: "llama-3.1-8b-fsdp", gpus: 8, pool: "hgx-h200", name: "e2e-h200-running" });
    expect(running.state).toBe("admitted");
    const held = await launch(dave, { template: "llama-3.1-8b-fsdp", gpus: 16, pool: "hgx-h200", name: "e2e-h200-held" });
    expect(held.state).toBe("queued");
    expect(held.queue_position).toBe(1);

    await signIn(page, "carol");
    await page.getByRole("link", { name: "Quotas" }).click();
    await expect(page).toHaveURL(/\/admin\/quotas$/);
    await hydrated(page);
    const row = "quota-vision-hgx-h200";
    await expect(page.getByTestId(row)).toContainText("16 GPUs"); // queued demand
    await page.getByTestId(`${row}-nominal`).fill("-1");
    await expect(page.getByTestId(row)).toContainText("cannot be negative");
    await expect(page.getByTestId(`${row}-save`)).toBeDisabled();
    await page.getByTestId(`${row}-nominal`).fill("32");
    await page.getByTestId(`${row}-borrow`).fill("0");
    await page.getByTestId(`${row}-preview`).click();
    const preview = page.getByTestId("quota-preview");
    await expect(preview).toContainText("replayed with the same rules");
    await expect(preview).toContainText("vision");
    await expect(page.getByTestId("quota-preview-chart").locator("svg")).toContainText("90th percentile wait");
    await page.screenshot({ path: `${SHOTS}/admin-quotas-preview.png`, fullPage: true });

    await page.getByTestId(`${row}-save`).click();
    // The change takes effect at once: the held job is admitted, and the grid shows it.
    await expect(page.getByTestId(`${row}-nominal`)).toHaveValue("32");
    await expect(page.getByTestId(row)).toContainText("24 GPUs");
    const after = await (await dave.get(`/api/v1/jobs/${held.id}`)).json();
    expect(after.state).toBe("admitted");
    await page.screenshot({ path: `${SHOTS}/admin-quotas-saved.png`, fullPage: true });

    // Put it back for the other tests.
    const carol = await apiAs(baseURL!, "carol");
    const cur = await carol.get("/api/v1/quotas/vision/hgx-h200");
    const put = await carol.put("/api/v1/quotas/vision/hgx-h200", {
      data: { nominal_gpus: 8, borrowing_limit_gpus: 8 },
      headers: { "If-Match": cur.headers()["etag"] },
    });
    expect(put.status()).toBe(200);
  });

  test("an admin sets a team's lending limit and strict FIFO order, and they hold", async ({ page, baseURL }) => {
    await signIn(page, "carol");
    await page.goto("/admin/quotas");
    await hydrated(page);
    const row = "quota-nlp-hgx-h200";
    await page.getByTestId(`${row}-lend`).fill("32"); // the pool has 32, nlp's nominal is 16
    await expect(page.getByTestId(row)).toContainText("at most the nominal quota");
    await expect(page.getByTestId(`${row}-save`)).toBeDisabled();
    await page.getByTestId(`${row}-lend`).fill("8");
    await page.getByTestId(`${row}-strategy`).selectOption("StrictFIFO");
    // Saved before the reload: Save is disabled while the save is on its way too, and a reload
    // then would cancel it (this test failed so once, 2026-12-07).
    const stored = page.waitForResponse((r) => r.url().includes("/api/save_quota"));
    await page.getByTestId(`${row}-save`).click();
    expect((await stored).status()).toBe(200);
    await expect(page.getByTestId(`${row}-save`)).toBeDisabled();
    await page.reload();
    await hydrated(page);
    await expect(page.getByTestId(`${row}-lend`)).toHaveValue("8");
    await expect(page.getByTestId(`${row}-strategy`)).toHaveValue("StrictFIFO");
    await page.screenshot({ path: `${SHOTS}/admin-quotas-strategy.png`, fullPage: true });
    const carol = await apiAs(baseURL!, "carol");
    const cur = await carol.get("/api/v1/quotas/nlp/hgx-h200");
    const cell = await cur.json();
    expect([cell.lending_limit_gpus, cell.queueing_strategy]).toEqual([8, "StrictFIFO"]);
    // Put it back for the other tests.
    const put = await carol.put("/api/v1/quotas/nlp/hgx-h200", {
      data: {
        nominal_gpus: cell.nominal_gpus,
        borrowing_limit_gpus: cell.borrowing_limit_gpus,
        lending_limit_gpus: null,
        queueing_strategy: null,
      },
      headers: { "If-Match": cur.headers()["etag"] },
    });
    expect(put.status()).toBe(200);
  });

  // The grid follows job changes, but not over an edit: a reload builds the rows again from
  // the server's values, and once threw the admin's typing away within seconds.
  test("an admin's unsaved edit stays while jobs change, and the figures catch up after", async ({ page, baseURL }) => {
    const dave = await apiAs(baseURL!, "dave");
    await signIn(page, "carol");
    await page.goto("/admin/quotas");
    await hydrated(page);
    const row = "quota-vision-hgx-h200";
    const field = page.getByTestId(`${row}-nominal`);
    const saved = await field.inputValue();
    const inUse = page.getByTestId(row).locator("td.num").first();
    await expect(inUse).toHaveText("0 GPUs");
    await field.fill("24");
    await expect(page.getByTestId("quotas-paused")).toBeVisible();
    await launch(dave, { template: "llama-3.1-8b-fsdp", gpus: 8, pool: "hgx-h200", name: "e2e-while-editing" });
    // Longer than the grid's reload after a change (at most every 2 s).
    await page.waitForTimeout(4_000);
    await expect(field).toHaveValue("24");
    await expect(inUse).toHaveText("0 GPUs");
    // Put back: the grid catches up with the job it missed.
    await field.fill(saved);
    await expect(page.getByTestId("quotas-paused")).toHaveCount(0);
    await expect(inUse).toHaveText("8 GPUs", { timeout: 10_000 });
    await dave.dispose();
  });

  // A save reloads the grid, and the rows were built again from the server's values: the
  // other rows' unsaved edits were thrown away. A save refused because someone else had
  // saved the quota meanwhile (409) left the row stuck, refused on every try.
  test("saving one row keeps another row's edit, and a save over someone else's change says so and keeps the draft", async ({ page, baseURL, browserErrors }) => {
    // The refused save is meant: Chromium logs the 409 it answers.
    browserErrors.allow(/save_quota\d*\): Failed to load resource: the server responded with a status of 409/);
    const carol = await apiAs(baseURL!, "carol");
    const before = {
      vision: await (await carol.get("/api/v1/quotas/vision/hgx-h200")).json(),
      nlp: await (await carol.get("/api/v1/quotas/nlp/hgx-h200")).json(),
    };
    await signIn(page, "carol");
    await page.goto("/admin/quotas");
    await hydrated(page);
    const a = "quota-vision-hgx-h200";
    const b = "quota-nlp-hgx-h200";
    const drafted = String(before.nlp.nominal_gpus - 4);
    // Someone else saves nlp's quota while carol edits it.
    const theirSave = async (nominal: number) => {
      const cur = await carol.get("/api/v1/quotas/nlp/hgx-h200");
      const put = await carol.put("/api/v1/quotas/nlp/hgx-h200", {
        data: { nominal_gpus: nominal },
        headers: { "If-Match": cur.headers()["etag"] },
      });
      expect(put.status()).toBe(200);
    };
    await page.getByTestId(`${b}-nominal`).fill(drafted);
    await theirSave(before.nlp.nominal_gpus - 1);
    await page.getByTestId(`${a}-borrow`).fill("4");
    // Answered before the API is read (Save is disabled while it is on its way too).
    const stored = page.waitForResponse((r) => r.url().includes("/api/save_quota"));
    await page.getByTestId(`${a}-save`).click();
    expect((await stored).status()).toBe(200);
    await expect(page.getByTestId(`${a}-save`)).toBeDisabled();
    await expect(page.getByTestId(`${a}-borrow`)).toHaveValue("4");
    expect((await (await carol.get("/api/v1/quotas/vision/hgx-h200")).json()).borrowing_limit_gpus).toBe(4);
    // The grid was read again; the other row's edit is still there, still to be saved, and
    // the row says the quota was saved by someone else since the edit began.
    await expect(page.getByTestId(`${b}-nominal`)).toHaveValue(drafted);
    await expect(page.getByTestId(`${b}-save`)).toBeEnabled();
    await expect(page.getByTestId("quotas-paused")).toBeVisible();
    const conflict = page.getByTestId(`${b}-conflict`);
    await expect(conflict).toContainText("Someone else saved this quota");
    await expect(conflict).toContainText(`Stored now: ${before.nlp.nominal_gpus - 1} GPUs nominal`);

    // Once more, now after the grid was read: the save is refused (409), and the row, read
    // again, says what is stored now and keeps the draft.
    const theirs = before.nlp.nominal_gpus - 2;
    await theirSave(theirs);
    await page.getByTestId(`${b}-save`).click();
    await expect(conflict).toContainText(`Stored now: ${theirs} GPUs nominal`);
    await expect(page.getByTestId(`${b}-nominal`)).toHaveValue(drafted);
    await page.screenshot({ path: `${SHOTS}/admin-quotas-conflict.png`, fullPage: true });
    // Saving again puts the draft in place of theirs.
    await page.getByTestId(`${b}-save`).click();
    await expect(page.getByTestId(`${b}-save`)).toBeDisabled();
    await expect(conflict).toHaveCount(0);
    await expect(page.getByTestId("quotas-paused")).toHaveCount(0);
    expect((await (await carol.get("/api/v1/quotas/nlp/hgx-h200")).json()).nominal_gpus).toBe(Number(drafted));

    // Put both back for the other tests.
    for (const [team, cell] of [["vision", before.vision], ["nlp", before.nlp]] as const) {
      const now = await carol.get(`/api/v1/quotas/${team}/hgx-h200`);
      const back = await carol.put(`/api/v1/quotas/${team}/hgx-h200`, {
        data: {
          nominal_gpus: cell.nominal_gpus,
          borrowing_limit_gpus: cell.borrowing_limit_gpus,
          lending_limit_gpus: cell.lending_limit_gpus,
          queueing_strategy: null,
        },
        headers: { "If-Match": now.headers()["etag"] },
      });
      expect(back.status()).toBe(200);
    }
    await carol.dispose();
  });

  test("the audit log lists the quota change, filters, and downloads the same rows as CSV", async ({ page, baseURL }) => {
    await signIn(page, "carol");
    await page.getByRole("link", { name: "Audit log" }).click();
    await expect(page).toHaveURL(/\/admin\/audit$/);
    const table = page.getByTestId("audit-table");
    await expect(table).toContainText("quota.set");
    await expect(table).toContainText("vision/hgx-h200");
    await expect(table).toContainText("auth.sign_in");
    await page.screenshot({ path: `${SHOTS}/admin-audit.png`, fullPage: true });

    await page.goto("/admin/audit?action=quota.set");
    const rows = page.locator('[data-testid="audit-table"] tbody tr');
    const n = await rows.count();
    expect(n).toBeGreaterThanOrEqual(2); // the edit and the restore
    for (let i = 0; i < n; i++) await expect(rows.nth(i)).toContainText("quota.set");
    const href = await page.getByTestId("audit-csv").getAttribute("href");
    expect(href).toBe("/api/v1/audit?format=csv&action=quota.set");
    const carol = await apiAs(baseURL!, "carol");
    const csv = await (await carol.get(href!)).text();
    const lines = csv.trim().split("\n");
    expect(lines[0]).toBe("at,actor,action,target,before,after,address");
    expect(lines.length - 1).toBe(n);

    await page.goto("/admin/audit?actor=nobody");
    await expect(page.getByTestId("audit-empty")).toBeVisible();
    // The download filters as the page does: a "+" or "#" in a filter stays that character
    // (a bare "+" read as a space, and a "#" cut the address short).
    await page.goto("/admin/audit?actor=ops%2Bci%40example.com&target=team%23a");
    await expect(page.getByTestId("audit-empty")).toBeVisible();
    expect(await page.getByTestId("audit-csv").getAttribute("href")).toBe(
      "/api/v1/audit?format=csv&actor=ops%2Bci%40example.com&target=team%23a",
    );
  });

  test("an admin creates a template from YAML, is told the line of a mistake, and deprecates it", async ({ page, browserErrors }) => {
    // The browser logs the refused save's 422: the mistake is on purpose.
    browserErrors.allow(/save_template\d*\): Failed to load resource: the server responded with a status of 422/);
    await signIn(page, "carol");
    await page.getByRole("link", { name: "Templates" }).click();
    await expect(page).toHaveURL(/\/admin\/templates$/);
    await hydrated(page);
    const def = page.getByTestId("template-definition");
    const text = await def.inputValue();
    await def.fill(text.replace("default_gpus: 16", "default_gpus: 4"));
    const refused = page.waitForResponse((r) => r.url().includes("/api/save_template"));
    await page.getByTestId("template-save").click();
    expect((await refused).status(), "a refusal is a 4xx, not a server failure").toBe(422);
    await expect(page.getByRole("alert")).toContainText("line 11: default_gpus: 4 is not one of allowed_gpus [8, 16, 32]");
    await page.screenshot({ path: `${SHOTS}/admin-templates-error.png`, fullPage: true });
    await def.fill(text);
    await page.getByTestId("template-save").click();
    await expect(page.getByTestId("template-saved")).toHaveText("Saved gpt-neox-20b v1.");
    await expect(page.getByTestId("template-gpt-neox-20b")).toContainText("v1");
    await page.getByTestId("deprecate-gpt-neox-20b").click();
    await expect(page.getByTestId("template-gpt-neox-20b")).toHaveCount(0);
  });

  test("the Templates page searches the catalogue on the server and says how many there are", async ({ page, baseURL }) => {
    await signIn(page, "carol");
    const carol = await apiAs(baseURL!, "carol");
    const all = await (await carol.get("/api/v1/templates")).json();
    await carol.dispose();
    await page.goto("/admin/templates");
    await expect(page.getByTestId("templates-count")).toHaveText(`${all.total} templates`);
    await expect(page.getByTestId("template-table").locator("tbody tr")).toHaveCount(all.total);
    // The search is a plain GET form: its query is the page's URL.
    await page.getByTestId("template-q").fill("WHISPER");
    await page.getByTestId("template-q").press("Enter");
    await expect(page).toHaveURL(/\/admin\/templates\?q=WHISPER$/);
    await expect(page.getByTestId("templates-count")).toHaveText("1 template");
    await expect(page.getByTestId("template-whisper-large-v3-ft")).toBeVisible();
  });

  test("a member cannot reach the admin pages: 403, and none of their buttons", async ({ page, browserErrors }) => {
    // The browser logs each refused page's status as an error: expected here, and only here.
    browserErrors.allow(/status of 403 \(Forbidden\)/);
    await signIn(page, "alice");
    await expect(page.getByRole("link", { name: "Quotas" })).toHaveCount(0);
    for (const path of ["/admin/quotas", "/admin/audit", "/admin/templates", "/admin/tokens"]) {
      const res = await page.goto(path);
      expect(res!.status(), path).toBe(403);
      await expect(page.getByTestId("refused")).toContainText("Not allowed");
    }
    await hydrated(page);
    await expect(page.locator(".quota-table")).toHaveCount(0);
    await expect(page.getByTestId("template-table")).toHaveCount(0);
    await expect(page.getByTestId("template-save")).toHaveCount(0);
    await expect(page.getByRole("button", { name: "New version…" })).toHaveCount(0);
    await expect(page.getByRole("button", { name: "Deprecate" })).toHaveCount(0);
    await page.screenshot({ path: `${SHOTS}/admin-refused.png`, fullPage: true });
  });
});
