import { apiAs, cancelEverything, expect, hydrated, launch, signIn, test } from "./helpers";
import type { Page } from "@playwright/test";

/** Every request the page makes from now on and the bytes it receives for each, the live
 * stream included (its bytes as they arrive), read from Chromium's network events. */
async function meter(page: Page) {
  const cdp = await page.context().newCDPSession(page);
  await cdp.send("Network.enable");
  const urls = new Map<string, string>();
  const streamed = new Map<string, number>();
  const finished = new Map<string, number>();
  cdp.on("Network.requestWillBeSent", (e: any) => urls.set(e.requestId, e.request.url));
  cdp.on("Network.dataReceived", (e: any) =>
    streamed.set(e.requestId, (streamed.get(e.requestId) ?? 0) + e.encodedDataLength),
  );
  cdp.on("Network.loadingFinished", (e: any) => finished.set(e.requestId, e.encodedDataLength));
  const isStream = (url: string) => url.includes("/api/v1/events");
  return {
    /** Requests other than the live stream that was open before. */
    requests: () => [...urls.values()].filter((u) => !isStream(u)),
    /** Everything received: each finished request whole, the stream as far as it came. */
    bytes: () => {
      let n = 0;
      for (const id of new Set([...streamed.keys(), ...finished.keys()])) {
        n += finished.get(id) ?? streamed.get(id) ?? 0;
      }
      return n;
    },
    stop: () => cdp.detach(),
  };
}

// What a teammate's five launches cost pages that are open meanwhile: a job page of another
// pool refetches nothing (its own job did not change, its pool's queue did not move); a full
// Jobs page (50 rows) patches itself from the rows the live events carry, and ends up showing
// what asking the server again would.
test("a teammate's five launches cost an unrelated job page no request and a full Jobs page no refetch", async ({ page, baseURL }) => {
  await cancelEverything(baseURL!);
  const alice = await apiAs(baseURL!, "alice");
  const bob = await apiAs(baseURL!, "bob");
  const mine = await launch(alice, { template: "mistral-7b-sft", gpus: 8, pool: "hgx-h200", name: "e2e-quiet" });
  await signIn(page, "alice");

  await page.goto(`/jobs/${mine.id}`);
  await hydrated(page);
  let m = await meter(page);
  for (let i = 0; i < 5; i++) {
    await launch(bob, { template: "mistral-7b-sft", gpus: 8, pool: "hgx-h100", name: `e2e-teammate-${i}` });
  }
  await page.waitForTimeout(4000);
  console.log(`job page: ${m.requests().length} requests, ${m.bytes()} bytes for 5 launches by a teammate: ${m.requests().join(", ")}`);
  expect(m.requests().length, m.requests().join("\n")).toBeLessThanOrEqual(1);
  await m.stop();

  // A full first page: the team has at least 50 jobs (some queued, some running).
  for (let i = 0; i < 50; i++) {
    await launch(bob, { template: "mistral-7b-sft", gpus: 8, pool: "hgx-h100", name: `e2e-fill-${i}` });
  }
  await page.goto("/jobs");
  await hydrated(page);
  const rows = page.locator("[data-testid^=job-row-]");
  await expect(rows).toHaveCount(50);
  const total = async () => (await (await alice.get("/api/v1/jobs?limit=1")).json()).total as number;
  const before = await total();
  await expect(page.getByTestId("jobs-count")).toHaveText(`50 of ${before.toLocaleString("en-US")} jobs, newest first`);
  m = await meter(page);
  const launched: string[] = [];
  for (let i = 5; i < 10; i++) {
    launched.push((await launch(bob, { template: "mistral-7b-sft", gpus: 8, pool: "hgx-h100", name: `e2e-teammate-${i}` })).id);
  }
  // The new rows show up first, newest first, without a reload...
  await expect(rows).toHaveCount(55);
  await page.waitForTimeout(3000);
  const requests = m.requests();
  const bytes = m.bytes();
  await m.stop();
  console.log(`Jobs page (50 rows): ${requests.length} requests, ${bytes} bytes for 5 launches by a teammate`);
  expect(requests.length, requests.join("\n")).toBeLessThanOrEqual(5);
  expect(bytes).toBeLessThanOrEqual(10 * 1024);
  const shown = await rows.evaluateAll((rs) => rs.map((r) => r.getAttribute("data-testid")!.slice("job-row-".length)));
  expect(shown.slice(0, 5)).toEqual([...launched].reverse());
  // ...and the page is what asking again would show: the same rows, order and states.
  const fresh = (await (await alice.get("/api/v1/jobs?limit=55")).json()).jobs as { id: string; state: string }[];
  expect(shown).toEqual(fresh.map((j) => j.id));
  const states = await rows.evaluateAll((rs) => rs.map((r) => r.getAttribute("data-state")));
  expect(states).toEqual(fresh.map((j) => j.state));
  await expect(page.getByTestId("jobs-count")).toHaveText(`55 of ${(before + 5).toLocaleString("en-US")} jobs, newest first`);
  await cancelEverything(baseURL!);
  await alice.dispose();
  await bob.dispose();
});
