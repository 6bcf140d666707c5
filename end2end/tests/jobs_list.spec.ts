import { SHOTS, apiAs, cancelEverything, expect, hydrated, launch, signIn, test } from "./helpers";

// The Jobs page pages and searches on the server: 50 rows a page with the total said, an
// "Older jobs" page by cursor, a search whose query is the page's URL, and a team column for
// an admin.
test("the Jobs page pages, searches on the server, and keeps the query in the URL", async ({ page, baseURL }) => {
  await cancelEverything(baseURL!);
  const alice = await apiAs(baseURL!, "alice");
  const carol = await apiAs(baseURL!, "carol");
  // Enough jobs for more than one page, whatever the demo data holds.
  for (let i = 0; i < 52; i++) {
    await launch(alice, { template: "mistral-7b-sft", gpus: 8, pool: "hgx-h100", name: `e2e-page-${i}` });
  }
  const needle = await launch(alice, { template: "llama-3.1-8b-fsdp", gpus: 8, pool: "hgx-h200", name: "e2e-Needle-in-haystack" });
  const total = (await (await alice.get("/api/v1/jobs?limit=1")).json()).total;
  expect(total).toBeGreaterThan(52);

  await signIn(page, "alice");
  await page.goto("/jobs");
  await hydrated(page);
  const rows = page.locator("[data-testid^=job-row-]");
  await expect(rows).toHaveCount(50);
  await expect(page.getByTestId("jobs-count")).toHaveText(`50 of ${total.toLocaleString("en-US")} jobs, newest first`);
  await expect(page.getByTestId("job-team")).toHaveCount(0);
  await page.getByTestId("page-older").click();
  await expect(page).toHaveURL(/cursor=/);
  await expect(page.getByTestId("jobs-count")).toContainText("(an older page)");
  await expect(rows.first()).not.toHaveAttribute("data-testid", `job-row-${needle.id}`);
  await page.getByTestId("page-newest").click();
  await expect(rows.first()).toHaveAttribute("data-testid", `job-row-${needle.id}`);

  // Search: case-insensitive, on the server, in the URL; Clear brings the whole list back.
  await page.getByTestId("search-q").fill("needle");
  await page.getByTestId("search-submit").click();
  await expect(page).toHaveURL(/[?&]q=needle/);
  await hydrated(page);
  await expect(rows).toHaveCount(1);
  await expect(page.getByTestId("jobs-count")).toHaveText("1 job, newest first");
  await page.screenshot({ path: `${SHOTS}/jobs-search.png`, fullPage: true });
  await page.getByTestId("search-pool").selectOption("hgx-h100");
  await page.getByTestId("search-submit").click();
  await expect(page).toHaveURL(/pool=hgx-h100/);
  await expect(page.getByTestId("jobs-empty")).toContainText("No jobs match this search");
  // The pools come with the viewer: the loaded page shows the chosen one, and Clear (a link,
  // followed in the page) sets the picker back to "any".
  await hydrated(page);
  await expect(page.getByTestId("search-pool")).toHaveValue("hgx-h100");
  await expect(page.getByTestId("search-pool").locator("option")).not.toHaveCount(1);
  await page.getByTestId("search-clear").click();
  await expect(rows).toHaveCount(50);
  await expect(page.getByTestId("search-pool")).toHaveValue("");
  await expect(page.getByTestId("search-q")).toHaveValue("");
  // A state chip keeps the search; the URL carries both.
  await page.goto("/jobs?q=e2e-page-5&state=admitted");
  await hydrated(page);
  await expect(page.getByTestId("search-q")).toHaveValue("e2e-page-5");
  for (const r of await rows.all()) await expect(r).toHaveAttribute("data-state", "admitted");

  // An admin sees every team, with a team column.
  await page.context().clearCookies();
  await signIn(page, "carol");
  await page.goto("/jobs?q=needle");
  await hydrated(page);
  await expect(page.getByTestId("scope-team")).toHaveText("All teams");
  await expect(page.getByTestId("job-team")).toHaveText(["nlp"]);
  await page.screenshot({ path: `${SHOTS}/jobs-admin.png`, fullPage: true });
  await alice.dispose();
  await carol.dispose();
});
