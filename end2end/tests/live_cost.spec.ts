import { apiAs, cancelEverything, expect, hydrated, launch, signIn, test } from "./helpers";
import type { Page, Request } from "@playwright/test";

/** Every request the page makes from now on but the live stream itself, with its bytes. */
function meter(page: Page) {
  const seen: { url: string; bytes: number }[] = [];
  const on = async (r: Request) => {
    if (r.url().includes("/api/v1/events")) return;
    const sizes = await r.sizes().catch(() => ({ responseBodySize: 0, responseHeadersSize: 0 }));
    seen.push({ url: r.url(), bytes: sizes.responseBodySize + sizes.responseHeadersSize });
  };
  page.on("requestfinished", on);
  return {
    seen,
    stop: () => page.off("requestfinished", on),
    bytes: () => seen.reduce((n, s) => n + s.bytes, 0),
  };
}

// What a teammate's five launches cost pages that are open meanwhile: a job page of another
// pool refetches nothing (its own job did not change, its pool's queue did not move); the
// Jobs page folds the five changes into a refetch or two.
test("a teammate's five launches cost an unrelated job page no request and the Jobs page a few", async ({ page, baseURL }) => {
  await cancelEverything(baseURL!);
  const alice = await apiAs(baseURL!, "alice");
  const bob = await apiAs(baseURL!, "bob");
  const mine = await launch(alice, { template: "mistral-7b-sft", gpus: 8, pool: "hgx-h200", name: "e2e-quiet" });
  await signIn(page, "alice");

  await page.goto(`/jobs/${mine.id}`);
  await hydrated(page);
  let m = meter(page);
  for (let i = 0; i < 5; i++) {
    await launch(bob, { template: "mistral-7b-sft", gpus: 8, pool: "hgx-h100", name: `e2e-teammate-${i}` });
  }
  await page.waitForTimeout(4000);
  m.stop();
  console.log(`job page: ${m.seen.length} requests, ${m.bytes()} bytes for 5 launches by a teammate: ${m.seen.map((s) => s.url).join(", ")}`);
  expect(m.seen.length, m.seen.map((s) => s.url).join("\n")).toBeLessThanOrEqual(1);

  await page.goto("/jobs");
  await hydrated(page);
  const rows = page.locator("[data-testid^=job-row-]");
  const before = await rows.count();
  m = meter(page);
  for (let i = 5; i < 10; i++) {
    await launch(bob, { template: "mistral-7b-sft", gpus: 8, pool: "hgx-h100", name: `e2e-teammate-${i}` });
  }
  // The new rows show up without a reload...
  await expect(page.getByTestId("job-row-" + (await (await bob.get("/api/v1/jobs?limit=1")).json()).jobs[0].id)).toBeVisible();
  await page.waitForTimeout(3000);
  m.stop();
  console.log(`Jobs page: ${m.seen.length} requests, ${m.bytes()} bytes for 5 launches by a teammate`);
  // ...for a few requests, not one per change.
  expect(m.seen.length).toBeLessThanOrEqual(5);
  expect(await rows.count()).toBeGreaterThanOrEqual(Math.min(before + 5, 50));
  await alice.dispose();
  await bob.dispose();
});
