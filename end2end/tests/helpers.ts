import { APIRequestContext, Page, expect, request } from "@playwright/test";

export const SHOTS = "output/screenshots";

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
    const res = await admin.get(`/api/v1/jobs?state=${state}`);
    expect(res.ok()).toBeTruthy();
    for (const job of await res.json()) {
      const c = await admin.post(`/api/v1/jobs/${job.id}/cancel`);
      expect(c.ok(), `cancel ${job.id}`).toBeTruthy();
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
