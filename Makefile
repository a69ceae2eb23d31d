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
ENVOY_CONFIGS := $(wildcard envoy/*.yaml)

.PHONY: all tools image-tools build image run demo test unit lint wasm-test validate integration algorithms-report bench bench-script fuzz soak clean

all: build

tools:
	@scripts/install-tools.sh

# buildah, skopeo, umoci and docker-registry from Debian (apt-get; needs root or sudo).
image-tools:
	@scripts/install-image-tools.sh

# The release module, size-optimized (opt-level z, LTO, panic=abort).
build: tools
	cargo build --release --target wasm32-wasip1 --lib
	@ls -l $(WASM) | awk '{print "built $(WASM): " $$5 " bytes"}'

# The module as OCI images (tag = crate version) in target/image/{compat,artifact}.
image: build image-tools
	@scripts/build-image.sh

run: build
	@scripts/run.sh

demo: build
	cargo run --quiet --example demo

# docs/algorithms.md: memory, accuracy and the seed's scenario per algorithm,
# measured against a Valkey the example starts itself.
algorithms-report: tools
	cargo run --quiet --example algorithms_report

# Throughput and latency against Envoy's own baselines, one run, as ratios:
# writes docs/benchmarks.md (a few minutes; not part of `make test`).
bench: build
	@command -v wrk >/dev/null || { apt-get update -qq && apt-get install -y -qq wrk >/dev/null; } \
	  || { echo "bench needs wrk (Debian package wrk); install it as root" >&2; exit 1; }
	python3 scripts/bench.py

# Not part of `make test`: Valkey µs per decision per algorithm and case, and
# decisions per second of one Valkey core, FCALL and EVALSHA, straight to a
# valkey-server (no Envoy); prints the tables and writes them into
# docs/algorithms.md. BASELINE=<git ref> also measures that version's script.
bench-script: tools
	python3 scripts/script_cost.py $(if $(BASELINE),--baseline $(BASELINE))

test: tools lint unit wasm-test build validate image integration
	@echo "make test: all suites passed"

lint:
	cargo fmt --check
	cargo clippy --all-targets -- -D warnings
	cargo clippy --target wasm32-wasip1 --lib -- -D warnings

unit:
	cargo test --lib
	cargo test --doc

# The pure modules' unit tests again, compiled to wasm32 and run under node.
wasm-test:
	cargo test --target wasm32-unknown-unknown --lib

validate: build
	@for f in $(ENVOY_CONFIGS); do \
	  $(TOLLGATE_ENVOY) --mode validate -c $$f --log-level error >/dev/null || { echo "INVALID: $$f"; exit 1; }; \
	  echo "envoy --mode validate: $$f OK"; \
	done

integration: build image
	cargo test --test '*' -- --test-threads 2

# Not part of `make test`: cargo fuzz (nightly) on the RESP decoder, the store
# reply and the config parser, FUZZ_RUNS (10 million) executions per target.
fuzz:
	@scripts/fuzz.sh

# Not part of `make test`: 10 minutes of steady load through Envoy, sampling
# memory and pending store calls (SOAK_SECONDS to change the duration).
soak: build
	@scripts/soak.sh

clean:
	cargo clean
