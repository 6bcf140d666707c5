import { SHOTS, apiAs, cancelEverything, expect, hydrated, launch, signIn, test } from "./helpers";

test("a running job's logs follow live, search highlights, and download the whole log", async ({ page, baseURL }) => {
  await cancelEverything(baseURL!);
  const alice = await apiAs(baseURL!, "alice");
  const carol = await apiAs(baseURL!, "carol");
  const job = await launch(alice, { template: "mistral-7b-sft", gpus: 16, pool: "hgx-h100", name: "e2e-logs" });
  expect((await carol.post("/api/v1/sim/advance", { data: { seconds: 300 } })).ok()).toBeTruthy();

  await signIn(page, "alice");
  await page.goto(`/jobs/${job.id}`);
  await hydrated(page);
  const lines = page.getByTestId("log-lines");
  await expect(lines).toContainText("--node_rank=0");
  await expect(lines).toContainText("| loss ");
  const before = await lines.locator(".log-line").count();
  // The clock moves: new step lines arrive without a reload.
  expect((await carol.post("/api/v1/sim/advance", { data: { seconds: 120 } })).ok()).toBeTruthy();
  await expect.poll(async () => lines.locator(".log-line").count(), { timeout: 15_000 }).toBeGreaterThan(before);
  // Paused, new lines wait behind Resume.
  await page.getByTestId("logs-pause").click();
  const paused = await lines.locator(".log-line").count();
  expect((await carol.post("/api/v1/sim/advance", { data: { seconds: 120 } })).ok()).toBeTruthy();
  await expect(page.getByTestId("logs-resume")).toContainText(/Resume \([1-9]\d* new\)/, { timeout: 15_000 });
  expect(await lines.locator(".log-line").count()).toBe(paused);
  await page.getByTestId("logs-resume").click();
  await expect.poll(async () => lines.locator(".log-line").count()).toBeGreaterThan(paused);
  // Search highlights the matches.
  await page.getByTestId("logs-search").fill("nccl");
  await expect(lines.locator("mark").first()).toHaveText(/nccl/i);
  await expect(page.getByTestId("logs-matches")).toContainText("matching line");
  // All ranks, interleaved with a rank prefix.
  await page.getByTestId("logs-rank").selectOption("all");
  await expect(lines.locator(".log-rank").first()).toBeVisible();
  await expect(lines).toContainText("--node_rank=1");
  await page.screenshot({ path: `${SHOTS}/job-logs.png`, fullPage: true });
  const [download] = await Promise.all([page.waitForEvent("download"), page.getByTestId("logs-download").click()]);
  expect(download.suggestedFilename()).toBe(`job-${job.id}-all-ranks.log`);
  const text = await (await alice.get(`/api/v1/jobs/${job.id}/logs?rank=all&download=true`)).text();
  expect(text).toContain("[rank 1] ");
  await alice.dispose();
  await carol.dispose();
});

test("a failed job shows why with its highlighted lines; Re-run and Clone land on new jobs", async ({ page, baseURL, browserErrors }) => {
  // The first re-run's answer is dropped on purpose (below): the browser logs that.
  browserErrors.allow(/rerun_job/);
  await cancelEverything(baseURL!);
  const alice = await apiAs(baseURL!, "alice");
  const carol = await apiAs(baseURL!, "carol");
  // Re-runs are numbered per name in a team: a name of its own keeps this run's "re-run 1"
  // its first, when the test runs again against the same server (--repeat-each).
  const name = `e2e-oom-${Date.now().toString(36)}`;
  const job = await launch(alice, {
    template: "mistral-7b-sft",
    gpus: 8,
    pool: "hgx-h100",
    name,
    params: { sim_fail_after_s: 600, sim_fail_reason: "OOMKilled" },
  });
  expect((await carol.post("/api/v1/sim/advance", { data: { seconds: 660 } })).ok()).toBeTruthy();
  // The keeper reads why it failed within a few seconds.
  await expect
    .poll(async () => (await (await alice.get(`/api/v1/jobs/${job.id}`)).json()).failure?.reason, { timeout: 15_000 })
    .toBe("OOMKilled");

  await signIn(page, "alice");
  await page.goto(`/jobs/${job.id}`);
  await hydrated(page);
  await expect(page.getByTestId("failure-reason")).toContainText("A worker ran out of memory (OOMKilled)");
  await expect(page.getByTestId("failure-exit")).toContainText("exit code 137 (OOMKilled)");
  await expect(page.getByTestId("failure-where")).toContainText("node rank 0");
  const failing = page.getByTestId("failure-lines");
  await expect(failing.locator(".log-error").first()).toBeVisible();
  await expect(failing).toContainText("CUDA out of memory");
  await page.screenshot({ path: `${SHOTS}/job-failed-reason.png`, fullPage: true });

  // Re-run: one confirmation, then the new job's page, linked back. The first answer is
  // lost on the way back (the server stored and sent the job, and the page, told of its new
  // re-run, draws its buttons again); re-running again from the same page finds that job
  // instead of making another.
  let dropped = 0;
  await page.route(/\/api\/rerun_job/, async (route) => {
    if (dropped++ === 0) {
      await route.fetch();
      await route.abort("connectionreset");
    } else {
      await route.continue();
    }
  });
  await page.getByTestId("rerun").click();
  await page.getByTestId("confirm-rerun").click();
  await expect(page.locator(".rerun .field-error")).toBeVisible();
  await expect(page.getByTestId("clones")).toContainText(`${name} · re-run 1`);
  if (!(await page.getByTestId("confirm-rerun").isVisible())) await page.getByTestId("rerun").click();
  await page.getByTestId("confirm-rerun").click();
  await expect(page).not.toHaveURL(new RegExp(`/jobs/${job.id}$`));
  await expect(page.getByTestId("job-name")).toHaveText(`${name} · re-run 1`);
  await expect(page.getByTestId("cloned-from")).toContainText(name);
  const rerunUrl = page.url();
  const rerun = await (await alice.get(`/api/v1/jobs/${rerunUrl.split("/").pop()}`)).json();
  expect(rerun.params).toEqual(job.params);
  expect(rerun.gpus).toBe(8);

  // Clone: the form filled with the original's values; a change is listed; launch.
  await page.goto(`/jobs/${job.id}`);
  await hydrated(page);
  await page.getByTestId("clone").click();
  await expect(page.getByTestId("clone-note")).toContainText("Cloned from");
  await expect(page.getByTestId("clone-same")).toBeVisible();
  await hydrated(page);
  await page.locator('input[name="max_runtime_h"]').fill("3.25");
  await expect(page.getByTestId("clone-differences")).toContainText("max runtime");
  await page.screenshot({ path: `${SHOTS}/launch-clone.png`, fullPage: true });
  await page.getByTestId("launch-submit").click();
  await expect(page.getByTestId("cloned-from")).toContainText(name);
  await expect(page.getByTestId("job-name")).toHaveText(`${name} · clone`);
  await page.goto(`/jobs/${job.id}`);
  await expect(page.getByTestId("clones")).toContainText(`${name} · clone`);
  await expect(page.getByTestId("clones")).toContainText(`${name} · re-run 1`);
  await expect(page.getByTestId("clones")).not.toContainText("re-run 2");
  expect(dropped).toBe(2);
  // A re-run launched elsewhere (a teammate, another tab) shows up on the open page without
  // a reload: the page follows new re-runs and clones of its job.
  await hydrated(page);
  const bob = await apiAs(baseURL!, "bob");
  const again = await bob.post(`/api/v1/jobs/${job.id}/rerun`);
  expect(again.status()).toBe(201);
  const second = await again.json();
  await expect(page.getByTestId("clones").locator(`a[href="/jobs/${second.id}"]`)).toHaveText(second.name, {
    timeout: 10_000,
  });
  await bob.dispose();
  await alice.dispose();
  await carol.dispose();
});

test("a notification appears in the top bar when a job starts, and settings save", async ({ page, baseURL }) => {
  await cancelEverything(baseURL!);
  const alice = await apiAs(baseURL!, "alice");
  const carol = await apiAs(baseURL!, "carol");
  await alice.post("/api/v1/notifications/read", { data: { all: true } });
  await signIn(page, "alice");
  await page.goto("/");
  await hydrated(page);
  await expect(page.getByTestId("bell")).toBeVisible();
  const job = await launch(alice, { template: "mistral-7b-sft", gpus: 8, pool: "hgx-h100", name: "e2e-notify" });
  expect((await carol.post("/api/v1/sim/advance", { data: { seconds: 60 } })).ok()).toBeTruthy();
  // The live stream brings the change; the bell counts it without a reload.
  await expect(page.getByTestId("bell-count")).toBeVisible({ timeout: 15_000 });
  await page.getByTestId("bell").click();
  const item = page.getByTestId("notification").filter({ hasText: "e2e-notify" }).first();
  await expect(item).toContainText("Job e2e-notify started: 8 GPUs");
  await expect(item.locator("a")).toHaveAttribute("href", `/jobs/${job.id}`);
  await page.screenshot({ path: `${SHOTS}/notifications.png`, fullPage: false });
  await page.getByTestId("mark-all-read").click();
  await expect(page.getByTestId("bell-count")).toHaveCount(0);

  await page.goto("/profile#notifications");
  await hydrated(page);
  await expect(page.getByTestId("pref-failed")).toBeVisible();
  await page.getByRole("checkbox", { name: "Succeeded: in Gantry" }).uncheck();
  await page.getByTestId("save-prefs").click();
  await expect(page.getByTestId("prefs-saved")).toBeVisible();
  const settings = await (await alice.get("/api/v1/notifications/settings")).json();
  expect(settings.prefs.find((p: { event: string }) => p.event === "succeeded").in_app).toBe(false);
  await page.getByTestId("webhook-url").fill("https://hooks.example.com/services/T0/B0/secretpath");
  await page.getByTestId("webhook-add").click();
  await expect(page.getByTestId("webhook-created")).toContainText("shown once");
  // The address leaves the field once added: it is the credential itself.
  await expect(page.getByTestId("webhook-url")).toHaveValue("");
  await page.screenshot({ path: `${SHOTS}/profile-notifications.png`, fullPage: true });
  await alice.put("/api/v1/notifications/settings", {
    data: { prefs: settings.prefs.map((p: { event: string }) => ({ ...p, in_app: true })) },
  });
  await alice.dispose();
  await carol.dispose();
});

test("with the browser channel on, a job's start shows as a browser notification", async ({ page, baseURL }) => {
  await cancelEverything(baseURL!);
  const alice = await apiAs(baseURL!, "alice");
  const carol = await apiAs(baseURL!, "carol");
  const settings = await (await alice.get("/api/v1/notifications/settings")).json();
  const prefs = settings.prefs.map((p: { event: string }) => (p.event === "started" ? { ...p, in_app: true, browser: true } : p));
  expect((await alice.put("/api/v1/notifications/settings", { data: { prefs } })).ok()).toBeTruthy();
  // The page's Notification, recorded: headless Chromium shows none, so the test reads
  // what the app asked the browser to show.
  await page.addInitScript(() => {
    const shown: string[] = [];
    (window as any).__shown = shown;
    class FakeNotification {
      static permission = "granted";
      static requestPermission() {
        return Promise.resolve("granted");
      }
      constructor(title: string) {
        shown.push(title);
      }
    }
    (window as any).Notification = FakeNotification;
  });
  await signIn(page, "alice");
  await page.goto("/jobs");
  await hydrated(page);
  const job = await launch(alice, { template: "mistral-7b-sft", gpus: 8, pool: "hgx-h100", name: "e2e-browser-note" });
  expect((await carol.post("/api/v1/sim/advance", { data: { seconds: 60 } })).ok()).toBeTruthy();
  await expect
    .poll(async () => page.evaluate(() => (window as any).__shown as string[]), { timeout: 15_000 })
    .toContain("Gantry: Job e2e-browser-note started: 8 GPUs (1 node) in hgx-h100");
  expect(job.id).toBeTruthy();
  await alice.put("/api/v1/notifications/settings", { data: { prefs: settings.prefs } });
  await alice.dispose();
  await carol.dispose();
});

test("a long followed log keeps the newest 5,000 lines, says so, and the page stays usable", async ({ page, baseURL }) => {
  await cancelEverything(baseURL!);
  const alice = await apiAs(baseURL!, "alice");
  const carol = await apiAs(baseURL!, "carol");
  const job = await launch(alice, {
    template: "mistral-7b-sft",
    gpus: 8,
    pool: "hgx-h100",
    name: "e2e-long-log",
    max_runtime_s: 7 * 24 * 3600,
  });
  expect((await carol.post("/api/v1/sim/advance", { data: { seconds: 300 } })).ok()).toBeTruthy();
  await signIn(page, "alice");
  await page.goto(`/jobs/${job.id}`);
  await hydrated(page);
  const lines = page.getByTestId("log-lines");
  await expect(lines).toContainText("| loss ");
  await expect(page.getByTestId("logs-bounded")).toHaveCount(0);
  // 46 hours of training at a step line every 30 s: over 5,500 new lines in one burst.
  expect((await carol.post("/api/v1/sim/advance", { data: { seconds: 46 * 3600 } })).ok()).toBeTruthy();
  await expect(page.getByTestId("logs-bounded")).toContainText(/Showing the last 5,000 lines; [\d,]+ older lines were let go/, {
    timeout: 60_000,
  });
  await expect.poll(async () => lines.locator(".log-line").count(), { timeout: 30_000 }).toBe(5000);
  // The oldest lines (torchrun's start-up) were let go, the newest kept; the page still
  // answers: search marks a match.
  await expect(lines).not.toContainText("--node_rank=0");
  await expect(lines.locator(".log-line").last()).toContainText(/loss|checkpoint/);
  await page.getByTestId("logs-search").fill("checkpoint");
  await expect(lines.locator("mark").first()).toHaveText(/checkpoint/i, { timeout: 10_000 });
  await page.screenshot({ path: `${SHOTS}/job-logs-bounded.png` });
  await alice.dispose();
  await carol.dispose();
});
