#!/usr/bin/env bash
# `make fuzz`: runs every cargo-fuzz target in fuzz/ for FUZZ_RUNS executions
# (default 10 million) each, with the installed nightly toolchain. Installs
# cargo-fuzz from crates.io into .tools/ on first use. Not part of `make test`.
#
#   FUZZ_RUNS=1000000 make fuzz          fewer executions
#   FUZZ_TARGETS=resp_decode make fuzz   one target
#
# Each target's libFuzzer summary goes to fuzz/logs/<target>.log; a crash stops
# the run with the reproducer in fuzz/artifacts/<target>/.
set -euo pipefail
cd "$(dirname "$0")/.."
TOOLS="$PWD/.tools"
RUNS="${FUZZ_RUNS:-10000000}"
TARGETS="${FUZZ_TARGETS:-resp_decode store_stream config_parse}"

if ! rustup run nightly rustc --version >/dev/null 2>&1; then
  rustup toolchain install nightly --profile minimal
fi
if [ ! -x "$TOOLS/bin/cargo-fuzz" ]; then
  echo "installing cargo-fuzz into $TOOLS (a few minutes, once)..."
  cargo install --quiet --locked --root "$TOOLS" cargo-fuzz
fi
export PATH="$TOOLS/bin:$PATH"

mkdir -p fuzz/logs
for target in $TARGETS; do
  corpus="fuzz/corpus/$target"
  mkdir -p "$corpus"
  case "$target" in
    config_parse) seeds=(tests/fixtures/config/valid tests/fixtures/config/invalid) ;;
    *) seeds=(fuzz/seeds/resp) ;;
  esac
  echo "fuzzing $target for $RUNS executions..."
  start=$(date +%s)
  # -s none: the crate has no unsafe code; -a: overflow checks stay on.
  (cd fuzz && cargo +nightly fuzz run -s none -a "$target" "../$corpus" "${seeds[@]/#/../}" -- \
      -runs="$RUNS" -max_len=4096 -print_final_stats=1) >"fuzz/logs/$target.log" 2>&1 \
    || { tail -40 "fuzz/logs/$target.log"; echo "fuzz target $target FAILED" >&2; exit 1; }
  end=$(date +%s)
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "fuzz/logs/$target.log" | tail -1)
  echo "$target: $execs executions in $((end - start)) s, 0 crashes"
done
