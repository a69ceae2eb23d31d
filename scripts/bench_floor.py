#!/usr/bin/env python3
"""The floor under tollgate's paths (docs/performance.md, "The floor").

benches/floor is a proxy-wasm filter that makes the host calls one of
tollgate's paths makes per request and computes nothing else: `pass` (a
request no rule matches), `local` (a synced rule's admitted request) and
`store` (a request admitted by the store: held, one message per batch
through tollgate's stream and framing shim to Valkey, resumed on the
reply), and `sized` (`store` with a message as large as tollgate's: an
`ECHO` of 100 bytes per request). Measured beside tollgate in one run, the way
scripts/bench_variants.py measures (one Envoy per case, a new one per round,
pinned to CPU 0 with wrk on CPU 1, warmed up, `wrk -c64`, medians), it shows
what Envoy itself charges for each path: the part of #26's and #27's ratios
that no module can remove.

    python3 scripts/bench_floor.py [--rounds N]      (make bench-floor)
"""

import argparse
import subprocess

import bench_variants
from bench_common import ROOT, TOOLS, WASM

PAIRS = [("unmatched", "floor pass"), ("synced", "floor local"), ("admitted", "floor hold"),
         ("admitted", "floor store"), ("admitted", "floor sized")]


def build():
    """The floor module (its own crate, its own target directory), finished as `make build` finishes
    tollgate's: wasm-metadce with tollgate's export list (Envoy calls only the callbacks a module exports,
    and every call into the VM costs), then wasm-opt -O3."""
    subprocess.run(["cargo", "build", "--quiet", "--release", "--target", "wasm32-wasip1"],
                   cwd=ROOT / "benches/floor", check=True)
    raw, out = ROOT / "benches/floor/target/wasm32-wasip1/release/tollgate_floor.wasm", bench_variants.FLOOR_WASM
    dce = out.with_suffix(".dce.wasm")
    subprocess.run([str(TOOLS / "binaryen/usr/bin/wasm-metadce"), "--graph-file", str(ROOT / "src/filter/exports.json"),
                    str(raw), "-o", str(dce)], check=True, capture_output=True)
    subprocess.run([str(TOOLS / "bin/wasm-opt"), "-O3", str(dce), "-o", str(out)], check=True)
    dce.unlink()
    return out


def run(rounds):
    build()
    cases = list(dict.fromkeys(c for pair in PAIRS for c in pair))
    results = bench_variants.run([("this tree", WASM, {})], rounds=rounds, duration="2s", cases=cases, fresh=True,
                                 pin=True, warm="4s")
    return {case: summary for (_, case), summary in results.items()}


def table(results):
    base, floor = results["unmatched"]["us"], results["floor pass"]["us"]
    rows = ["| path | tollgate µs | ÷ unmatched | floor µs | floor ÷ floor pass | tollgate − floor µs |",
            "|---|---|---|---|---|---|"]
    for mine, theirs in PAIRS:
        t, f = results[mine]["us"], results[theirs]["us"]
        rows.append(f"| {mine} | {t:.1f} | {t / base:.2f} | {f:.1f} | {f / floor:.2f} | {t - f:+.1f} |")
    return "\n".join(rows)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    results = run(args.rounds)
    print(table(results))
    for case, r in results.items():
        print(f"{case}: {r['us']:.1f} µs/request, {r['rps']:.0f} req/s, {r['per_message']:.1f} decisions per "
              f"message, host calls {r['host_calls']:.2f}")


if __name__ == "__main__":
    main()
