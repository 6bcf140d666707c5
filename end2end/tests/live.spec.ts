import { expect, hydrated, signIn, test } from "./helpers";

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
