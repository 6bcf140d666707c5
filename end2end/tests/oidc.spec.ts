import * as http from "node:http";
import { Page, request } from "@playwright/test";
import { idpPort, oidcPort } from "../playwright.config";
import { SHOTS, expect, hydrated, test } from "./helpers";

// Single sign-on against a real OpenID provider (oidc-provider, started by the config) and a
// Gantry configured with [auth.oidc] (fixtures/oidc.toml). Its sessions end 30 s after
// sign-in, so every test signs in afresh.
const gantry = `http://127.0.0.1:${oidcPort}`;
const idp = `http://127.0.0.1:${idpPort}`;

// The provider's own pages are not Gantry's: their console (a web font it cannot reach from
// here, its favicon) is not this suite's to judge. Gantry's pages are.
test.beforeEach(({ browserErrors }) => {
  browserErrors.allow(new RegExp(`^console error on ${idp}/`));
});

/** Clicks through Gantry's sign-in page and the provider's login form. */
async function startSignIn(page: Page, user: string) {
  await page.goto(`${gantry}/login`);
  await page.getByTestId("sso-login").click();
  await expect(page).toHaveURL(new RegExp(`^${idp}/`));
  await page.locator('input[name="login"]').fill(user);
  await page.locator('input[name="password"]').fill("correct horse battery staple");
}

async function ssoSignIn(page: Page, user: string) {
  await startSignIn(page, user);
  await page.locator('button[type="submit"]').click();
  await expect(page).toHaveURL(`${gantry}/`);
  await expect(page.getByTestId("viewer")).toBeVisible();
}

test("members, leads and admins sign in through the provider with their team and role, and sign out there too", async ({ page }) => {
  await page.goto(`${gantry}/login`);
  await expect(page.getByTestId("sso-login")).toHaveText("Sign in with Test IdP");
  await expect(page.getByTestId("login-alice")).toHaveCount(0); // no demo sign-in with OIDC
  expect((await page.request.post(`${gantry}/auth/dev/login`, { form: { user: "carol" } })).status()).toBe(404);
  await page.screenshot({ path: `${SHOTS}/oidc-login.png` });
  await ssoSignIn(page, "nina");
  await expect(page.getByTestId("viewer")).toHaveText("Nina Kowalski");
  await expect(page.getByTestId("viewer-role")).toHaveText("nlp member");
  await page.screenshot({ path: `${SHOTS}/oidc-member-home.png`, fullPage: true });
  // No admin pages for a member.
  await expect(page.getByRole("link", { name: "Quotas" })).toHaveCount(0);
  const me = await page.request.get(`${gantry}/api/v1/me`);
  expect(await me.json()).toMatchObject({ user: "nina", is_admin: false, teams: [{ team: "nlp", role: "member" }] });

  // Sign out: Gantry's session ends, then the provider's (RP-initiated logout).
  await page.getByRole("button", { name: "Sign out" }).click();
  await expect(page).toHaveURL(new RegExp(`^${idp}/session/end`));
  await page.getByRole("button", { name: "Yes, sign me out" }).click();
  await expect(page).toHaveURL(`${gantry}/login`);
  expect((await page.request.get(`${gantry}/api/v1/me`)).status()).toBe(401);
  // The provider forgot us too: signing in asks for the login form again.
  await page.getByTestId("sso-login").click();
  await expect(page.locator('input[name="login"]')).toBeVisible();

  // A lead of the same team.
  await page.locator('input[name="login"]').fill("leo");
  await page.locator('input[name="password"]').fill("pw");
  await page.locator('button[type="submit"]').click();
  await expect(page.getByTestId("viewer-role")).toHaveText("nlp lead");
  // Forget this browser's session only once the page follows its live stream: cleared while
  // the page still loads, the stream would open without a cookie and answer 401.
  await hydrated(page);
  await page.context().clearCookies();

  // An admin: the admin pages open.
  await ssoSignIn(page, "ada");
  await expect(page.getByTestId("viewer-role")).toHaveText("admin");
  await page.getByRole("link", { name: "Quotas" }).click();
  await expect(page.locator("h1")).toHaveText("Quotas");
});

// Starting a sign-in needs no credential: each start without a cookie stores a session. Kept
// for the sessions' 12 h idle time, anyone could fill the store by asking again and again.
test("a sign-in started and not finished keeps its session for minutes, a finished one for the idle time", async ({ page }) => {
  const anon = await request.newContext();
  const res = await anon.get(`${gantry}/auth/login`, { maxRedirects: 0 });
  expect(res.status()).toBe(303);
  const pending = (await anon.storageState()).cookies.find((c) => c.name === "gantry_session");
  expect(pending, "a session for the round trip").toBeTruthy();
  const now = Date.now() / 1000;
  expect(pending!.expires).toBeGreaterThan(now + 9 * 60);
  expect(pending!.expires).toBeLessThanOrEqual(now + 10 * 60 + 5);
  await anon.dispose();

  await ssoSignIn(page, "nina");
  const signedIn = (await page.context().cookies()).find((c) => c.name === "gantry_session");
  // The sessions' idle time (12 h by default), no longer the pending sign-in's 10 minutes.
  expect(signedIn!.expires).toBeGreaterThan(Date.now() / 1000 + 11 * 3600);
});

// Plain requests to start a sign-in without a cookie jar (node:http: fetch would add a
// Sec-Fetch-Mode of its own): each start is a new session, as from a script asking again and
// again.
const get = (headers: Record<string, string>) =>
  new Promise<{ status: number; headers: http.IncomingHttpHeaders; body: string }>((done, fail) => {
    const req = http.get(`${gantry}/auth/login`, { headers }, (res) => {
      let body = "";
      res.setEncoding("utf8");
      res.on("data", (chunk) => (body += chunk));
      res.on("end", () => done({ status: res.statusCode!, headers: res.headers, body }));
    });
    req.on("error", fail);
  });
const start = (from: string, cookie?: string) => get({ "x-forwarded-for": from, ...(cookie ? { cookie } : {}) });

// And each start without a cookie stores one: from one address only so many in 10 minutes.
test("sign-ins started without a cookie are bounded per address, so they cannot fill the session store", async ({ page, browserErrors }) => {
  // What a page elsewhere can make a visitor's browser ask for (an image, a frame, a script's
  // fetch): refused before it stores a session or counts against the address.
  for (const [mode, dest, purpose] of [
    ["no-cors", "image", ""],
    ["navigate", "iframe", ""],
    ["cors", "empty", ""],
    ["navigate", "document", "prefetch"],
    ["navigate", "document", "prefetch;prerender"],
  ]) {
    const res = await get({
      "x-forwarded-for": "198.51.100.7",
      "sec-fetch-mode": mode,
      "sec-fetch-dest": dest,
      "sec-fetch-site": "cross-site",
      ...(purpose ? { "sec-purpose": purpose } : {}),
    });
    expect(res.status, `${dest} ${purpose}`).toBe(403);
    expect(res.headers["set-cookie"], dest).toBeUndefined();
    expect(res.body).toContain("not from an image, a frame, a script or a prefetch");
  }
  // A browser's own navigation to it is a start like any other.
  const navigation = { "sec-fetch-mode": "navigate", "sec-fetch-dest": "document", "sec-fetch-site": "same-origin" };
  let kept = "";
  for (let i = 0; i < 100; i++) {
    const res = await (i % 2 ? start("198.51.100.7") : get({ "x-forwarded-for": "198.51.100.7", ...navigation }));
    expect(res.status, `start ${i + 1}`).toBe(303);
    kept = res.headers["set-cookie"]![0].split(";")[0];
  }
  const refused = await start("198.51.100.7");
  expect(refused.status).toBe(429);
  expect(Number(refused.headers["retry-after"])).toBeGreaterThan(500);
  expect(Number(refused.headers["retry-after"])).toBeLessThanOrEqual(600);
  expect(refused.headers["set-cookie"], "no session stored").toBeUndefined();
  expect(refused.body).toContain("Too many sign-ins were started from your address in the last 10 minutes and not finished.");
  // What the person sees, on a wide screen and a phone.
  browserErrors.allow(/status of 429 \(Too Many Requests\)/);
  await page.setExtraHTTPHeaders({ "x-forwarded-for": "198.51.100.7" });
  for (const [width, height] of [[1440, 900], [390, 844]]) {
    await page.setViewportSize({ width, height });
    const res = await page.goto(`${gantry}/auth/login`);
    expect(res!.status()).toBe(429);
    await expect(page.getByTestId("sign-in-failed")).toContainText("Try again in 10 min");
    expect(await page.evaluate(() => document.documentElement.scrollWidth)).toBeLessThanOrEqual(width);
    await page.screenshot({ path: `${SHOTS}/oidc-too-many-${width}.png`, fullPage: true });
  }
  await page.setExtraHTTPHeaders({});
  // A made-up cookie is no session: still refused.
  expect((await start("198.51.100.7", "gantry_session=AAAAAAAAAAAAAAAAAAAAAA")).status).toBe(429);
  // A browser holding its pending session starts again in it; another address is not held back.
  expect((await start("198.51.100.7", kept)).status).toBe(303);
  expect((await start("198.51.100.8")).status).toBe(303);
});

// What is bounded is the sign-ins left halfway: one that finishes gives its place back, so an
// office behind one address is not held back by its people signing in.
test("a sign-in that finishes is taken off its address's count", async ({ page }) => {
  const from = "198.51.100.20";
  for (let i = 0; i < 99; i++) {
    expect((await start(from)).status, `start ${i + 1}`).toBe(303);
  }
  // The hundredth, the bound (fixtures/oidc.toml keeps the default 100), is a person's, and
  // they finish it.
  await page.setExtraHTTPHeaders({ "x-forwarded-for": from });
  // Started once by hand and again from the sign-in page, in the same pending session: still
  // one start, and the one its finish gives back.
  await page.goto(`${gantry}/auth/login`);
  await expect(page).toHaveURL(new RegExp(`^${idp}/`));
  await ssoSignIn(page, "nina");
  await page.setExtraHTTPHeaders({});
  // Its place came back: one more start fits, then the bound holds.
  expect((await start(from)).status).toBe(303);
  expect((await start(from)).status).toBe(429);
});

// A finished sign-in makes a signed-in session and is off its address's count: so many per
// person, or a script holding one account (after the first round trip the provider answers
// by its own session) could make sessions without end.
test("one person may finish only so many sign-ins in 10 minutes", async ({ page, browserErrors }) => {
  browserErrors.allow(/status of 429 \(Too Many Requests\)/);
  // Each sign-in replaces the session of the page before it, whose first reads (its
  // notifications) may still be on their way: those are refused, as they should be.
  browserErrors.allow(/status of 401 \(Unauthorized\)/);
  await ssoSignIn(page, "omar");
  for (let i = 2; i <= 20; i++) {
    await page.goto(`${gantry}/auth/login`);
    await expect(page, `sign-in ${i}`).toHaveURL(`${gantry}/`);
  }
  const refused = await page.goto(`${gantry}/auth/login`);
  expect(refused!.status()).toBe(429);
  expect(Number(await refused!.headerValue("retry-after"))).toBeGreaterThan(500);
  await expect(page.getByTestId("sign-in-failed")).toContainText("You have signed in 20 times in the last 10 minutes");
  await page.screenshot({ path: `${SHOTS}/oidc-too-often.png`, fullPage: true });
  // The sessions made before still work.
  expect((await page.request.get(`${gantry}/api/v1/me`)).status()).toBe(200);
});

test("a token made under single sign-on says it works while its owner keeps signing in", async ({ page }) => {
  await ssoSignIn(page, "nina");
  await page.goto(`${gantry}/profile`);
  await hydrated(page);
  await page.getByTestId("token-name").fill("ci-pipeline");
  await page.getByTestId("token-create").click();
  await expect(page.getByTestId("token-created")).toContainText("It works while you sign in to Gantry at least every 30 days");
  await page.screenshot({ path: `${SHOTS}/oidc-token-created.png`, fullPage: true });
  // And it works: nina signed in just now.
  const token = await page.getByTestId("token-secret").inputValue();
  const plain = await request.newContext();
  const me = await plain.get(`${gantry}/api/v1/me`, { headers: { authorization: `Bearer ${token}` } });
  expect(me.status()).toBe(200);
  expect((await me.json()).user).toBe("nina");
  await plain.dispose();
});

test("someone whose groups map to no team sees a page saying so, not an error", async ({ page, browserErrors }) => {
  // The page is a refusal (403): the browser logs that status.
  browserErrors.allow(/status of 403 \(Forbidden\)/);
  await ssoSignIn(page, "zed");
  await expect(page.getByTestId("no-team")).toContainText("none of your groups at the identity provider gives you a Gantry team");
  await expect(page.getByTestId("viewer-role")).toHaveText("no team");
  await page.screenshot({ path: `${SHOTS}/oidc-no-team.png`, fullPage: true });
  // The API agrees: no team, no jobs, and a launch names the problem.
  const launch = await page.request.post(`${gantry}/api/v1/jobs`, {
    data: { template: "llama-3.1-8b-fsdp", gpus: 8 },
    headers: { origin: gantry },
  });
  expect(launch.status()).toBe(422);
  expect((await launch.json()).error.field).toBe("team");
});

/**
 * Runs a sign-in over HTTP in the page's cookie jar (so Gantry keeps the attempt in the
 * browser's session) — Gantry's /auth/login, the provider's own login form, its redirects —
 * and stops at the redirect back to Gantry: returns that callback URL, not yet visited.
 */
async function callbackFor(page: Page, user: string): Promise<URL> {
  let res = await page.request.get(`${gantry}/auth/login`, { maxRedirects: 0 });
  for (let hops = 0; hops < 10; hops++) {
    if (res.status() === 200) {
      // The provider's login form.
      const html = await res.text();
      const action = /<form[^>]*action="([^"]+)"/.exec(html)![1];
      res = await page.request.post(new URL(action, idp).toString(), {
        form: { prompt: "login", login: user, password: "pw" },
        maxRedirects: 0,
      });
      continue;
    }
    expect(res.status(), await res.text()).toBeGreaterThanOrEqual(300);
    const next = new URL(res.headers()["location"], res.url());
    if (next.toString().startsWith(`${gantry}/auth/callback`)) return next;
    res = await page.request.get(next.toString(), { maxRedirects: 0 });
  }
  throw new Error("no redirect back to Gantry");
}

test("a tampered state is refused with a clear page and signs nobody in", async ({ page, browserErrors }) => {
  browserErrors.allow(/auth\/callback\?.*status of 400 \(Bad Request\)/);
  const callback = await callbackFor(page, "nina");
  expect(callback.searchParams.get("code")).toBeTruthy();
  const tampered = new URL(callback);
  tampered.searchParams.set("state", callback.searchParams.get("state")!.slice(0, -2) + "xx");
  const res = await page.goto(tampered.toString());
  expect(res!.status()).toBe(400);
  await expect(page.getByTestId("sign-in-failed")).toContainText("state parameter does not match");
  await page.screenshot({ path: `${SHOTS}/oidc-tampered-state.png` });
  expect((await page.request.get(`${gantry}/api/v1/me`)).status()).toBe(401);
  // The untampered link is worthless now too: the attempt was used up.
  await page.goto(callback.toString());
  await expect(page.getByTestId("sign-in-failed")).toContainText("No sign-in was started in this browser");
  expect((await page.request.get(`${gantry}/api/v1/me`)).status()).toBe(401);
});

const sessionCookie = async (page: Page) =>
  (await page.context().cookies(gantry)).find((c) => c.name === "gantry_session");

test("a replayed authorization code is refused by the provider and by Gantry", async ({ page, browserErrors }) => {
  browserErrors.allow(/auth\/callback\?.*status of 401 \(Unauthorized\)/);
  const first = await callbackFor(page, "nina");
  const before = await sessionCookie(page);
  await page.goto(first.toString());
  await expect(page.getByTestId("viewer")).toHaveText("Nina Kowalski");
  // The session id changed at sign-in; the cookie is HttpOnly and SameSite=Lax (not Secure:
  // this test server is http on loopback).
  const after = await sessionCookie(page);
  expect(before).toBeTruthy();
  expect(after!.value).not.toBe(before!.value);
  expect(after).toMatchObject({ httpOnly: true, sameSite: "Lax", secure: false });
  // A second sign-in in the same browser (the provider answers at once: its session is
  // alive); offer Gantry the first, already used code with the new attempt's state.
  const second = await callbackFor(page, "nina");
  const replay = new URL(second);
  replay.searchParams.set("code", first.searchParams.get("code")!);
  const res = await page.goto(replay.toString());
  expect(res!.status()).toBe(401);
  await expect(page.getByTestId("sign-in-failed")).toContainText("did not accept the sign-in code");
  await page.screenshot({ path: `${SHOTS}/oidc-replayed-code.png` });
});

test("an ID token for another audience is refused", async ({ page, browserErrors }) => {
  browserErrors.allow(/auth\/callback\?.*status of 401 \(Unauthorized\)/);
  const ctl = await request.newContext();
  expect((await ctl.get(`${idp}/__test/tamper-audience?on=1`)).ok()).toBeTruthy();
  try {
    await startSignIn(page, "nina");
    await page.locator('button[type="submit"]').click();
    await expect(page.getByTestId("sign-in-failed")).toContainText("ID token failed verification");
    await expect(page.getByTestId("sign-in-failed")).toContainText("someone-else");
    await page.screenshot({ path: `${SHOTS}/oidc-wrong-audience.png` });
    expect((await page.request.get(`${gantry}/api/v1/me`)).status()).toBe(401);
  } finally {
    await ctl.get(`${idp}/__test/tamper-audience?on=0`);
    await ctl.dispose();
  }
});

test("a session past its absolute lifetime is refused and says it expired", async ({ page }) => {
  await ssoSignIn(page, "leo");
  expect((await page.request.get(`${gantry}/api/v1/me`)).status()).toBe(200);
  // fixtures/oidc.toml: session_absolute_minutes = 0.5.
  await page.waitForTimeout(31_000);
  await page.goto(`${gantry}/jobs`);
  await expect(page.getByTestId("session-ended")).toContainText("Your session expired");
  await page.screenshot({ path: `${SHOTS}/oidc-expired.png` });
  expect((await page.request.get(`${gantry}/api/v1/me`)).status()).toBe(401);
});
