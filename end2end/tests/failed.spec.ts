import { SHOTS, apiAs, cancelEverything, expect, launch, signIn, test } from "./helpers";

test("a job the sim fails leads its page with the reason, and the failed filter lists it", async ({ page, baseURL }) => {
  await cancelEverything(baseURL!);
  const alice = await apiAs(baseURL!, "alice");
  const carol = await apiAs(baseURL!, "carol");
  // 30 s of start-up, then 10 minutes of running: the sim fails it (exit code 1).
  const job = await launch(alice, {
    template: "mistral-7b-sft",
    gpus: 8,
    pool: "hgx-h100",
    name: "e2e-fails",
    params: { sim_fail_after_s: 600 },
  });
  expect(job.state).toBe("admitted");
  expect((await carol.post("/api/v1/sim/advance", { data: { seconds: 660 } })).ok()).toBeTruthy();
  const res = await alice.get(`/api/v1/jobs/${job.id}`);
  expect((await res.json()).state).toBe("failed");

  await signIn(page, "alice");
  await page.goto(`/jobs/${job.id}`);
  await expect(page.getByTestId("job-state")).toHaveText("failed");
  await expect(page.getByTestId("failure-title")).toHaveText("Failed after 10 min");
  await expect(page.getByTestId("failure-reason")).toContainText("A worker exited with code 1 (rank 7 on hgx-h100-node-");
  await page.screenshot({ path: `${SHOTS}/job-failed.png`, fullPage: true });

  await page.goto("/jobs?scope=mine&state=failed");
  await expect(page.getByTestId(`job-row-${job.id}`)).toHaveAttribute("data-state", "failed");
  await alice.dispose();
  await carol.dispose();
});
