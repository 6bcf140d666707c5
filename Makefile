# Gantry — the two commands the README gives are `make run` and `make test`.
# Both install what they need, idempotently (a warm machine skips what it has).

CARGO_LEPTOS_VERSION := 0.3.10
WASM_BINDGEN_VERSION := 0.2.130
# cargo-leptos builds debug with this flag; using it for cargo test too reuses that build.
# make release and make bench keep it too, on purpose. Without it (server and wasm alike) the
# page bench measured the Jobs page 8-26 % and a job page 3-12 % faster, home and Pools within
# its noise (two rounds of alternating runs, 2026-12-06), for a wasm of 3.09 MB, 965 KB as
# served (brotli), against 2.23 MB, 640 KB: not worth it while no page reaches the goal by it.
# With the release profile's fat LTO (since 2026-12-06) it gained nothing measurable: Jobs
# 471-504 µs of CPU a request with it, 483-572 without; a job page 366-406 and 326-367 (page
# bench, alternating runs, 2026-12-07).
# Server and wasm must be built alike: with it the server writes a hydration marker (<!>) at
# each component boundary that it does not write without it (page bench dumps, 2026-12-06).
export RUSTFLAGS := --cfg erase_components
E2E_PORT ?= 3100

.PHONY: run test bench release setup setup-browser setup-prometheus build lint unit e2e e2e-release

## run: build and start Gantry on the embedded default at http://127.0.0.1:3000
run: setup build
	./target/debug/gantry

## test: every test — formatting, lints, unit and integration (SQLite and Postgres), browser
test: setup setup-browser setup-prometheus lint unit build e2e

## bench: queue benchmarks (Kueue's baseline replay, 10k-queue recompute), the usage report over 1M intervals, the pages against a static handler, 1,000 live streams (memory, delivery p99), and a restart's replay of 20,000 ended jobs' history, printed as figures
bench:
	cargo bench -p server --bench queue
	cargo bench -p server --bench usage
	cargo bench -p server --bench pages
	cargo bench -p server --bench streams
	cargo bench -p server --bench replay

# wasm-opt for release builds: binaryen 132 from npm (2 s to install). Never Debian's
# binaryen 108: it exits 0 but corrupts the wasm (see ../shared/BUILD.md).
BINARYEN_VERSION := 132.0.0
TOOLS := $(CURDIR)/target/tools

## release: the optimized server and site (wasm-opt'ed wasm) in target/release and target/site
release: setup
	@test -x $(TOOLS)/node_modules/.bin/wasm-opt || npm install --prefix $(TOOLS) --no-audit --no-fund binaryen@$(BINARYEN_VERSION)
	PATH="$(TOOLS)/node_modules/.bin:$$PATH" cargo leptos build --release
	@ls -l target/site/pkg/*.wasm

setup:
	@rustup target list --installed | grep -qx wasm32-unknown-unknown || rustup target add wasm32-unknown-unknown
	@cargo leptos --version 2>/dev/null | grep -q "$(CARGO_LEPTOS_VERSION)" || cargo install cargo-leptos --locked --version $(CARGO_LEPTOS_VERSION)
	@wasm-bindgen --version 2>/dev/null | grep -q "$(WASM_BINDGEN_VERSION)" || cargo install wasm-bindgen-cli --version $(WASM_BINDGEN_VERSION)
	@command -v cargo-nextest >/dev/null || cargo install cargo-nextest --locked

setup-browser:
	@command -v chromium >/dev/null || (apt-get update && apt-get install -y chromium)
	@test -d end2end/node_modules/@playwright/test || (cd end2end && npm ci --no-audit --no-fund)

# The metrics tests run a real Prometheus (server/tests/prometheus.rs): Debian's package.
setup-prometheus:
	@command -v prometheus >/dev/null || (apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends prometheus)

build:
	cargo leptos build

lint:
	cargo fmt --all -- --check
	cargo clippy --workspace --all-targets -- -D warnings

# cargo-nextest (see .config/nextest.toml): a test that hangs is ended and named. Several
# servers in one process once left a page hanging (leptos' process-wide resource flag while a
# route list is built; fixed in startup::route_list, shown by tests/pages_kube.rs).
unit:
	cargo nextest run --workspace

e2e:
	cd end2end && GANTRY_E2E_PORT=$(E2E_PORT) npx playwright test

## e2e-release: the browser tests against make release's server and site (the build that
## ships, its wasm through wasm-opt). It writes the release site into target/site, over the
## debug one
e2e-release: setup-browser release
	cd end2end && GANTRY_E2E_PORT=$(E2E_PORT) GANTRY_E2E_BIN=../target/release/gantry npx playwright test
