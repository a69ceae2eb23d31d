"""Envoy's user and system CPU per request, apart, for no rule matching and
one other case of scripts/bench/variants.py, in rounds: per round a new
Envoy per case (--concurrency 1, pinned to CPU 0, wrk on CPU 1), loaded 4 s
first, then `wrk -c64` for 3 s. A callgrind count (scripts/
scripts/bench/instructions.py) holds user-space instructions only; this shows the
system time it leaves out (the sockets), and whether it differs by case.

    python3 scripts/bench cpu_split [--rounds 8] [--case synced]
"""

import argparse
import statistics
import subprocess
import tempfile
from pathlib import Path

from .common import COMPLETED, WASM, admin_stat, cpu_times, valkey_server
from .variants import Variant


def measure(case, valkey_port, workdir):
    """(user µs, system µs) per request of one fresh Envoy running `case`."""
    v = Variant("split", WASM, {}, case, valkey_port, workdir, pin=True, warm="4s")
    try:
        v.ready()
        done, (user, system) = admin_stat(v.ports[2], COMPLETED), cpu_times(v.envoy.pid)
        subprocess.run(["taskset", "-c", "1", "wrk", "-t1", "-c64", "-d3s", "-H", "x-user-id: bench",
                        f"http://127.0.0.1:{v.ports[0]}/"], capture_output=True, check=True)
        done = admin_stat(v.ports[2], COMPLETED) - done
        after = cpu_times(v.envoy.pid)
        return (after[0] - user) * 1e6 / done, (after[1] - system) * 1e6 / done
    finally:
        v.envoy.terminate()
        v.envoy.wait()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--case", default="synced")
    args = parser.parse_args()
    cases = ["unmatched", args.case]
    workdir = Path(tempfile.mkdtemp(prefix="tollgate-split-"))
    rows = {c: [] for c in cases}
    with valkey_server(workdir) as (valkey_port, _):
        for r in range(args.rounds):
            for case in cases:
                rows[case].append(measure(case, valkey_port, workdir))
            print(f"round {r + 1}: " + ", ".join(f"{c} user {rows[c][-1][0]:.1f} µs, system {rows[c][-1][1]:.1f} µs"
                                                 for c in cases), flush=True)
    for case, got in rows.items():
        user, system = (statistics.median(x[i] for x in got) for i in (0, 1))
        print(f"{case}: user {user:.1f} µs, system {system:.1f} µs per request (medians), "
              f"system {system / (user + system):.2f} of the whole")
    for label, of in (("user", lambda x: x[0]), ("user + system", lambda x: x[0] + x[1])):
        ratios = [of(a) / of(b) for a, b in zip(rows[args.case], rows["unmatched"])]
        print(f"{args.case} ÷ unmatched, {label}, per round: {' '.join(f'{x:.2f}' for x in ratios)}; "
              f"median {statistics.median(ratios):.2f}")


if __name__ == "__main__":
    main()
