import { SHOTS, apiAs, cancelEverything, expect, hydrated, launch, signIn, test } from "./helpers";

// A phone, 390 × 844: every page as every role fits the screen's width (the document never
// scrolls sideways; wide tables scroll inside their own box), and the menu holds the person's
// name and Sign out.
const PHONE = { width: 390, height: 844 };

const PAGES: Record<string, string[]> = {
  alice: ["/", "/jobs", "/jobs?scope=mine&state=queued", "/launch", "/launch/llama-3.1-8b-fsdp", "JOB", "/pools", "/profile"],
  bob: ["/", "/jobs", "/usage", "/pools", "JOB"],
  dave: ["/", "/jobs", "/launch", "/profile"],
  carol: ["/", "/jobs", "JOB", "/pools", "/usage", "/admin/quotas", "/admin/templates", "/admin/audit", "/admin/tokens", "/profile"],
};

test.describe.configure({ timeout: 240_000 });

for (const [user, paths] of Object.entries(PAGES)) {
  test(`every page fits a phone's width as ${user}`, async ({ page, baseURL }) => {
    await cancelEverything(baseURL!);
    const alice = await apiAs(baseURL!, "alice");
    const carol = await apiAs(baseURL!, "carol");
    const job = await launch(alice, { template: "llama-3.1-8b-fsdp", gpus: 16, pool: "hgx-h100", name: "e2e-phone",
      // A long value, as a real dataset path is: it must wrap in its panel, not run past it.
      params: { dataset: "s3://ml-datasets/instruct/v3/shards/customer-support-multilingual/train-00000-of-00064.parquet" },
    });
    expect((await carol.post("/api/v1/sim/advance", { data: { seconds: 600 } })).ok()).toBeTruthy();
    await signIn(page, user);
    await page.setViewportSize(PHONE);
    for (const p of paths) {
      const path = p === "JOB" ? `/jobs/${job.id}` : p;
      await page.goto(path);
      await hydrated(page);
      const width = await page.evaluate(() => ({
        doc: document.documentElement.scrollWidth,
        body: document.body.scrollWidth,
        view: window.innerWidth,
        widest: [...document.querySelectorAll("body *")]
          .map((e) => ({ e, r: e.getBoundingClientRect() }))
          .filter(({ r }) => r.right > window.innerWidth + 1)
          .slice(0, 3)
          .map(({ e, r }) => `${e.tagName.toLowerCase()}.${(e as HTMLElement).className} → ${Math.round(r.right)} px`),
      }));
      expect(width.doc, `${path} as ${user}: the page is ${width.doc} px wide (${width.widest.join("; ")})`).toBeLessThanOrEqual(width.view);
      // Only what cannot be narrower (a table, a chart, a log, code) may scroll inside its
      // panel; a form or text that does is cut off.
      const cut = await page.evaluate(() =>
        [...document.querySelectorAll(".panel")]
          .filter((p) => p.scrollWidth > p.clientWidth + 1 && !p.querySelector("table, svg, pre, code, .log-view, .heat"))
          .map((p) => `${(p as HTMLElement).className}: ${p.scrollWidth} px in ${p.clientWidth} px`),
      );
      expect(cut, `${path} as ${user}: panels wider than their box`).toEqual([]);
      if (p === "JOB") {
        const params = await page.getByTestId("job-params").evaluate((t) => ({
          table: t.scrollWidth,
          panel: t.closest(".panel")!.clientWidth,
        }));
        expect(params.table, `${path} as ${user}: the parameters table fits its panel`).toBeLessThanOrEqual(params.panel);
      }
      if (path === "/profile") {
        // The notification settings: every checkbox on the screen, not behind a sideways
        // scroll (only the Event column showed at 390 px).
        const prefs = await page.getByTestId("notification-prefs").evaluate((t) => ({
          table: t.scrollWidth,
          panel: t.closest(".panel")!.clientWidth,
          boxes: t.querySelectorAll("input[type=checkbox]").length,
          right: Math.max(...[...t.querySelectorAll("input[type=checkbox]")].map((c) => c.getBoundingClientRect().right)),
        }));
        expect(prefs.boxes, `${path} as ${user}: the notification settings have their checkboxes`).toBeGreaterThan(0);
        expect(prefs.table, `${path} as ${user}: the notification settings fit their panel`).toBeLessThanOrEqual(prefs.panel);
        expect(prefs.right, `${path} as ${user}: every checkbox is on the screen`).toBeLessThanOrEqual(PHONE.width);
      }
      if (path.startsWith("/launch/")) {
        const fit = (await page.getByTestId("fit-line").boundingBox())!;
        expect(fit.x + fit.width, "the fit line is in view").toBeLessThanOrEqual(PHONE.width);
      }
      const name = p === "JOB" ? "job" : path.replace(/[^a-z0-9]+/gi, "-").replace(/^-|-$/g, "") || "home";
      await page.screenshot({ path: `${SHOTS}/phone-${user}-${name.slice(0, 40)}.png`, fullPage: true });
    }
    // A row's Cancel confirmation fits the screen: its question wrapped nowhere and ran
    // 590 px wide, its "Keep it" past the table's end. And it is in view as it opens, with
    // nothing more to scroll: it opened at the table's right edge, half of it cut off by the
    // table's scroll box. Alice launched it; Bob leads her team; Carol is an admin. Dave
    // cannot see it.
    if (user !== "dave") {
      await page.goto("/jobs");
      await hydrated(page);
      const row = page.getByTestId(`job-row-${job.id}`);
      // Each job is a stacked row: every cell with something in it is on the screen and
      // none lies over another. In a sideways-scrolling table only three columns showed, and
      // the Cancel held at the screen's edge covered the job's name.
      const cells = await row.locator("td").evaluateAll((tds) =>
        tds
          .filter((td) => td.textContent!.trim() !== "")
          .map((td) => {
            const r = td.getBoundingClientRect();
            return { text: td.textContent!.trim().slice(0, 30), x: r.x, y: r.y, right: r.right, bottom: r.bottom };
          }),
      );
      expect(cells.length, "the row's cells: state, name, template, user, GPUs, pool, time, submitted, Cancel").toBeGreaterThanOrEqual(9);
      for (const c of cells) {
        expect(c.x, `"${c.text}" starts on the screen`).toBeGreaterThanOrEqual(0);
        expect(c.right, `"${c.text}" ends on the screen`).toBeLessThanOrEqual(PHONE.width);
      }
      for (const [i, a] of cells.entries()) {
        for (const b of cells.slice(i + 1)) {
          const overlap = a.x < b.right - 1 && b.x < a.right - 1 && a.y < b.bottom - 1 && b.y < a.bottom - 1;
          expect(overlap, `"${a.text}" and "${b.text}" do not overlap`).toBe(false);
        }
      }
      const opener = row.getByTestId("cancel");
      const o = (await opener.boundingBox())!;
      expect(o.x + o.width, "the row's Cancel is on the screen without scrolling the table").toBeLessThanOrEqual(PHONE.width);
      await opener.click();
      const dialog = row.getByRole("alertdialog");
      await expect(dialog).toContainText("Cancel e2e-phone?");
      const keep = dialog.getByRole("button", { name: "Keep it" });
      // On a phone the table is its own scroll box: what lies outside its box is cut off.
      const t = (await page.getByTestId("jobs-table").boundingBox())!;
      const d = (await dialog.boundingBox())!;
      expect(d.width, "the confirmation is narrower than the screen").toBeLessThan(PHONE.width);
      expect(d.x, "and all of it is in view, in the table's box and on the screen").toBeGreaterThanOrEqual(Math.max(0, t.x));
      expect(d.x + d.width).toBeLessThanOrEqual(Math.min(PHONE.width, t.x + t.width));
      await page.screenshot({ path: `${SHOTS}/phone-${user}-row-cancel.png` });
      await keep.click();
      await expect(dialog).toHaveCount(0);
    }
    // The menu holds who is signed in and Sign out, within the screen.
    await page.goto("/");
    await hydrated(page);
    await page.getByTestId("menu-toggle").click();
    for (const el of [page.getByTestId("viewer"), page.getByRole("button", { name: "Sign out" })]) {
      await expect(el).toBeVisible();
      const box = (await el.boundingBox())!;
      expect(box.x + box.width).toBeLessThanOrEqual(PHONE.width);
    }
    await page.screenshot({ path: `${SHOTS}/phone-${user}-menu.png` });
    // The bell's list opens within the screen: it opened leftwards, off the screen's left
    // edge, where the document's width never shows it.
    await page.getByTestId("bell").click();
    const list = page.getByTestId("notifications");
    await expect(list).toBeVisible();
    const b = (await list.boundingBox())!;
    expect(b.x, "the notifications list starts on the screen").toBeGreaterThanOrEqual(0);
    expect(b.x + b.width, "and ends on it").toBeLessThanOrEqual(PHONE.width);
    await page.screenshot({ path: `${SHOTS}/phone-${user}-bell.png` });
    await alice.dispose();
    await carol.dispose();
  });
}

test("signed out, the sign-in page fits a phone", async ({ page }) => {
  await page.setViewportSize(PHONE);
  await page.goto("/login");
  const doc = await page.evaluate(() => document.documentElement.scrollWidth);
  expect(doc).toBeLessThanOrEqual(PHONE.width);
});

test("on a wide screen the menu's parts sit in the bar and there is no Menu button", async ({ page }) => {
  await page.setViewportSize({ width: 1440, height: 900 });
  await signIn(page, "carol");
  await hydrated(page);
  await expect(page.getByTestId("menu-toggle")).toBeHidden();
  await expect(page.getByRole("link", { name: "Audit log" })).toBeVisible();
  await expect(page.getByRole("button", { name: "Sign out" })).toBeVisible();
  expect(await page.evaluate(() => document.documentElement.scrollWidth)).toBeLessThanOrEqual(1440);
  await page.screenshot({ path: `${SHOTS}/wide-home.png` });
});

// A tablet, and a narrow desktop window: an admin's bar (five admin links, the name, the
// role, Sign out) fits from the widest phone up to where it fits on one line.
test("between a phone and a wide screen the bar fits as an admin", async ({ page }) => {
  await signIn(page, "carol");
  for (const width of [700, 820, 900, 1000, 1100]) {
    await page.setViewportSize({ width, height: 900 });
    await page.goto("/admin/tokens");
    await hydrated(page);
    expect(await page.evaluate(() => document.documentElement.scrollWidth), `${width} px`).toBeLessThanOrEqual(width);
    const signOut = page.getByRole("button", { name: "Sign out" });
    if (await page.getByTestId("menu-toggle").isVisible()) {
      await page.getByTestId("menu-toggle").click();
    }
    await expect(signOut, `${width} px`).toBeInViewport();
  }
});
