"""The floor under tollgate's paths (docs/performance.md, "The floor").

benches/floor is a proxy-wasm filter that makes the host calls one of
tollgate's paths makes per request and computes nothing else: `pass` (a
request no rule matches), `local` (a synced rule's admitted request) and
`store` (a request admitted by the store: held, one message per batch
through tollgate's stream and framing shim to Valkey, resumed on the
reply), and `sized` (`store` with a message as large as tollgate's: an
`ECHO` of 100 bytes per request). Measured beside tollgate at once
(scripts/bench/together.py: per round a new Envoy per case and one with no
rule matching, three on CPU 0 during the same seconds, each driven by its
own `wrk -c64` on CPU 1; ratios to no rule matching within each round,
medians), it shows what Envoy itself charges for each path: the part of
#26's and #27's ratios that no module can remove.

    python3 scripts/bench floor [--rounds N] [--alternate N]      (make bench-floor)

With `--alternate N` each Envoy of a round is driven alone instead, N turns
of 3 s each (scripts/bench/together.py's `--alternate`): the paths without another
Envoy taking the core while one waits (docs/performance.md, "Measured
alone").
"""

import argparse
import subprocess

from . import together, variants
from .common import ROOT, TOOLS

# The floor's paths set the decision's filter state, as tollgate does with
# `response.filter_state: true` (the `logged` cases).
PAIRS = [("unmatched", "floor pass"), ("synced logged", "floor local"), ("admitted logged", "floor hold"),
         ("admitted logged", "floor store"), ("admitted logged", "floor sized")]
# Three Envoys per round (these two and one with no rule matching), so that
# every ratio is taken under the same sharing of the core.
GROUPS = ["synced logged+floor local", "admitted logged+floor store", "floor sized+floor hold",
          "floor pass+synced quiet"]


def build():
    """The floor module (its own crate, its own target directory), finished as `make build` finishes
    tollgate's: wasm-metadce with tollgate's export list (Envoy calls only the callbacks a module exports,
    and every call into the VM costs), then wasm-opt -O3."""
    subprocess.run(["cargo", "build", "--quiet", "--release", "--target", "wasm32-wasip1"],
                   cwd=ROOT / "benches/floor", check=True)
    raw, out = ROOT / "benches/floor/target/wasm32-wasip1/release/tollgate_floor.wasm", variants.FLOOR_WASM
    dce = out.with_suffix(".dce.wasm")
    subprocess.run([str(TOOLS / "binaryen/usr/bin/wasm-metadce"), "--graph-file", str(ROOT / "src/filter/exports.json"),
                    str(raw), "-o", str(dce)], check=True, capture_output=True)
    subprocess.run([str(TOOLS / "bin/wasm-opt"), "-O3", str(dce), "-o", str(out)], check=True)
    dce.unlink()
    return out


def run(rounds, alternate=0):
    """{case: {"ratio": median ÷ unmatched, "ratios": per round, "us": median µs}}."""
    build()
    return together.together(GROUPS, rounds=rounds, alternate=alternate)


def table(results):
    rows = ["| path | tollgate ÷ unmatched | floor | floor ÷ unmatched | tollgate − floor |", "|---|---|---|---|---|"]
    for mine, theirs in PAIRS:
        t = 1.0 if mine == "unmatched" else results[mine]["ratio"]
        f = results[theirs]["ratio"]
        rows.append(f"| {mine} | {t:.3f} | {theirs} | {f:.3f} | {t - f:+.3f} |")
    return "\n".join(rows)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--alternate", type=int, default=0, help="N: each Envoy alone in turn, N turns per round")
    args = parser.parse_args()
    results = run(args.rounds, args.alternate)
    print(table(results))
    for case, r in results.items():
        print(f"{case}: {r['us']:.1f} µs per request (no match {r['unmatched_us']:.1f}), ÷ no match per round "
              + " ".join(f"{x:.2f}" for x in r["ratios"]))


if __name__ == "__main__":
    main()
