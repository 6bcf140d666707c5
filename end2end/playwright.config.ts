import { defineConfig } from "@playwright/test";

// Gantry is started here on a fresh SQLite file with the manual sim clock, so the tests
// decide when time moves. Chromium comes from Debian (never downloaded by Playwright).
const port = Number(process.env.GANTRY_E2E_PORT ?? 3100);
const db = `/tmp/gantry-e2e-${port}.db`;
// A second Gantry on the Kubernetes back end, its API server unreachable (kube.spec.ts).
export const kubePort = port + 1;
const kubeDb = `/tmp/gantry-e2e-${kubePort}.db`;
// A third Gantry signing in through a real OpenID provider (oidc-provider, started here).
export const oidcPort = port + 2;
export const idpPort = port + 3;
const oidcDb = `/tmp/gantry-e2e-${oidcPort}.db`;
// The server under test: the debug build by default; `make e2e-release` names the release one.
const bin = process.env.GANTRY_E2E_BIN || "../target/debug/gantry";

export default defineConfig({
  testDir: "./tests",
  outputDir: "./test-results",
  timeout: 60_000,
  expect: { timeout: 10_000 },
  workers: 1,
  fullyParallel: false,
  reporter: [["list"]],
  use: {
    baseURL: `http://127.0.0.1:${port}`,
    trace: "retain-on-failure",
    screenshot: "only-on-failure",
  },
  projects: [
    {
      name: "chromium",
      use: {
        browserName: "chromium",
        viewport: { width: 1280, height: 900 },
        launchOptions: {
          executablePath: process.env.CHROMIUM_PATH ?? "/usr/bin/chromium",
          args: [
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
          ],
        },
      },
    },
  ],
  webServer: [
    {
      command: `rm -f ${db} ${db}-shm ${db}-wal && exec "${bin}"`,
      url: `http://127.0.0.1:${port}/healthz`,
      reuseExistingServer: false,
      timeout: 60_000,
      stdout: "pipe",
      stderr: "pipe",
      env: {
        GANTRY__SERVER__ADDR: `127.0.0.1:${port}`,
        GANTRY__DATABASE__URL: `sqlite://${db}?mode=rwc`,
        GANTRY__SIM__CLOCK: "manual",
        GANTRY__DEMO__JOBS: "false",
        GANTRY__DEMO__HISTORY: "false",
        LEPTOS_SITE_ROOT: "../target/site",
        RUST_LOG: "warn",
      },
    },
    {
      command: `rm -f ${kubeDb} ${kubeDb}-shm ${kubeDb}-wal && exec "${bin}"`,
      url: `http://127.0.0.1:${kubePort}/healthz`,
      reuseExistingServer: false,
      timeout: 60_000,
      stdout: "pipe",
      stderr: "pipe",
      env: {
        GANTRY__SERVER__ADDR: `127.0.0.1:${kubePort}`,
        GANTRY__DATABASE__URL: `sqlite://${kubeDb}?mode=rwc`,
        GANTRY__CLUSTER__BACKEND: "kube",
        GANTRY__KUBE__KUBECONFIG: "fixtures/kubeconfig-unreachable.yaml",
        GANTRY__KUBE__TIMEOUT_S: "2",
        GANTRY__DEMO__JOBS: "false",
        GANTRY__DEMO__HISTORY: "false",
        LEPTOS_SITE_ROOT: "../target/site",
        RUST_LOG: "error,kube_client=off",
      },
    },
    {
      command: "exec node oidc/provider.mjs",
      url: `http://127.0.0.1:${idpPort}/.well-known/openid-configuration`,
      reuseExistingServer: false,
      timeout: 30_000,
      stdout: "pipe",
      stderr: "pipe",
      env: { OIDC_PORT: String(idpPort), GANTRY_URL: `http://127.0.0.1:${oidcPort}` },
    },
    {
      command: `rm -f ${oidcDb} ${oidcDb}-shm ${oidcDb}-wal && exec "${bin}"`,
      url: `http://127.0.0.1:${oidcPort}/healthz`,
      reuseExistingServer: false,
      timeout: 60_000,
      stdout: "pipe",
      stderr: "pipe",
      env: {
        GANTRY_CONFIG: "fixtures/oidc.toml",
        GANTRY__SERVER__ADDR: `127.0.0.1:${oidcPort}`,
        GANTRY__DATABASE__URL: `sqlite://${oidcDb}?mode=rwc`,
        GANTRY__AUTH__OIDC__ISSUER: `http://127.0.0.1:${idpPort}`,
        GANTRY__AUTH__OIDC__REDIRECT_URL: `http://127.0.0.1:${oidcPort}/auth/callback`,
        GANTRY__DEMO__JOBS: "false",
        GANTRY__DEMO__HISTORY: "false",
        LEPTOS_SITE_ROOT: "../target/site",
        RUST_LOG: "warn",
      },
    },
  ],
});
