"""Envoy CPU per request of two cases measured at the same time, so that
the machine's drift falls on both alike.

Timed one after the other, a case's Envoy CPU per request moves by ±30 %
from round to round on this machine kind (docs/performance.md,
"Measuring"), whatever the code: the host's load changes between the two
measurements of a ratio. Here the two cases' Envoys (--concurrency 1 each)
share CPU 0, each driven by its own `wrk -t1 -c64` on CPU 1, all four
running during the same seconds: whatever slows CPU 0 slows both. Per
round, a new Envoy per case, loaded 4 s first (both at once too), then
both driven for `--duration`; each Envoy's CPU (user + system, from
/proc) is divided by the requests it completed (its own
`downstream_rq_completed`). A round's ratio is case ÷ unmatched; its
inverse is the throughput ratio per CPU second.

Both Envoys share one core's caches, switching every few milliseconds, a
cost an Envoy alone on its core does not pay: the ratio is the two paths'
relative cost under that sharing, not a figure for either alone.

    python3 scripts/bench together [--case synced,admitted] [--case 'synced+synced quiet'] [--rounds 8] [--duration 3] [--wasm PATH] [--against PATH]
"""

import argparse
import statistics
import subprocess
import tempfile
from pathlib import Path

from .common import COMPLETED, WASM, admin_stat, cpu_seconds, valkey_server, wait_port
from .variants import Variant


def usage(v):
    """(requests completed, CPU seconds) of variant `v`'s Envoy so far."""
    return admin_stat(v.ports[2], COMPLETED), cpu_seconds(v.envoy.pid)


def drive(variants, duration, connections=4):
    """`wrk` against every one of `variants` at once, on CPU 1; waits for all."""
    runs = [subprocess.Popen(["taskset", "-c", "1", "wrk", "-t1", f"-c{connections}", f"-d{duration}",
                              "-H", "x-user-id: bench", f"http://127.0.0.1:{v.ports[0]}/"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for v in variants]
    for run in runs:
        if run.wait() != 0:
            raise RuntimeError("wrk failed")


def one_round(runs, valkey_port, workdir, duration, alternate=0):
    """{name: Envoy CPU µs per request} of `runs` ((name, case, module)), all
    their Envoys measured at once; with `alternate`, each alone instead, in
    turn, `alternate` times for `duration` seconds each."""
    variants = [Variant(name.replace(" ", "_").replace("/", "_"), wasm, {}, case, valkey_port,
                                       workdir, pin=True) for name, case, wasm in runs]
    try:
        for v in variants:
            wait_port(v.ports[0])
        # Loaded first (V8 compiles the hot code optimised), all at once.
        drive(variants, "4s")
        if alternate:
            return alternating(runs, variants, duration, alternate)
        before = [usage(v) for v in variants]
        drive(variants, f"{duration}s", connections=64)
        out = {}
        for (name, _, _), v, (done, cpu) in zip(runs, variants, before):
            now_done, now_cpu = usage(v)
            out[name] = (now_cpu - cpu) * 1e6 / max(now_done - done, 1)
        return out
    finally:
        for v in variants:
            v.stop()


def alternating(runs, variants, duration, times):
    """{name: Envoy CPU µs per request}: each Envoy driven alone for
    `duration` seconds in turn (the order reversed every other turn),
    `times` turns; its CPU and requests summed over its turns."""
    cpu, done = [0.0] * len(variants), [0] * len(variants)
    for t in range(times):
        order = list(range(len(variants)))
        for i in (order if t % 2 == 0 else order[::-1]):
            v = variants[i]
            n, c = usage(v)
            drive([v], f"{duration}s", connections=64)
            now_n, now_c = usage(v)
            done[i] += now_n - n
            cpu[i] += now_c - c
    return {name: cpu[i] * 1e6 / max(done[i], 1) for i, (name, _, _) in enumerate(runs)}


def together(cases, rounds=8, duration=3, wasm=WASM, against=None, alternate=0):
    """{case: {"ratios": per round, "ratio": median, "us": median µs, "unmatched_us": median µs}} for each
    of `cases` measured at once with no rule matching, `rounds` rounds each, against a Valkey of its own.
    A case may be several joined by "+": all of them run at once with no rule matching (an A/B of
    configurations within each round). `against`: another module whose Envoy runs each case at the same
    time too, as "<case> against" (its ratio to this module's no match). `alternate`: each Envoy alone in
    turn instead of all at once, that many turns of `duration` seconds per round."""
    workdir = Path(tempfile.mkdtemp(prefix="tollgate-together-"))
    out, rows = {}, {group: [] for group in cases}
    runs = {group: [("unmatched", "unmatched", wasm)] + [(case, case, wasm) for case in group.split("+")]
                   + ([(f"{case} against", case, against) for case in group.split("+")] if against else [])
            for group in cases}
    with valkey_server(workdir) as (valkey_port, _):
        # Round by round through the cases, so that a slow spell of the
        # machine falls on all of them.
        for r in range(rounds):
            for group in cases:
                # Every other round the Envoys start in the other order.
                order = runs[group] if r % 2 == 0 else runs[group][::-1]
                rows[group].append(one_round(order, valkey_port, workdir, duration, alternate))
                print(f"  round {r + 1} of {rounds}: "
                      + ", ".join(f"{name} {us:.1f} µs" for name, us in rows[group][-1].items()), flush=True)
        for group in cases:
            for name, _, _ in runs[group][1:]:
                ratios = [row[name] / row["unmatched"] for row in rows[group]]
                out[name] = {"ratios": ratios, "ratio": statistics.median(ratios),
                             "us": statistics.median(row[name] for row in rows[group]),
                             "unmatched_us": statistics.median(row["unmatched"] for row in rows[group])}
    return out


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--case", default="synced", help="cases of scripts/bench/variants.py, comma-separated; "
                        "cases joined by + run at once")
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--duration", type=int, default=3)
    parser.add_argument("--wasm", default=str(WASM), help="the module to measure (default: this tree's build)")
    parser.add_argument("--against", default=None, help="another module, measured at the same time")
    parser.add_argument("--alternate", type=int, default=0,
                        help="N: each Envoy alone in turn instead, N turns of --duration seconds per round")
    args = parser.parse_args()
    cases = args.case.split(",")
    for case, r in together(cases, args.rounds, args.duration, args.wasm, args.against, args.alternate).items():
        print(f"{case} ÷ unmatched, Envoy CPU per request, per round: {' '.join(f'{x:.2f}' for x in r['ratios'])}; "
              f"median {r['ratio']:.3f} (range {min(r['ratios']):.2f}–{max(r['ratios']):.2f}): throughput per "
              f"CPU second {1 / r['ratio']:.3f} ×; medians {r['unmatched_us']:.1f} and {r['us']:.1f} µs")


if __name__ == "__main__":
    main()
