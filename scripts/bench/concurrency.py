"""Concurrency limits (#41, docs/concurrency.md): Envoy CPU per admitted
request of a rule with a concurrency limit ("concurrent") against the same
rule with windows only ("admitted"), the two Envoys measured in the same
rounds, each alone in turns; and what the store stream carried: calls per
message (a lease's end is a call of its own, written into the stream's
next message with the others), leases taken and released.

  python3 scripts/bench concurrency [--rounds N]
"""

import argparse
import statistics
import tempfile
from pathlib import Path

from .common import WASM, admin_stat, valkey_server
from .together import together
from .variants import Variant

ROUNDS = 6
TURNS = 3


def measure(rounds=ROUNDS):
    """{"ratios": concurrent ÷ admitted Envoy CPU µs per round, "ratio": their median,
    "admitted_us", "concurrent_us": medians, "per_message": {case: calls per message},
    "leases": (taken, released) over the stream run}."""
    t = together(["admitted+concurrent"], rounds=rounds, alternate=TURNS)
    ratios = [c / a for c, a in zip(t["concurrent"]["ratios"], t["admitted"]["ratios"])]
    out = {"ratios": ratios, "ratio": statistics.median(ratios),
           "admitted_us": t["admitted"]["us"], "concurrent_us": t["concurrent"]["us"], "per_message": {}}
    workdir = Path(tempfile.mkdtemp(prefix="tollgate-concurrency-"))
    with valkey_server(workdir) as (valkey_port, _):
        for case in ("admitted", "concurrent"):
            v = Variant(case, WASM, {}, case, valkey_port, workdir)
            try:
                v.ready()
                names = [f"wasmcustom.tollgate.lease.{n}" for n in ("taken", "released")]
                before = [admin_stat(v.ports[2], n) for n in names]
                v.measure(workdir, "3s")
                after = [admin_stat(v.ports[2], n) for n in names]
                out["per_message"][case] = v.summary()["per_message"]
                if case == "concurrent":
                    out["leases"] = tuple(a - b for a, b in zip(after, before))
            finally:
                v.stop()
    return out


def report(m):
    """Markdown lines for docs/benchmarks.md."""
    taken, released = m.get("leases", (0, 0))
    return [
        "## Concurrency limits (#41)",
        "",
        f"Envoy CPU per admitted request, a rule with `concurrency` against the same rule with windows only,",
        f"both Envoys in the same {len(m['ratios'])} rounds, each alone in turns of 3 s at 64 connections",
        "(`python3 scripts/bench concurrency`):",
        "",
        "| | Envoy CPU µs / request | ÷ windows only |",
        "|---|---|---|",
        f"| windows only | {m['admitted_us']:.1f} | 1.00 |",
        f"| with `concurrency` | {m['concurrent_us']:.1f} | **{m['ratio']:.2f}** (rounds: "
        + ", ".join(f"{r:.2f}" for r in m["ratios"]) + ") |",
        "",
        f"Store calls per message at 64 connections: windows only {m['per_message'].get('admitted', 0):.1f},"
        f" with `concurrency` {m['per_message'].get('concurrent', 0):.1f} (a decision and a lease's end each",
        f"count as a call); in that run {taken:,} leases were taken and {released:,} released.",
    ]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=ROUNDS)
    args = parser.parse_args()
    print("\n".join(report(measure(args.rounds))))


if __name__ == "__main__":
    main()
