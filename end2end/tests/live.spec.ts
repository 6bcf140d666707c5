import { apiAs, expect, hydrated, launch, signIn, test } from "./helpers";

// When the session ends while a page is open (signed out in another tab, the session past its
// lifetime), the server ends the live stream with an `end` event. The page stops following
// instead of reconnecting: a reconnect would answer 401, an error in the console (the shared
// fixture fails the test on it).
test("a page whose session ends stops its live stream without errors", async ({ page }) => {
  await signIn(page, "bob");
  await hydrated(page);
  const dot = page.locator(".live-dot");
  await expect(dot).toHaveClass(/\bon\b/);
  // Signed out elsewhere: the same cookie, another request.
  expect((await page.request.post("/auth/logout")).ok()).toBeTruthy();
  // The stream asks again who holds it every 2 s, then ends.
  await expect(dot).not.toHaveClass(/\bon\b/, { timeout: 8_000 });
  // Longer than a browser waits before reconnecting a stream that closed (about 3 s).
  await page.waitForTimeout(5_000);
  await expect(dot).toHaveAttribute("title", "Not live");
});

// A change made after a page was read but before its live stream opened never comes on the
// stream. The stream's first event says how many changes had been sent; the page, read with
// fewer, reads again. Here the stream is held back while a teammate launches a job and
// cancels it: nothing about that job happens after the stream opens, so only that count can
// bring its row to the Jobs page.
test("a change made before the page's live stream opened reaches the page from the stream, with nothing read again", async ({ page, baseURL }) => {
  const bob = await apiAs(baseURL!, "bob");
  await signIn(page, "alice");
  let release = () => {};
  const held = new Promise<void>((r) => (release = r));
  await page.route("**/api/v1/events*", async (route) => {
    await held;
    await route.continue();
  });
  await page.goto("/jobs");
  await expect(page.locator('[data-ready="false"]')).toHaveCount(0);
  await expect(page.locator(".live-dot.on")).toHaveCount(0);
  const job = await launch(bob, { template: "mistral-7b-sft", gpus: 8, pool: "hgx-h100", name: "e2e-before-the-stream" });
  expect((await bob.post(`/api/v1/jobs/${job.id}/cancel`, { data: {} })).status()).toBe(200);
  await page.waitForTimeout(1_000);
  await expect(page.getByTestId(`job-row-${job.id}`)).toHaveCount(0);
  // The stream opens from the count the page was read with, and the server sends first what
  // changed since: the page patches itself and reads nothing again.
  const reads: string[] = [];
  page.on("request", (r) => {
    const url = r.url();
    if (!url.includes("/api/v1/events") && !url.includes("/pkg/")) reads.push(url);
  });
  release();
  await hydrated(page);
  const row = page.getByTestId(`job-row-${job.id}`);
  await expect(row).toBeVisible({ timeout: 10_000 });
  await expect(row).toHaveAttribute("data-state", "cancelled");
  await page.waitForTimeout(1_000);
  expect(reads, "nothing read again").toEqual([]);
  await bob.dispose();
});
