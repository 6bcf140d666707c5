import { APIRequestContext, Page, test as base, expect, request } from "@playwright/test";

export const SHOTS = "output/screenshots";

/** What the browser logged as an error or threw, on any page of the test's context. */
export type BrowserErrors = {
  /** Errors so far (after the allowed ones are taken out). */
  list: () => string[];
  /** Expected errors, e.g. the console's line for a page that is meant to answer 403. */
  allow: (pattern: RegExp) => void;
};

/**
 * Every spec's `test`: it fails on any uncaught exception (a wasm panic among them) or console
 * error in the browser, on every page the test opens. A panic leaves the app dead until a
 * reload, and a hydration mismatch stops a page being interactive: neither may pass unseen.
 */
export const test = base.extend<{ browserErrors: BrowserErrors }>({
  browserErrors: [
    async ({ context }, use) => {
      const seen: string[] = [];
      const allowed: RegExp[] = [];
      const watch = (page: Page) => {
        page.on("pageerror", (e) => seen.push(`uncaught on ${page.url()}: ${e.stack ?? e.message}`));
        page.on("console", (m) => {
          if (m.type() === "error") seen.push(`console error on ${page.url()} (${m.location().url}): ${m.text()}`);
        });
      };
      context.pages().forEach(watch);
      context.on("page", watch);
      const list = () => seen.filter((e) => !allowed.some((a) => a.test(e)));
      await use({ list, allow: (pattern) => allowed.push(pattern) });
      // A panic may come a moment after the last step (a response landing late).
      await new Promise((r) => setTimeout(r, 200));
      expect(list(), "the browser threw or logged an error").toEqual([]);
    },
    { auto: true },
  ],
});

export { expect };

/** An API client signed in as `user` through the local sign-in. */
export async function apiAs(baseURL: string, user: string): Promise<APIRequestContext> {
  const ctx = await request.newContext({ baseURL });
  const res = await ctx.post("/auth/dev/login", { form: { user }, maxRedirects: 0 });
  expect(res.status(), `sign-in as ${user}`).toBe(303);
  return ctx;
}

/** Cancels every active job (as the admin) so each test starts from empty pools. */
export async function cancelEverything(baseURL: string) {
  const admin = await apiAs(baseURL, "carol");
  for (const state of ["queued", "admitted", "running"]) {
    // Each round cancels a page of them; cancelled jobs leave the filter, so the first
    // page is asked again until it is empty.
    for (;;) {
      const res = await admin.get(`/api/v1/jobs?state=${state}&limit=200`);
      expect(res.ok()).toBeTruthy();
      const page = await res.json();
      if (page.jobs.length === 0) break;
      for (const job of page.jobs) {
        const c = await admin.post(`/api/v1/jobs/${job.id}/cancel`);
        expect(c.ok(), `cancel ${job.id}`).toBeTruthy();
      }
    }
  }
  await admin.dispose();
}

export async function launch(api: APIRequestContext, body: object) {
  const res = await api.post("/api/v1/jobs", { data: body });
  expect(res.status(), await res.text()).toBe(201);
  return res.json();
}

/** Signs in through the login page, as a person would. */
export async function signIn(page: Page, user: string) {
  await page.goto("/login");
  await page.getByTestId(`login-${user}`).click();
  await expect(page.getByTestId("viewer")).toBeVisible();
}

/** Waits until the page has hydrated: the live stream connects only from the wasm app, and
 * interactive parts mark themselves `data-ready="true"` once their handlers are attached. */
export async function hydrated(page: Page) {
  await expect(page.locator(".live-dot.on")).toHaveCount(1);
  await expect(page.locator('[data-ready="false"]')).toHaveCount(0);
}
