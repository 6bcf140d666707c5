import { SHOTS, apiAs, cancelEverything, expect, hydrated, launch, signIn, test } from "./helpers";

test("the Pools page shows every node's 8 GPUs, names only the viewer's team's jobs, and follows the clock", async ({ page, baseURL }) => {
  await cancelEverything(baseURL!);
  const alice = await apiAs(baseURL!, "alice");
  const dave = await apiAs(baseURL!, "dave");
  const carol = await apiAs(baseURL!, "carol");
  await launch(alice, { template: "llama-3.1-8b-fsdp", gpus: 16, name: "e2e-grid-mine" });
  await launch(dave, { template: "mistral-7b-sft", gpus: 8, name: "e2e-grid-theirs" });
  expect((await carol.post("/api/v1/sim/advance", { data: { seconds: 900 } })).ok()).toBeTruthy();

  await signIn(page, "alice");
  await page.getByRole("link", { name: "Pools" }).click();
  await expect(page).toHaveURL(/\/pools$/);
  await hydrated(page);
  await page.evaluate(() => ((window as any).__noReload = true));
  const grid = page.getByTestId("grid-hgx-h100");
  await expect(grid.locator(".grid-cell")).toHaveCount(16 * 8);
  await expect(grid.locator('[data-job="e2e-grid-mine"]')).toHaveCount(16);
  await expect(grid.locator('[data-job="e2e-grid-theirs"]')).toHaveCount(0);
  await expect(grid.locator('[data-job="another team"]')).toHaveCount(8);
  await expect(grid).toContainText("24 of 128 GPUs held");
  await page.screenshot({ path: `${SHOTS}/pools-grid.png`, fullPage: true });
  const titles = () =>
    grid.locator('[data-job="e2e-grid-mine"]').evaluateAll((c) => c.map((e) => e.getAttribute("title")).join("|"));
  const before = await titles();

  // The clock moves to 62 minutes into the run, the sim's hourly evaluation dip: the
  // utilization changes in place (all 16 cells compared, not one that might round alike).
  expect((await carol.post("/api/v1/sim/advance", { data: { seconds: 2820 } })).ok()).toBeTruthy();
  await expect.poll(titles).not.toBe(before);
  expect(await page.evaluate(() => (window as any).__noReload)).toBe(true);
  await alice.dispose();
  await dave.dispose();
  await carol.dispose();
});
