import { expect, test } from "@playwright/test";
import { SHOTS, apiAs, cancelEverything, hydrated, launch, signIn } from "./helpers";

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
  const before = await grid.locator('[data-job="e2e-grid-mine"]').first().getAttribute("title");

  // The clock moves an hour into the run: utilization changes in place.
  expect((await carol.post("/api/v1/sim/advance", { data: { seconds: 3000 } })).ok()).toBeTruthy();
  await expect(grid.locator('[data-job="e2e-grid-mine"]').first()).not.toHaveAttribute("title", before!);
  expect(await page.evaluate(() => (window as any).__noReload)).toBe(true);
  await alice.dispose();
  await dave.dispose();
  await carol.dispose();
});
