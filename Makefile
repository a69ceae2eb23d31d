# tollgate — `make run` (demo stack in the foreground) and `make test` (everything)
# work on a fresh machine: `make tools` installs what they need into .tools/.

SHELL := /bin/bash
TOOLS := $(CURDIR)/.tools
WASM := target/wasm32-wasip1/release/tollgate.wasm
export TOLLGATE_ENVOY ?= $(TOOLS)/bin/envoy
export TOLLGATE_VALKEY ?= $(TOOLS)/bin/valkey-server
export TOLLGATE_WASM := $(CURDIR)/$(WASM)
export CARGO_TARGET_WASM32_UNKNOWN_UNKNOWN_RUNNER := $(TOOLS)/bin/wasm-bindgen-test-runner
export WASM_BINDGEN_TEST_TIMEOUT := 120
ENVOY_CONFIGS := $(wildcard envoy/*.yaml envoy/compose/*.yaml)

.PHONY: all tools redis7 prometheus image-tools docker-tools netns-tools build cli image run compose compose-registry compose-configs demo demo-tokens demo-shaping demo-concurrency demo-operate test unit lint wasm-test validate integration netns-load flood algorithms-report bench bench-host bench-floor bench-instructions bench-script fuzz sim soak clean

all: build

# Everything `make build`, `make run` and the tests need, into .tools/ (no root).
tools:
	@scripts/install-tools.sh

# Debian's Redis 7 with TLS, for tests/live/store/tls_redis7.rs only (apt-get: needs root).
redis7:
	@scripts/install-redis.sh

# Debian's Prometheus 2.42 and promtool, for tests/live/operations/monitoring.rs only
# (apt-get: needs root).
prometheus:
	@scripts/install-prometheus.sh

# buildah, skopeo, umoci and docker-registry from Debian (apt-get; needs root or sudo).
image-tools:
	@scripts/install-image-tools.sh

# The Docker engine (Debian's docker.io, apt-get: needs root or sudo), busybox
# for the stand-in images, and Compose v2 in .tools/bin/docker-compose.
docker-tools:
	@scripts/install-docker.sh

# The release module, speed-optimized (opt-level 3, LTO, panic=abort), then
# `wasm-opt -O3` in place (cargo links its own output there again on every
# build, so the input is always cargo's; see docs/performance.md, "Module size").
# Before it, binaryen's wasm-metadce keeps only the exports listed in
# src/filter/exports.json: Envoy enters the module for every proxy-wasm
# callback it exports (docs/performance.md, "Where the time goes").
build: tools
	cargo build --release --target wasm32-wasip1 --lib
	@raw=$$(stat -c %s $(WASM)) && \
	  $(TOOLS)/binaryen/usr/bin/wasm-metadce --graph-file src/filter/exports.json $(WASM) -o $(WASM).dce >/dev/null && \
	  $(TOOLS)/bin/wasm-opt -O3 $(WASM).dce -o $(WASM).opt && rm $(WASM).dce && mv $(WASM).opt $(WASM) && \
	  echo "built $(WASM): $$(stat -c %s $(WASM)) bytes ($$raw before wasm-opt)"

# The `tollgate` command-line tool (check, explain, simulate), host-only, into .tools/bin.
cli:
	cargo build --release --bin tollgate
	@mkdir -p $(TOOLS)/bin && cp target/release/tollgate $(TOOLS)/bin/tollgate
	@echo "installed $(TOOLS)/bin/tollgate"

# The module as OCI images (tag = crate version) in target/image/{compat,artifact}.
image: build image-tools
	@scripts/build-image.sh

run: build
	@scripts/run.sh

# The stack of envoy/docker-compose.yml in the foreground (needs Docker);
# ARGS go to `docker compose` before `up`, e.g. ARGS="--profile sentinel"
# (or cluster).
compose: build
	@scripts/compose.sh $(ARGS)

# The same with profile `registry`: `make image`'s module pushed to the stack's
# own registry, fetched from it by a one-shot container, run by envoy-registry
# on 127.0.0.1:10200 (admin 9903).
compose-registry: image
	@TOLLGATE_COMPOSE_REGISTRY=1 scripts/compose.sh --profile registry $(ARGS)

# Regenerates envoy/compose/ from envoy/envoy-dynamic.yaml,
# envoy/dynamic/listeners.yaml, envoy/envoy-sentinel.yaml and
# envoy/envoy-cluster.yaml (the edits are listed in tests/live/packaging/compose_configs.rs).
compose-configs:
	TOLLGATE_WRITE_COMPOSE_CONFIGS=1 cargo test --quiet --test live packaging::compose_configs::compose_envoy_configs

demo: build
	cargo run --quiet --example demo

# Shaping: a burst of 10 against 5 per second held until it fits (max_delay 2 s).
demo-shaping: build
	cargo run --quiet --example demo_shaping

# A token budget counted on the response (reserve max_tokens, settle with usage).
demo-tokens: build
	cargo run --quiet --example demo_tokens

# A concurrency limit on streamed completions: 2 in flight per API key AND a
# token budget; a 3rd refused at once, slots freed by a stream's end and by
# a client that leaves, Valkey's lease set printed along the way.
demo-concurrency: build
	cargo run --quiet --example demo_concurrency

# Operating live keys (docs/cli.md): a user locked out, inspected and reset;
# ten times the limits for one tenant by an override, listed and removed.
demo-operate: build
	cargo run --quiet --example demo_operate

# docs/algorithms.md: memory, accuracy and the seed's scenario per algorithm,
# measured against a Valkey the example starts itself.
algorithms-report: tools
	cargo run --quiet --example algorithms_report

# Throughput and latency against Envoy's own baselines, one run, as ratios:
# writes docs/benchmarks.md (a few minutes; not part of `make test`).
# Every tollgate case runs again with a baseline ref's module, right after
# this tree's, and adds its columns: BASELINE=<git ref>, by default
# $(BENCH_BASELINE), the commit before group commit (#27); BASELINE=none
# runs no baseline.
BENCH_BASELINE := 9127d9a
bench: build
	@scripts/install-wrk.sh
	python3 scripts/bench suite $(if $(filter none,$(BASELINE)),,--baseline $(or $(BASELINE),$(BENCH_BASELINE)))

# Not part of `make test`: the worker's admitted path on the host, by stage
# (benches/admitted_path.rs, divan), then its instructions per decision by
# stage (callgrind; BASELINE=<git ref> counts that version's too, and the ratio).
bench-host:
	@scripts/install-valgrind.sh
	cargo bench --bench admitted_path
	python3 scripts/bench admitted_cost $(if $(BASELINE),--baseline $(BASELINE))

# Not part of `make test`: each path of tollgate beside the floor module
# (benches/floor: the same host calls, no compute), Envoy CPU µs per request
# in one run; and Envoy's instructions per request under callgrind, by case,
# the floor's included (BASELINE=<git ref> counts that version's too).
bench-floor: build
	@scripts/install-wrk.sh
	python3 scripts/bench floor

bench-instructions: build
	@scripts/install-wrk.sh
	@scripts/install-valgrind.sh
	python3 scripts/bench instructions --floor --cases "unmatched,synced,synced logged,admitted,admitted logged,denied,floor pass,floor local,floor store" $(if $(BASELINE),--baseline $(BASELINE))

# Not part of `make test`: Valkey µs per decision per algorithm and case, and
# decisions per second of one Valkey core, FCALL and EVALSHA, straight to a
# valkey-server (no Envoy); prints the tables and writes them into
# docs/algorithms.md. BASELINE=<git ref> also measures that version's script.
bench-script: tools
	python3 scripts/bench script_cost $(if $(BASELINE),--baseline $(BASELINE))

test: tools lint unit wasm-test build validate image integration
	@echo "make test: all suites passed"

lint:
	cargo fmt --check
	cargo clippy --all-targets -- -D warnings
	cargo clippy --target wasm32-wasip1 --lib -- -D warnings
	# The fuzz targets still compile (`make fuzz` runs them, on nightly).
	cargo check --manifest-path fuzz/Cargo.toml --bins --locked

# The unit tests, the host tests (tests/host: no Envoy, no Valkey, no built
# module) and the doc tests. docs/testing.md describes the test binaries.
unit:
	cargo test --lib --test host
	cargo test --doc

# The pure modules' unit tests again, compiled to wasm32 and run under node.
wasm-test:
	cargo test --target wasm32-unknown-unknown --lib

validate: build
	@for f in $(ENVOY_CONFIGS); do \
	  $(TOLLGATE_ENVOY) --mode validate -c $$f --log-level error >/dev/null || { echo "INVALID: $$f"; exit 1; }; \
	  echo "envoy --mode validate: $$f OK"; \
	done

# The tests with real processes (tests/live), two at a time, then the heavy
# loads (tests/load), one at a time with nothing beside them.
integration: build image redis7 prometheus docker-tools netns-tools
	cargo test --test live -- --test-threads 2
	cargo test --test load -- --test-threads 1

# Not part of `make test`: the whole-system simulator (src/model/sim) over
# SIM_SEEDS random traces (100,000) from SIM_FROM (0), optimised; `make test`
# runs 2,000 of them. A failing seed prints its minimal trace.
SIM_SEEDS ?= 100000
SIM_FROM ?= 0
sim:
	TOLLGATE_SIM_SEEDS=$(SIM_SEEDS) TOLLGATE_SIM_FROM=$(SIM_FROM) cargo test --release --lib model::sim -- --nocapture

# Not part of `make test`: cargo fuzz (nightly) on the RESP decoder, the store
# reply and the config parser, FUZZ_RUNS (10 million) executions per target.
fuzz:
	@scripts/fuzz.sh

# Not part of `make test`: tests/load/flood.rs with 20 s floods (5 s in make test).
flood: build
	TOLLGATE_FLOOD_SECONDS=20 cargo test --test load flood:: -- --nocapture --test-threads 1

# iproute2 and iptables for tests/load/netns.rs (apt-get as root when missing).
netns-tools:
	@scripts/install-netns-tools.sh

# Not part of `make test`: tests/load/netns.rs with a 60 s steady load across the
# veth link (make test runs it for 12 s), its throughput held: the last third
# of the load at least 0.8 x the first. make test prints that ratio only (it
# measures the machine as much as the filter).
netns-load: build netns-tools
	TOLLGATE_NETNS_SECONDS=60 TOLLGATE_NETNS_HELD=0.8 cargo test --test load netns:: -- --nocapture --test-threads 1

# Not part of `make test`: 10 minutes of steady load through Envoy, sampling
# memory and pending store calls (SOAK_SECONDS to change the duration).
soak: build
	@scripts/soak.sh

clean:
	cargo clean
