import { Locator, Page } from "@playwright/test";
import { apiAs, cancelEverything, expect, hydrated, launch, signIn, test } from "./helpers";

// Leaving a page while its data is still on the way must not break the app: the answer lands
// after the page is gone (a wasm panic there left the app dead until a reload). Every server
// function answers 600 ms late here, so each page is still loading when the next link is
// clicked; the shared fixture fails the test on any panic or console error.

const DELAY_MS = 600;

/** Holds back every server function's answer (not the JSON API, not the live stream). */
async function slowServerFunctions(page: Page) {
  await page.route(/\/api\/(?!v1\/)/, async (route) => {
    await new Promise((r) => setTimeout(r, DELAY_MS));
    await route.continue().catch(() => {});
  });
}

const nav = (page: Page, name: string) => page.getByRole("navigation", { name: "Main" }).getByRole("link", { name, exact: true });

/** Opens `target` by a link, leaves by another as soon as `loading` shows, and checks that
 * the app still follows links without a reload once the late answers have landed. */
async function leaveWhileLoading(page: Page, target: Locator, loading: Locator, away = "Pools") {
  await target.click();
  await expect(loading).toBeVisible();
  await nav(page, away).click();
  await expect(page).toHaveURL(away === "Pools" ? /\/pools$/ : /\/jobs$/);
  // The Launch form asks three things one after the other: let every late answer land.
  await page.waitForTimeout(4 * DELAY_MS);
  await nav(page, "Home").click();
  await expect(page.getByRole("heading", { name: /^Hello, / })).toBeVisible();
  expect(await page.evaluate(() => (window as any).__noReload)).toBe(true);
}

test("leaving any page while it loads, by links, never breaks the app", async ({ page, baseURL }) => {
  // Every server function answers 600 ms late, on purpose, through some twenty page visits.
  test.setTimeout(120_000);
  await cancelEverything(baseURL!);
  const bob = await apiAs(baseURL!, "bob");
  const carol = await apiAs(baseURL!, "carol");
  const job = await launch(bob, { template: "llama-3.1-8b-fsdp", gpus: 8, name: "e2e-leave-early" });
  expect(job.state).toBe("admitted");
  // Half an hour of running: the job page has a GPU panel with figures to load.
  expect((await carol.post("/api/v1/sim/advance", { data: { seconds: 1800 } })).ok()).toBeTruthy();

  // bob leads nlp: every page but the admin ones.
  await signIn(page, "bob");
  await hydrated(page);
  await page.evaluate(() => ((window as any).__noReload = true));
  await slowServerFunctions(page);
  const loading = page.getByText("Loading", { exact: false }).first();

  await leaveWhileLoading(page, nav(page, "Launch"), page.getByText("Loading templates…"));
  // The Launch form, from its card.
  await nav(page, "Launch").click();
  const card = page.getByTestId("template-llama-3.1-8b-fsdp");
  await expect(card).toBeVisible();
  await leaveWhileLoading(page, card, loading);
  await leaveWhileLoading(page, nav(page, "Jobs"), loading);
  // The job page, from the Jobs list, while the job (its GPU panel with it) loads.
  await nav(page, "Jobs").click();
  const jobLink = page.getByRole("link", { name: "e2e-leave-early" });
  await expect(jobLink).toBeVisible();
  await leaveWhileLoading(page, jobLink, loading);
  await leaveWhileLoading(page, nav(page, "Pools"), page.getByText("Loading pools…"), "Jobs");
  await nav(page, "Jobs").click();
  await expect(page.getByTestId("jobs-table")).toBeVisible();
  await leaveWhileLoading(page, nav(page, "Home"), loading);
  await leaveWhileLoading(page, page.locator('header a[href="/usage"]'), page.getByText("Loading usage…"));
  await leaveWhileLoading(page, page.getByTestId("viewer"), page.getByText("Loading tokens…"));

  // carol, an admin: the admin pages.
  await page.unrouteAll({ behavior: "wait" });
  await signIn(page, "carol");
  await hydrated(page);
  await page.evaluate(() => ((window as any).__noReload = true));
  await slowServerFunctions(page);
  await leaveWhileLoading(page, page.locator('header a[href="/admin/quotas"]'), page.getByText("Loading quotas…"));
  await leaveWhileLoading(page, page.locator('header a[href="/admin/templates"]'), page.getByText("Loading templates…"));
  await leaveWhileLoading(page, page.locator('header a[href="/admin/audit"]'), page.getByText("Loading the audit log…"));
  await page.unrouteAll({ behavior: "wait" });
  await bob.dispose();
  await carol.dispose();
});
