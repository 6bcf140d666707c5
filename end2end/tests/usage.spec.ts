import { readFileSync } from "fs";
import { SHOTS, apiAs, cancelEverything, expect, hydrated, launch, signIn, test } from "./helpers";

test("a lead's Usage page shows a chart and a table, and the CSV download has the same numbers", async ({ page, baseURL, browserErrors }) => {
  await cancelEverything(baseURL!);
  // One hour of 8 GPUs for nlp (the manual sim clock moves only when told).
  const alice = await apiAs(baseURL!, "alice");
  const carol = await apiAs(baseURL!, "carol");
  const job = await launch(alice, { template: "llama-3.1-8b-fsdp", gpus: 8, name: "e2e-usage" });
  expect(job.state).toBe("admitted");
  expect((await carol.post("/api/v1/sim/advance", { data: { seconds: 3600 } })).ok()).toBeTruthy();
  expect((await alice.post(`/api/v1/jobs/${job.id}/cancel`)).ok()).toBeTruthy();

  await signIn(page, "bob");
  await page.getByRole("link", { name: "Usage" }).click();
  await expect(page).toHaveURL(/\/usage$/);
  await hydrated(page);
  const chart = page.getByTestId("usage-chart").locator("svg");
  await expect(chart).toContainText("GPU-hours allocated per day, by team");
  await expect(chart).toContainText("efficiency (%)");
  await expect(page.getByTestId("usage-table")).toContainText("nlp");
  // Top jobs by GPU-hours: listed, largest first (other tests' nlp jobs may outrank ours).
  const top = page.getByTestId("top-jobs").locator("ol.top-jobs").first().locator("li .num");
  await expect(top.first()).toBeVisible();
  const figures = (await top.allTextContents()).map((t) => parseFloat(t));
  expect(figures).toEqual([...figures].sort((a, b) => b - a));
  expect(figures[0]).toBeGreaterThanOrEqual(8);
  await expect(page.getByTestId("quota-use")).toContainText("hgx-h100");
  await page.screenshot({ path: `${SHOTS}/usage-lead.png`, fullPage: true });

  // The page's numbers and the CSV's, row by row.
  const table = await page.getByTestId("usage-table").locator("tbody tr").evaluateAll((rows) =>
    rows.map((r) => {
      const cells = Array.from(r.querySelectorAll("td"));
      return [cells[0].textContent, cells[1].textContent, cells[2].getAttribute("data-allocated")].join(",");
    }),
  );
  expect(table.length).toBeGreaterThan(0);
  const href = await page.getByTestId("usage-csv").getAttribute("href");
  const download = page.waitForEvent("download");
  await page.getByTestId("usage-csv").click();
  const file = await (await download).path();
  const csv = readFileSync(file, "utf8").trim().split("\n");
  expect(csv[0]).toBe("bucket_start,team,gpu_hours_allocated,gpu_hours_used,gpu_hours_idle,gpu_hours_unmeasured,efficiency");
  const fromCsv = csv.slice(1).map((l: string) => l.split(",").slice(0, 3).join(","));
  expect(fromCsv).toEqual(table);
  const nlp = csv.slice(1).map((l: string) => l.split(",")).filter((c: string[]) => c[1] === "nlp");
  expect(nlp.reduce((s: number, c: string[]) => s + Number(c[2]), 0)).toBeGreaterThanOrEqual(8);
  expect(href).toContain("format=csv");

  // Grouping lives in the URL.
  await page.getByTestId("usage-group_by-user").click();
  await expect(page).toHaveURL(/group_by=user/);
  await expect(page.getByTestId("usage-table")).toContainText("alice");

  // A member has no Usage link and is told why if they go there anyway.
  await page.context().clearCookies();
  await signIn(page, "alice");
  await expect(page.getByRole("link", { name: "Usage" })).toHaveCount(0);
  // The browser logs the refused page's 403: expected here.
  browserErrors.allow(/\/usage\): Failed to load resource: the server responded with a status of 403/);
  const res = await page.goto("/usage");
  expect(res!.status()).toBe(403);
  await expect(page.getByTestId("refused")).toContainText("Usage reports are for team leads and platform admins.");
  await expect(page.getByTestId("usage-csv")).toHaveCount(0);
  await alice.dispose();
  await carol.dispose();
});
