import { Page, Route } from "@playwright/test";
import { apiAs, cancelEverything, expect, hydrated, launch, signIn, test } from "./helpers";

// The GPU panel's answer lands after the job view it belongs to was replaced: leaving a job
// page for another job page while the panel reads its figures again. This once panicked in
// wasm ("you tried to access a reactive value which was defined at app/src/pages/job.rs:…, but
// it has already been disposed") and left the app dead until a reload.
//
// The panel's first figures come with the job; it reads them again itself when the cluster
// clock enters a new minute. The order that reaches the race, made deterministic by holding
// the server functions' answers: the clock moves, so job A's panel asks for its utilization
// (U, held); the viewer follows links to job B and then job C (same route, so the job view
// stays and its data is asked again twice). The answer for B lands while C's is still out: the
// job view runs again and disposes A's panel, whose view stays up because the page is loading.
// Then U lands, for a panel that is gone (`GpuPanel` drops it; `components::loaded` does the
// same for the job's own answer). Any panic fails this test (the shared fixture fails on any
// page error or console error).

const UTIL = /\/api\/get_job_utilization\d*$/;
const JOB = /\/api\/get_job\d+$/;

/** Holds matching requests until released, in the order the test chooses. */
async function gate(page: Page, pattern: RegExp) {
  const held: Route[] = [];
  let open = false;
  await page.route(pattern, async (r) => (open ? r.continue() : void held.push(r)));
  return {
    count: () => held.length,
    release: async () => {
      const answered = page.waitForResponse(pattern);
      await held.shift()!.continue();
      await answered;
    },
    open: async () => {
      open = true;
      for (const r of held.splice(0)) await r.continue();
    },
  };
}

/** A client-side navigation by a link, as a person following one. */
const follow = (page: Page, href: string) =>
  page.evaluate((h) => {
    const a = document.createElement("a");
    a.href = h;
    document.body.append(a);
    a.click();
    a.remove();
  }, href);

test("a GPU panel's answer landing after its job view was replaced breaks nothing", async ({ page, baseURL }) => {
  await cancelEverything(baseURL!);
  const bob = await apiAs(baseURL!, "bob");
  const carol = await apiAs(baseURL!, "carol");
  const a = await launch(bob, { template: "llama-3.1-8b-fsdp", gpus: 8, name: "e2e-race-a" });
  const b = await launch(bob, { template: "llama-3.1-8b-fsdp", gpus: 8, name: "e2e-race-b" });
  const c = await launch(bob, { template: "llama-3.1-8b-fsdp", gpus: 8, name: "e2e-race-c" });
  expect(a.state).toBe("admitted");
  expect((await carol.post("/api/v1/sim/advance", { data: { seconds: 1800 } })).ok()).toBeTruthy();

  await signIn(page, "bob");
  await page.goto("/jobs");
  await hydrated(page);
  await page.evaluate(() => ((window as any).__noReload = true));
  const util = await gate(page, UTIL);

  // Job A by its link: its GPU panel comes with it. The clock moves a few minutes: the
  // panel asks for its figures again, and that answer is held.
  await page.getByRole("link", { name: "e2e-race-a" }).click();
  await expect(page.getByTestId("gpu-heatmap")).toBeVisible();
  expect(util.count()).toBe(0);
  expect((await carol.post("/api/v1/sim/advance", { data: { seconds: 180 } })).ok()).toBeTruthy();
  await expect.poll(util.count).toBe(1);

  // To B, then to C while B's job answer is held.
  const job = await gate(page, JOB);
  await follow(page, `/jobs/${b.id}`);
  await expect.poll(job.count).toBe(1);
  await follow(page, `/jobs/${c.id}`);
  await expect(page).toHaveURL(new RegExp(`/jobs/${c.id}$`));

  // B's answer lands; C's is asked at once and held. A's view is still shown.
  await job.release();
  await expect.poll(job.count).toBe(1);
  await expect(page.getByTestId("job-name")).toHaveText("e2e-race-a");

  // A's GPU answer lands on A's disposed panel.
  await util.release();
  await page.waitForTimeout(500);

  // Everything else through: C shows, and the app still follows links without a reload.
  await job.open();
  await util.open();
  await expect(page.getByTestId("job-name")).toHaveText("e2e-race-c");
  await page.getByRole("navigation", { name: "Main" }).getByRole("link", { name: "Jobs", exact: true }).click();
  await expect(page.getByTestId("jobs-table")).toBeVisible();
  expect(await page.evaluate(() => (window as any).__noReload)).toBe(true);
  await page.unrouteAll({ behavior: "ignoreErrors" });
  await bob.dispose();
  await carol.dispose();
});
