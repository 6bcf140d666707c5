import type { Page } from "@playwright/test";
import { SHOTS, apiAs, cancelEverything, expect, hydrated, launch, signIn, test } from "./helpers";

/** 20 Mbit/s with 40 ms of latency, and no cache: the wasm takes seconds to arrive. */
async function slowLink(page: Page) {
  const cdp = await page.context().newCDPSession(page);
  await cdp.send("Network.enable");
  await cdp.send("Network.setCacheDisabled", { cacheDisabled: true });
  await cdp.send("Network.emulateNetworkConditions", {
    offline: false,
    latency: 40,
    downloadThroughput: (20 * 1024 * 1024) / 8,
    uploadThroughput: (20 * 1024 * 1024) / 8,
  });
}

/** Holds the app's wasm back until the returned function is called: the page stays as the
 * server rendered it, however fast the link or small the build. */
async function holdWasm(page: Page): Promise<() => void> {
  let release!: () => void;
  const held = new Promise<void>((r) => (release = r));
  await page.route(/\/pkg\/[^/]*\.wasm$/, async (route) => {
    await held;
    await route.continue();
  });
  return release;
}

/** Waits until the stylesheet has applied (it is small; the wasm is not). */
async function styled(page: Page) {
  await page.waitForFunction(() => [...document.styleSheets].some((s) => (s.href ?? "").endsWith(".css") && s.cssRules.length > 0));
}

// On a slow link the server-rendered page shows long before the wasm app makes it work. A
// click in between must not be lost in silence: the controls show themselves unavailable
// until the app has hydrated, and then they work.
test("a click before the page is interactive is visibly not taken, then the button works", async ({ page, baseURL }) => {
  await cancelEverything(baseURL!);
  const alice = await apiAs(baseURL!, "alice");
  const job = await launch(alice, { template: "mistral-7b-sft", gpus: 8, pool: "hgx-h100", name: "e2e-early-click" });
  await signIn(page, "alice");

  await slowLink(page);
  // The wasm is held back until the early click is made: release's 2.2 MB arrived in under
  // a second on this link, and the app had hydrated before the click, which it then took.
  const release = await holdWasm(page);
  await page.goto(`/jobs/${job.id}`, { waitUntil: "commit" });
  const cancel = page.getByTestId("cancel");
  await cancel.waitFor();
  await styled(page);
  const early = await cancel.evaluate((e) => ({
    hydrated: document.documentElement.classList.contains("hydrated"),
    pointer: getComputedStyle(e).pointerEvents,
    opacity: Number(getComputedStyle(e).opacity),
    cursor: getComputedStyle(e).cursor,
  }));
  expect(early.hydrated, "the check ran before the app hydrated").toBe(false);
  // Visibly unavailable: dimmed, a busy cursor, and it takes no clicks.
  expect(early.pointer).toBe("none");
  expect(early.opacity).toBeLessThan(1);
  expect(early.cursor).toBe("progress");
  await page.screenshot({ path: `${SHOTS}/job-before-hydration.png` });
  await cancel.click({ force: true });
  expect(await page.evaluate(() => document.documentElement.classList.contains("hydrated")), "the click came before the app hydrated").toBe(false);

  release();
  await hydrated(page);
  // The early click did nothing behind the person's back: no question asked, nothing cancelled.
  await expect(page.getByTestId("confirm-cancel")).toHaveCount(0);
  expect((await (await alice.get(`/api/v1/jobs/${job.id}`)).json()).state).not.toBe("cancelled");
  const now = await cancel.evaluate((e) => ({ pointer: getComputedStyle(e).pointerEvents, opacity: Number(getComputedStyle(e).opacity) }));
  expect(now).toEqual({ pointer: "auto", opacity: 1 });
  // Now the same click is taken.
  await cancel.click();
  await page.getByTestId("confirm-cancel").click();
  await expect(page.getByTestId("job-state")).toHaveText("cancelled");
  await alice.dispose();
});

// Plain forms work without the app and stay live while it loads: sign-in is one of them.
test("sign-in works before the app has hydrated", async ({ page }) => {
  await slowLink(page);
  const release = await holdWasm(page);
  await page.goto("/login", { waitUntil: "commit" });
  const button = page.getByTestId("login-alice");
  await button.waitFor();
  await styled(page);
  expect(await button.evaluate((e) => getComputedStyle(e).pointerEvents)).not.toBe("none");
  expect(await page.evaluate(() => document.documentElement.classList.contains("hydrated")), "the click comes before the app hydrated").toBe(false);
  await button.click();
  await expect(page.getByTestId("viewer")).toBeVisible();
  release();
});
