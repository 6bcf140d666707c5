import { SHOTS, apiAs, cancelEverything, expect, hydrated, launch, signIn, test } from "./helpers";

test.describe.serial("launch, watch the queue, cancel", () => {
  test.beforeEach(async ({ baseURL }) => {
    await cancelEverything(baseURL!);
  });

  test("a 16-GPU launch in 3 clicks shows its queue position, which moves without a reload", async ({ page, baseURL }) => {
    // nlp's quota in hgx-h100 is 64 GPUs and it may borrow 32 more: fill both, then queue a
    // 32-GPU job ahead of ours. The 32-GPU filler ends first, after an hour.
    const alice = await apiAs(baseURL!, "alice");
    const filler = await launch(alice, { template: "llama-3.1-8b-fsdp", gpus: 64, pool: "hgx-h100", name: "e2e-filler" });
    expect(filler.state).toBe("admitted");
    const borrower = await launch(alice, { template: "llama-3.1-8b-fsdp", gpus: 32, pool: "hgx-h100", name: "e2e-borrower", max_runtime_s: 3600 });
    expect(borrower.state).toBe("admitted");
    const ahead = await launch(alice, { template: "llama-3.1-8b-fsdp", gpus: 32, pool: "hgx-h100", name: "e2e-ahead" });
    expect(ahead.queue_position).toBe(1);

    await signIn(page, "alice");
    await page.goto("/");
    await hydrated(page);
    await expect(page.getByText("#1 in queue")).toBeVisible();
    await page.screenshot({ path: `${SHOTS}/home.png`, fullPage: true });

    // Click 1: Launch. Click 2: the template. Click 3: Launch with the defaults (16 GPUs).
    await page.getByTestId("home-launch").click();
    await expect(page.getByRole("heading", { name: "Launch a training job" })).toBeVisible();
    await page.screenshot({ path: `${SHOTS}/launch-gallery.png`, fullPage: true });
    await page.getByTestId("template-llama-3.1-8b-fsdp").click();
    await hydrated(page);
    const submit = page.getByTestId("launch-submit");
    await expect(submit).toHaveText("Launch on 16 GPUs (2 nodes)");
    await expect(page.getByTestId("fit-line")).toContainText("16 GPUs (2 nodes) in hgx-h100: about 8.0 h wait");
    await expect(page.getByTestId("fit-line")).toContainText("1 job ahead");
    await page.screenshot({ path: `${SHOTS}/launch-form.png`, fullPage: true });
    await submit.click();

    await expect(page).toHaveURL(/\/jobs\/[0-9a-f-]{36}$/);
    await hydrated(page);
    await expect(page.getByTestId("job-state")).toHaveText("queued");
    await expect(page.getByTestId("queue-position")).toHaveText("#2");
    await expect(page.getByTestId("team-position")).toHaveText("in hgx-h100 · #2 in team nlp");
    await expect(page.getByTestId("pending-reason")).toHaveText(
      "Team nlp would exceed its quota and borrowing limit in hgx-h100: 96 of 64 + 32 GPUs in use, this job needs 16",
    );
    // The 32-GPU job ahead takes the borrower's place after an hour; ours waits for the filler.
    await expect(page.getByTestId("eta")).toContainText("Starts in about 8.0 h");
    await expect(page.getByTestId("ahead")).toContainText("e2e-ahead");
    await expect(page.getByTestId("job-events")).toContainText("Launched by alice");
    await page.screenshot({ path: `${SHOTS}/job-queued.png`, fullPage: true });

    // A marker on window survives only if the page is never reloaded.
    await page.evaluate(() => ((window as any).__noReload = true));
    const c = await alice.post(`/api/v1/jobs/${ahead.id}/cancel`);
    expect(c.ok()).toBeTruthy();
    await expect(page.getByTestId("queue-position")).toHaveText("#1");
    await expect(page.getByTestId("eta")).toContainText("Starts in about 1.0 h");
    await expect(page.getByTestId("ahead-none")).toBeVisible();
    expect(await page.evaluate(() => (window as any).__noReload)).toBe(true);
    // The estimate counts down with the live clock: half an hour later, half an hour to go.
    const carol = await apiAs(baseURL!, "carol");
    expect((await carol.post("/api/v1/sim/advance", { data: { seconds: 1800 } })).ok()).toBeTruthy();
    await expect(page.getByTestId("eta")).toContainText(/Starts in about (29|30) min/);
    expect(await page.evaluate(() => (window as any).__noReload)).toBe(true);
    await carol.dispose();
    await page.screenshot({ path: `${SHOTS}/job-queued-first.png`, fullPage: true });

    // The fillers are cancelled too: our job is admitted, again without a reload.
    await alice.post(`/api/v1/jobs/${borrower.id}/cancel`);
    await expect(page.getByTestId("job-state")).toHaveText("admitted");
    expect(await page.evaluate(() => (window as any).__noReload)).toBe(true);
    // The log panel appears with its pods' first lines, without a reload.
    await expect(page.getByTestId("log-lines")).toContainText("--node_rank=0", { timeout: 15_000 });
    await expect(page.getByTestId("log-lines")).toBeVisible();
    await page.screenshot({ path: `${SHOTS}/job-admitted.png`, fullPage: true });
    await alice.dispose();
  });

  test("cancel from the Jobs page asks once, then the row shows cancelled", async ({ page, baseURL }) => {
    const alice = await apiAs(baseURL!, "alice");
    const job = await launch(alice, { template: "mistral-7b-sft", gpus: 8, pool: "hgx-h100", name: "e2e-to-cancel" });
    await signIn(page, "alice");
    await page.goto("/jobs?scope=mine");
    await hydrated(page);
    const row = page.getByTestId(`job-row-${job.id}`);
    await expect(row).toHaveAttribute("data-state", "admitted");
    await page.screenshot({ path: `${SHOTS}/jobs.png`, fullPage: true });
    await row.getByTestId("cancel").click();
    await expect(row.getByRole("alertdialog")).toContainText("Cancel e2e-to-cancel? It holds 8 GPUs (1 node) in hgx-h100.");
    await row.getByTestId("confirm-cancel").click();
    await expect(row).toHaveAttribute("data-state", "cancelled");
    const res = await alice.get(`/api/v1/jobs/${job.id}`);
    expect((await res.json()).state).toBe("cancelled");

    // The state filter is kept in the URL, and the chips are drawn again from it in the page
    // (no reload): the chosen state is the active chip, and every chip's link keeps the scope.
    await page.evaluate(() => ((window as any).stayed = true));
    await page.getByTestId("filter-cancelled").click();
    await expect(page).toHaveURL(/scope=mine&state=cancelled/);
    await expect(page.getByTestId(`job-row-${job.id}`)).toBeVisible();
    await expect(page.getByTestId("filter-cancelled")).toHaveClass(/\bactive\b/);
    await expect(page.getByTestId("filter-all")).not.toHaveClass(/\bactive\b/);
    await expect(page.getByTestId("filter-running")).toHaveAttribute("href", "/jobs?scope=mine&state=running");
    await expect(page.getByTestId("scope-mine")).toHaveAttribute("aria-current", "true");
    await page.getByTestId("filter-running").click();
    await expect(page).toHaveURL(/scope=mine&state=running/);
    await expect(page.getByTestId(`job-row-${job.id}`)).toHaveCount(0);
    await expect(page.getByTestId("filter-running")).toHaveClass(/\bactive\b/);
    await expect(page.getByTestId("filter-cancelled")).not.toHaveClass(/\bactive\b/);
    await expect(page.getByTestId("filter-all")).toHaveAttribute("href", "/jobs?scope=mine");
    expect(await page.evaluate(() => (window as any).stayed)).toBe(true);
    await alice.dispose();
  });

  test("an open Cancel confirmation stays open while its job starts, on the Jobs page and the job's page", async ({ page, baseURL }) => {
    // The job starts while the confirmation is open: its row, and the job page's body, are
    // drawn again. The confirmation is the page's, named by the job, so it stays.
    const alice = await apiAs(baseURL!, "alice");
    const carol = await apiAs(baseURL!, "carol");
    await signIn(page, "alice");
    for (const where of ["row", "page"]) {
      const job = await launch(alice, { template: "mistral-7b-sft", gpus: 8, pool: "hgx-h100", name: `e2e-cancel-${where}` });
      expect(job.state).toBe("admitted");
      await page.goto(where === "row" ? "/jobs?scope=mine" : `/jobs/${job.id}`);
      await hydrated(page);
      const scope = where === "row" ? page.getByTestId(`job-row-${job.id}`) : page.locator(".head-actions");
      const state = where === "row" ? page.getByTestId(`job-row-${job.id}`) : page.getByTestId("job-state");
      await scope.getByTestId("cancel").click();
      await expect(scope.getByRole("alertdialog")).toContainText(`Cancel e2e-cancel-${where}? It holds 8 GPUs (1 node) in hgx-h100.`);
      expect((await carol.post("/api/v1/sim/advance", { data: { seconds: 300 } })).ok()).toBeTruthy();
      if (where === "row") await expect(state).toHaveAttribute("data-state", "running");
      else await expect(state).toHaveText("running");
      await expect(scope.getByRole("alertdialog")).toBeVisible();
      await scope.getByTestId("confirm-cancel").click();
      if (where === "row") await expect(state).toHaveAttribute("data-state", "cancelled");
      else await expect(state).toHaveText("cancelled");
      expect((await (await alice.get(`/api/v1/jobs/${job.id}`)).json()).state).toBe("cancelled");
    }
    await carol.dispose();
    await alice.dispose();
  });

  test("a bad parameter is explained beside the field and Launch stays disabled", async ({ page }) => {
    await signIn(page, "alice");
    await page.goto("/launch/llama-3.1-8b-fsdp");
    await hydrated(page);
    const lr = page.locator('input[name="learning_rate"]');
    await lr.fill("fast");
    await expect(page.getByText("must be a number, e.g. 2e-5")).toBeVisible();
    await expect(page.getByTestId("launch-submit")).toBeDisabled();
    await lr.fill("0.5");
    await expect(page.getByText("must be between 1e-7 and 0.01")).toBeVisible();
    await lr.fill("2e-5");
    await expect(page.getByTestId("launch-submit")).toBeEnabled();
  });

  test("control: without the wasm bundle the Launch button does nothing", async ({ page, browserErrors }) => {
    // The blocked bundle is logged, and its loader throws: the point of the control.
    browserErrors.allow(/gantry(\.[A-Za-z0-9_-]+)?\.wasm\): Failed to load resource: net::ERR_FAILED/);
    browserErrors.allow(/uncaught on .*: TypeError: Failed to fetch/);
    await signIn(page, "alice");
    await page.route("**/*.wasm", (route) => route.abort());
    await page.goto("/launch/mistral-7b-sft");
    // Without the app the button shows itself unavailable (it takes no pointer), and a click
    // forced onto it launches nothing.
    const submit = page.getByTestId("launch-submit");
    expect(await submit.evaluate((e) => getComputedStyle(e).pointerEvents)).toBe("none");
    await submit.click({ force: true });
    await page.waitForTimeout(1500);
    await expect(page).toHaveURL(/\/launch\/mistral-7b-sft/);
  });

  test("signed out, pages offer the sign-in instead of data", async ({ page }) => {
    await page.goto("/jobs");
    await expect(page.getByRole("heading", { name: "Sign in to Gantry" })).toBeVisible();
  });
});

test.describe.serial("a job larger than the team's quota", () => {
  test.beforeEach(async ({ baseURL }) => {
    await cancelEverything(baseURL!);
  });

  test("the form warns, asks for a second click, and the job waits saying why", async ({ page }) => {
    // vision may hold 8 + 8 GPUs in hgx-h200: 32 cannot start under the current quotas.
    await signIn(page, "dave");
    await page.goto("/launch/llama-3.1-8b-fsdp");
    await hydrated(page);
    await page.locator("select[name=pool]").selectOption("hgx-h200");
    await page.locator("label", { has: page.locator("input[name=gpus][value='32']") }).click();
    await expect(page.getByTestId("fit-cannot-start")).toContainText(
      "Cannot start under the current quotas: team vision may hold at most 16 GPUs in hgx-h200",
    );
    const submit = page.getByTestId("launch-submit");
    await submit.click();
    // The first click only warns.
    await expect(page.getByTestId("launch-confirm")).toContainText("cannot start under the current quotas");
    await expect(submit).toHaveText("Queue anyway on 32 GPUs (4 nodes)");
    await expect(page).toHaveURL(/\/launch\/llama-3.1-8b-fsdp$/);
    await page.screenshot({ path: `${SHOTS}/launch-cannot-start.png`, fullPage: true });
    await submit.click();
    await expect(page).toHaveURL(/\/jobs\/[0-9a-f-]{36}$/);
    await hydrated(page);
    await expect(page.getByTestId("job-state")).toHaveText("queued");
    await expect(page.getByTestId("pending-reason")).toContainText("It starts once the team's quota or borrowing limit in hgx-h200 is raised");
  });
});
