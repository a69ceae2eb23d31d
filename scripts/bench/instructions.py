"""Envoy's instructions per request, by case, counted by callgrind: the
measure of a path's cost that this machine kind's noise does not move.

Envoy's CPU µs per request moves by ±30 % from run to run here (docs/
performance.md, "Measuring"), more than most changes it is meant to judge.
This counts instead: one Envoy per case (--concurrency 1) under `valgrind
--tool=callgrind` with instrumentation off while it starts and warms up
(V8 compiles the module's hot code, optimised, under that load), then on
for `wrk -c64` for a few seconds, then dumped. Instructions per request are
the dump's total over the requests Envoy completed meanwhile (its own
`downstream_rq_completed`). User-space instructions of every thread: the
kernel's share (about a fifth of an unmatched request's CPU, the sockets)
is not counted, nor cycles lost to cache misses. Two counts of one case
agree within about 1 %.

    python3 scripts/bench instructions [--cases unmatched,synced,...] [--seconds N] [--baseline REF]

--baseline builds REF's module (as scripts/bench/variants.py does) and
counts its cases too (the floor's are counted once).

Cases are scripts/bench/variants.py's, the floor's included (build it with
scripts/bench/floor.py first, or pass --floor).
"""

import argparse
import re
import subprocess
import tempfile
import time
from pathlib import Path

from . import floor, variants
from .common import COMPLETED, WASM, admin_stat, valkey_server, wait_port



def totals(path):
    """{event: total} of a callgrind dump ({} while it is being written)."""
    text = path.read_text()
    events, m = re.search(r"^events: (.+)$", text, re.M), re.search(r"^totals: ([\d ]+)$", text, re.M)
    if not (events and m):
        return {}
    return dict(zip(events.group(1).split(), map(int, m.group(1).split())))


def estimated_cycles(t):
    """callgrind's own estimate from its simple cache model: an L1 miss 10
    cycles, a last-level miss 100 (`CEst` in callgrind_annotate)."""
    l1 = t.get("I1mr", 0) + t.get("D1mr", 0) + t.get("D1mw", 0)
    ll = t.get("ILmr", 0) + t.get("DLmr", 0) + t.get("DLmw", 0)
    return t.get("Ir", 0) + 10 * l1 + 100 * ll


def count(case, valkey_port, workdir, seconds, wasm=WASM, cache_sim=False):
    """Instructions per request and decisions per message of `case` (with
    module `wasm`); with `cache_sim`, callgrind's cache model's misses and
    estimated cycles per request too."""
    # A file of its own per count: a repeat must not read an earlier dump.
    out = workdir / f"{case.replace(' ', '_')}-{time.time_ns()}.cg"
    callgrind = ["valgrind", "--tool=callgrind", "--smc-check=all-non-file", "--instr-atstart=no",
                 f"--callgrind-out-file={out}"] + (["--cache-sim=yes"] if cache_sim else [])
    v = variants.Variant("i", wasm, {}, case, valkey_port, workdir, under=callgrind)
    envoy = v.envoy
    url = f"http://127.0.0.1:{v.ports[0]}/"
    try:
        wait_port(v.ports[0], timeout=180)
        subprocess.run(["wrk", "-t1", "-c64", "-d4s", "-H", "x-user-id: bench", url], capture_output=True, check=True)
        messages, decisions = (admin_stat(v.ports[2], n) for n in v.counts)
        done = admin_stat(v.ports[2], COMPLETED)
        subprocess.run(["callgrind_control", "-i", "on", str(envoy.pid)], capture_output=True, check=True)
        subprocess.run(["wrk", "-t1", "-c64", f"-d{seconds}s", "-H", "x-user-id: bench", url], capture_output=True,
                       check=True)
        subprocess.run(["callgrind_control", "-i", "off", str(envoy.pid)], capture_output=True, check=True)
        subprocess.run(["callgrind_control", "-d", str(envoy.pid)], capture_output=True, check=True)
        done = admin_stat(v.ports[2], COMPLETED) - done
        messages, decisions = (admin_stat(v.ports[2], n) - b for n, b in zip(v.counts, (messages, decisions)))
        dumps = sorted(workdir.glob(out.name + ".*"))
        end = time.time() + 30
        while not dumps or not totals(dumps[-1]):
            if time.time() > end:
                raise RuntimeError(f"no callgrind dump for {case}")
            time.sleep(0.2)
            dumps = sorted(workdir.glob(out.name + ".*"))
        events = {}
        for d in dumps:
            for name, n in totals(d).items():
                events[name] = events.get(name, 0) + n
        per = {name: n / max(done, 1) for name, n in events.items()}
        result = {"instructions": per.get("Ir", 0.0), "requests": done,
                  "per_message": decisions / messages if messages else 0.0}
        if cache_sim:
            result["cache"] = {"I1 misses": per.get("I1mr", 0.0), "D1 misses": per.get("D1mr", 0.0) + per.get(
                "D1mw", 0.0), "LL misses": per.get("ILmr", 0.0) + per.get("DLmr", 0.0) + per.get("DLmw", 0.0),
                               "cycles (est.)": estimated_cycles(per)}
        return result
    finally:
        v.stop()


def run(cases, seconds=3, repeat=1, baseline=None, cache_sim=False):
    """{(label, case): [counts]}: this tree's module, and `baseline`'s (a git ref) if given."""
    workdir = Path(tempfile.mkdtemp(prefix="tollgate-instructions-"))
    modules = [("this tree", WASM)]
    if baseline:
        modules.insert(0, (f"baseline {baseline}", variants.build_baseline(baseline, workdir)))
    with valkey_server(workdir) as (valkey_port, _):
        return {(label, case): [count(case, valkey_port, workdir, seconds, wasm, cache_sim) for _ in range(repeat)]
                for label, wasm in modules for case in cases
                if "floor" not in variants.CASES[case] or label == "this tree"}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--cases", default="unmatched,synced,admitted,floor pass,floor local,floor store")
    parser.add_argument("--seconds", type=int, default=3)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--floor", action="store_true", help="build the floor module first")
    parser.add_argument("--baseline", default=None, help="a git ref whose module is counted too")
    parser.add_argument("--cache-sim", action="store_true",
                        help="simulate the caches too: misses and estimated cycles per request")
    args = parser.parse_args()
    if args.floor:
        floor.build()
    results = run(args.cases.split(","), args.seconds, args.repeat, args.baseline, args.cache_sim)
    for (label, case), rows in results.items():
        base = results.get((label, "unmatched"), [{}])[0].get("instructions")
        for r in rows:
            ratio = f", {r['instructions'] / base:.2f} × its unmatched" if base else ""
            print(f"{label}, {case}: {r['instructions']:,.0f} instructions per request{ratio} ({r['requests']} "
                  f"requests, {r['per_message']:.1f} decisions per message)")
            if "cache" in r:
                base_cycles = results.get((label, "unmatched"), [{}])[0].get("cache", {}).get("cycles (est.)")
                cache = ", ".join(f"{k} {v:,.0f}" for k, v in r["cache"].items())
                ratio = f", {r['cache']['cycles (est.)'] / base_cycles:.2f} × its unmatched" if base_cycles else ""
                print(f"    {cache}{ratio}")


if __name__ == "__main__":
    main()
