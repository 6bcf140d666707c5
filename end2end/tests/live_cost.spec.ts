import { apiAs, cancelEverything, expect, hydrated, launch, signIn, test } from "./helpers";
import type { Page } from "@playwright/test";

/** What the page receives, from Chromium's network events: attached before the page opens,
 * so the live stream's bytes count as they arrive; `mark()` starts a measurement. */
async function meter(page: Page) {
  const cdp = await page.context().newCDPSession(page);
  await cdp.send("Network.enable");
  let since = 0;
  let clock = 0;
  const started = new Map<string, { url: string; at: number }>();
  const streamed = new Map<string, number>();
  const finished = new Map<string, number>();
  cdp.on("Network.requestWillBeSent", (e: any) => started.set(e.requestId, { url: e.request.url, at: ++clock }));
  cdp.on("Network.dataReceived", (e: any) => {
    if (clock >= since) streamed.set(e.requestId, (streamed.get(e.requestId) ?? 0) + e.encodedDataLength);
  });
  cdp.on("Network.loadingFinished", (e: any) => finished.set(e.requestId, e.encodedDataLength));
  const after = () => [...started.entries()].filter(([, r]) => r.at > since);
  return {
    mark: () => {
      since = ++clock;
      streamed.clear();
      finished.clear();
    },
    /** Requests made since the mark (the live stream opened before it is not one). */
    requests: () => after().map(([, r]) => r.url),
    /** Bytes since the mark: each new request whole, the open stream as far as it came. */
    bytes: () => {
      const fresh = new Set(after().map(([id]) => id));
      let n = 0;
      for (const [id, len] of streamed) if (!fresh.has(id)) n += len;
      for (const id of fresh) n += finished.get(id) ?? streamed.get(id) ?? 0;
      return n;
    },
    /** The live stream's bytes since the mark. */
    streamBytes: () => {
      let n = 0;
      for (const [id, len] of streamed) if (started.get(id)?.url.includes("/api/v1/events")) n += len;
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

  let m = await meter(page);
  await page.goto(`/jobs/${mine.id}`);
  await hydrated(page);
  m.mark();
  for (let i = 0; i < 5; i++) {
    await launch(bob, { template: "mistral-7b-sft", gpus: 8, pool: "hgx-h100", name: `e2e-teammate-${i}` });
  }
  await page.waitForTimeout(4000);
  console.log(`job page: ${m.requests().length} requests, ${m.bytes()} bytes (live stream ${m.streamBytes()}) for 5 launches by a teammate: ${m.requests().join(", ")}`);
  expect(m.requests().length, m.requests().join("\n")).toBeLessThanOrEqual(1);
  await m.stop();

  // A full first page: the team has at least 50 jobs (some queued, some running).
  for (let i = 0; i < 50; i++) {
    await launch(bob, { template: "mistral-7b-sft", gpus: 8, pool: "hgx-h100", name: `e2e-fill-${i}` });
  }
  m = await meter(page);
  await page.goto("/jobs");
  await hydrated(page);
  const rows = page.locator("[data-testid^=job-row-]");
  await expect(rows).toHaveCount(50);
  const total = async () => (await (await alice.get("/api/v1/jobs?limit=1")).json()).total as number;
  const before = await total();
  await expect(page.getByTestId("jobs-count")).toHaveText(`50 of ${before.toLocaleString("en-US")} jobs, newest first`);
  m.mark();
  const launched: string[] = [];
  for (let i = 5; i < 10; i++) {
    launched.push((await launch(bob, { template: "mistral-7b-sft", gpus: 8, pool: "hgx-h100", name: `e2e-teammate-${i}` })).id);
  }
  // The new rows show up first, newest first, without a reload...
  await expect(rows).toHaveCount(55);
  await page.waitForTimeout(3000);
  const requests = m.requests();
  const bytes = m.bytes();
  const stream = m.streamBytes();
  await m.stop();
  console.log(`Jobs page (50 rows): ${requests.length} requests, ${bytes} bytes (live stream ${stream}) for 5 launches by a teammate`);
  // The rows came over the stream: five rows are more than a kilobyte.
  expect(stream).toBeGreaterThan(1024);
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
