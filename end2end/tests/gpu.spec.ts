import { SHOTS, apiAs, cancelEverything, expect, hydrated, launch, signIn, test } from "./helpers";

test("the job page's GPU heatmap follows the cluster clock without a reload", async ({ page, baseURL }) => {
  await cancelEverything(baseURL!);
  const alice = await apiAs(baseURL!, "alice");
  const carol = await apiAs(baseURL!, "carol");
  const job = await launch(alice, { template: "llama-3.1-8b-fsdp", gpus: 16, name: "e2e-heatmap" });
  expect(job.state).toBe("admitted");
  expect((await carol.post("/api/v1/sim/advance", { data: { seconds: 1800 } })).ok()).toBeTruthy();

  await signIn(page, "alice");
  await page.goto(`/jobs/${job.id}`);
  await hydrated(page);
  await page.evaluate(() => ((window as any).__noReload = true));
  const heatmap = page.getByTestId("gpu-heatmap");
  await expect(heatmap.locator(".heat-row:not(.heat-labels)")).toHaveCount(2); // 16 GPUs: 2 nodes
  await expect(heatmap.locator(".heat-labels .heat-col")).toHaveText(["GPU 0", "GPU 1", "GPU 2", "GPU 3", "GPU 4", "GPU 5", "GPU 6", "GPU 7"]);
  await expect(heatmap.locator(".heat-cell")).toHaveCount(16);
  const before = await heatmap.getAttribute("data-at");
  const cellsBefore = await heatmap.locator(".heat-cell").evaluateAll((c) => c.map((e) => e.getAttribute("data-util")));
  await expect(page.getByTestId("gpu-panel")).toContainText("Mean utilization");
  await expect(page.getByTestId("gpu-panel")).toContainText("Power (mean per GPU)");
  await page.screenshot({ path: `${SHOTS}/job-gpu-heatmap.png`, fullPage: true });

  // The clock moves 47 minutes: the stream's tick brings a new heatmap in place.
  expect((await carol.post("/api/v1/sim/advance", { data: { seconds: 2820 } })).ok()).toBeTruthy();
  await expect(heatmap).not.toHaveAttribute("data-at", before!);
  const cellsAfter = await heatmap.locator(".heat-cell").evaluateAll((c) => c.map((e) => e.getAttribute("data-util")));
  expect(cellsAfter).not.toEqual(cellsBefore);
  expect(await page.evaluate(() => (window as any).__noReload)).toBe(true);
  await alice.dispose();
  await carol.dispose();
});
