import { SHOTS, expect, hydrated, test } from "./helpers";

// The second Gantry of playwright.config.ts: the Kubernetes back end, its API server
// unreachable. Launch shows the JobSet it would submit; a launch is stored and says it waits
// for the cluster; every page keeps serving.
const kubeBase = `http://127.0.0.1:${Number(process.env.GANTRY_E2E_PORT ?? 3100) + 1}`;

test("on the kube back end, Launch shows the manifest and a launch waits for the cluster", async ({ page }) => {
  // A page whose server render and hydration disagree stops being interactive: the shared
  // fixture (helpers.ts) fails the test on that console error, as on any other.
  await page.goto(`${kubeBase}/login`);
  await page.getByTestId("login-alice").click();
  await expect(page.getByTestId("viewer")).toBeVisible();

  await page.goto(`${kubeBase}/launch/llama-3.1-8b-fsdp`);
  await hydrated(page);
  // The API server has not answered since start-up: no promise of a start.
  await expect(page.getByTestId("fit-line")).toContainText("The cluster is unreachable");
  await page.getByTestId("show-manifest").click();
  const manifest = page.getByTestId("manifest");
  await expect(manifest).toContainText("kind: JobSet");
  await expect(manifest).toContainText("kueue.x-k8s.io/queue-name: hgx-h100");
  await expect(manifest).toContainText("--nnodes=2");
  await page.screenshot({ path: `${SHOTS}/launch-manifest.png`, fullPage: true });

  // Another size: the manifest follows the form.
  await page.locator("label").filter({ has: page.locator('input[name="gpus"][value="32"]') }).click();
  await page.getByTestId("show-manifest").click();
  await expect(manifest).toContainText("--nnodes=4");
  await expect(page.getByTestId("show-manifest")).toHaveText("Refresh manifest");

  await page.getByTestId("launch-submit").click();
  await expect(page).toHaveURL(/\/jobs\/[0-9a-f-]{36}$/);
  await hydrated(page);
  await expect(page.getByTestId("job-state")).toHaveText("queued");
  await expect(page.getByTestId("pending-reason")).toContainText("not yet sent: the cluster is unreachable");
  await expect(page.getByTestId("eta")).toHaveText("Not in the queue yet: no estimate until the cluster lists it");
  await page.screenshot({ path: `${SHOTS}/job-unsent.png`, fullPage: true });

  await page.goto(`${kubeBase}/jobs`);
  await expect(page.getByText("llama-3.1-8b-fsdp").first()).toBeVisible();
});
