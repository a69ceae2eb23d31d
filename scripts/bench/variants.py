"""Variants of the module or its configuration measured against one another
in one run, the way ../shared/measuring.md measures Envoy's CPU per request:
one Envoy per variant (--concurrency 1), all up at once against one Valkey,
wrk -t1 at 64 connections run on each in turn, in rounds, so that whatever
else loads the machine falls on every variant alike. Per variant and case:
Envoy CPU µs per request, decisions per message, requests per second, and
p50 at 1 connection and p99 at 16 connections (measured once per round, for
--latency each: 1 s unless told; the medians over rounds are reported).

`make bench BASELINE=<ref>` builds its baseline module with
`build_baseline` below; alone, against the working tree:

    python3 scripts/bench variants [--baseline REF] [--rounds N] [--messages 1,2,4,64]

--messages measures the working tree's module with each value of
`valkey.max_messages_in_flight` (how its default was chosen).

    python3 scripts/bench variants --module LABEL=PATH ... --cases unmatched,synced
        [--fresh] [--pin]

compares built modules (e.g. with one host call repeated ten times, to
price it) on the cases of CASES; --fresh starts a new Envoy per variant and
round, --pin puts Envoy alone on CPU 0 and wrk alone on CPU 1, --warm
loads each Envoy that long before it is measured.
"""

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import time

from .common import (ENVOY, ROOT, TOOLS, WASM, admin_stat, counting, cpu_seconds, free_port, render,
                     valkey_server, wait_port, worktree, wrk)

BIG = 1_000_000_000
CASES = {
    "no filter": {"kind": "none"},
    "unmatched": {"kind": "tollgate", "rule": {"name": "bench", "match": {"path_prefix": "/never"},
                                                "limits": [{"limit": 1, "period": "1h"}]}},
    "admitted": {"kind": "tollgate", "rule": {"name": "bench", "algorithm": "fixed_window",
                                               "key": [{"header": "x-user-id"}],
                                               "limits": [{"limit": BIG, "period": "1h"}]}},
    "synced": {"kind": "tollgate", "rule": {"name": "bench", "algorithm": "fixed_window",
                                            "key": [{"header": "x-user-id"}],
                                            "limits": [{"limit": BIG, "period": "1h"}],
                                            "sync": {"interval": "100ms"}}},
}
# The synced rule with the decision's filter state for the access log
# (`logged`; off by default), and without the RateLimit headers on admitted
# requests (`quiet`: the leanest admitted path); the store path logged too
# (docs/configuration.md).
LOGGED = {"response": {"filter_state": True}}
CASES["synced logged"] = dict(CASES["synced"], plugin_extra=LOGGED)
CASES["synced quiet"] = dict(CASES["synced"], plugin_extra={"response": {"on_allowed": False}})
CASES["admitted logged"] = dict(CASES["admitted"], plugin_extra=LOGGED)
# The admitted rule with a concurrency limit (#41): each request takes a
# lease in the decision and ends it when it is gone (docs/concurrency.md).
CASES["concurrent"] = {"kind": "tollgate", "rule": dict(CASES["admitted"]["rule"], concurrency=1_000_000)}
# The admitted rule open to per-key overrides (#42): every decision reads
# the key's override hash, absent here; and a rule of its own name whose key
# has one in force (scripts/bench/overrides.py writes it).
CASES["overridable"] = {"kind": "tollgate", "rule": dict(CASES["admitted"]["rule"], overrides=True)}
CASES["overridden"] = {"kind": "tollgate", "rule": dict(CASES["overridable"]["rule"], name="benchovr")}
# Denied from the denial cache: one request per hour, so after the first the
# worker answers 429 without a store call.
CASES["denied"] = {"kind": "tollgate", "rule": dict(CASES["admitted"]["rule"], limits=[{"limit": 1, "period": "1h"}])}
# The floor (benches/floor, scripts/bench/floor.py): a module making only the
# host calls of tollgate's path of the same name, in the filter's place
# (tollgate stays the store tunnel's framing shim).
FLOOR_WASM = ROOT / "benches/floor/target/floor.wasm"
for path in ("pass", "local", "hold", "store", "sized"):
    CASES[f"floor {path}"] = dict(CASES["admitted"], floor=path)


def floor_config(text, path):
    """`text` (a rendered tollgate case) with the floor module as the filter,
    configured with `path`."""
    lines = text.split("\n")
    start = next(i for i, l in enumerate(lines) if l.strip() == "- name: tollgate")
    at = next(i for i in range(start, len(lines)) if lines[i].strip() == "value: |")
    pad = " " * (len(lines[at]) - len(lines[at].lstrip()) + 2)
    end = next(i for i in range(at + 1, len(lines)) if not lines[i].startswith(pad))
    lines[at + 1:end] = [pad + path]
    return "\n".join(lines).replace(f"filename: {WASM}", f"filename: {FLOOR_WASM}", 1)


def build_baseline(ref, workdir):
    """The release module of git `ref`, built as `make build` builds it (cargo, then wasm-metadce with that
    ref's export list, then wasm-opt at that ref's Makefile's level) from a worktree of its own, with this
    tree's tools (never `make tools` there: it would point .tools/bin at the temporary worktree)."""
    with worktree(ref, workdir / "baseline") as tree:
        target = workdir / "target"
        subprocess.run(["cargo", "build", "--quiet", "--release", "--target", "wasm32-wasip1", "--lib"], cwd=tree,
                       check=True, env={**os.environ, "CARGO_TARGET_DIR": str(target)})
        raw = target / "wasm32-wasip1/release/tollgate.wasm"
        dce, out = workdir / "baseline.dce.wasm", workdir / "baseline.wasm"
        subprocess.run([str(TOOLS / "binaryen/usr/bin/wasm-metadce"), "--graph-file",
                        str(tree / "src/filter/exports.json"), str(raw), "-o", str(dce)], check=True,
                       capture_output=True)
        level = re.search(r"wasm-opt (-O\w+)", (tree / "Makefile").read_text())
        subprocess.run([str(TOOLS / "bin/wasm-opt"), level.group(1) if level else "-Oz", str(dce), "-o", str(out)],
                       check=True)
        return out


class Variant:
    def __init__(self, label, wasm, valkey_extra, case, valkey_port, workdir, count_calls=False, pin=False,
                 warm="1s", under=()):
        """`under`: a command Envoy runs under (scripts/bench/instructions.py: callgrind)."""
        self.label, self.case_name, self.pin, self.warm = label, case, pin, warm
        self.ports = [free_port(), free_port(), free_port()]
        base = {"valkey": {"cluster": "tollgate_valkey", "timeout": "1s", **valkey_extra}}
        spec = dict(CASES[case], plugin={**base, **CASES[case].get("plugin_extra", {})})
        text = render(spec, self.ports, valkey_port)
        text = floor_config(text, spec["floor"]) if "floor" in spec else text.replace(str(WASM), str(wasm))
        if count_calls:
            text = counting(text)
        config = workdir / f"{label}-{case}{'-calls' if count_calls else ''}.yaml".replace(" ", "_")
        config.write_text(text)
        self.config = config
        self.log = open(config.with_suffix(".log"), "w")
        # Pinned: Envoy alone on CPU 0, wrk alone on CPU 1.
        self.command = (["taskset", "-c", "0"] if pin else []) + list(under) + [ENVOY, "-c", str(config), "--concurrency", "1", "--use-dynamic-base-id",
                              "--disable-hot-restart", "-l", "error"]
        self.envoy = subprocess.Popen(self.command, stdout=self.log, stderr=self.log)
        self.rows = []
        # Messages on the store stream, and the decisions they carried.
        self.counts = (("wasmcustom.floor.messages", "wasmcustom.floor.rule.allowed") if "floor" in spec else
                       ("wasmcustom.tollgate.store.messages", "wasmcustom.tollgate.store.requests"))

    def restart(self):
        """A new Envoy of the same config: its module compiled afresh."""
        self.envoy.terminate()
        self.envoy.wait()
        self.envoy = subprocess.Popen(self.command, stdout=self.log, stderr=self.log)

    def ready(self):
        wait_port(self.ports[0])
        # V8 compiles the module's hot functions again, optimised, after a
        # while under load: an Envoy measured before that runs slower.
        subprocess.run(["wrk", "-t1", "-c4", "-d" + self.warm, "-H", "x-user-id: bench", f"http://127.0.0.1:{self.ports[0]}/"],
                       capture_output=True, check=True)

    def measure(self, workdir, duration, latency="1s"):
        calls, decisions = (admin_stat(self.ports[2], n) for n in self.counts)
        cpu = cpu_seconds(self.envoy.pid)
        cpu_of_wrk = 1 if self.pin else None
        result = wrk(self.ports[0], 64, None, workdir, duration=duration, cpu=cpu_of_wrk)
        cpu = cpu_seconds(self.envoy.pid) - cpu
        calls, decisions = (admin_stat(self.ports[2], n) - before for n, before in zip(self.counts, (calls, decisions)))
        one = wrk(self.ports[0], 1, None, workdir, duration=latency, cpu=cpu_of_wrk)
        sixteen = wrk(self.ports[0], 16, None, workdir, duration=latency, cpu=cpu_of_wrk)
        self.rows.append({"us": cpu * 1e6 / max(result["requests"], 1), "rps": result["rps"],
                          "per_message": decisions / calls if calls else 0.0,
                          "p50_1": one["p50"], "p99_16": sixteen["p99"]})

    def host_calls(self, workdir):
        """Host calls per request (this Envoy's limiter VM counts them:
        never one that is timed), 16 connections for 2 s."""
        names = [f"wasmcustom.tollgate.cost.{n}" for n in ("requests", "host_calls", "requests_done")]

        def read():
            end = time.time() + 2
            while True:
                values = [admin_stat(self.ports[2], n) for n in names]
                if values[2] == values[0] or time.time() > end:
                    return values[:2]
                time.sleep(0.02)

        before = read()
        wrk(self.ports[0], 16, None, workdir, duration="2s")
        after = read()
        return (after[1] - before[1]) / max(after[0] - before[0], 1)

    def summary(self):
        med = lambda k: statistics.median(r[k] for r in self.rows)
        return {k: med(k) for k in self.rows[0]}

    def stop(self):
        self.envoy.terminate()
        self.envoy.wait()
        self.log.close()


def run(modules, rounds=3, duration="3s", cases=("no filter", "unmatched", "admitted"), fresh=False, pin=False,
        warm="1s", latency="1s"):
    """`modules`: (label, wasm path, extra valkey fields). Returns {(label, case): summary}. `fresh`: a new
    Envoy per variant and round (an Envoy's own speed varies by up to ±15 % from one start to the next here);
    `pin`: Envoy alone on CPU 0 and wrk alone on CPU 1 (Valkey and the rest float); `warm`: how long each
    Envoy is loaded before it is measured; `latency`: how long each latency run lasts."""
    workdir = Path(tempfile.mkdtemp(prefix="tollgate-variants-"))
    variants = []
    with valkey_server(workdir) as (valkey_port, _):
        try:
            for case in cases:
                for label, wasm, extra in modules:
                    if (case == "no filter" or "floor" in CASES[case]) and any(v.case_name == case for v in variants):
                        continue
                    variants.append(Variant(label if case != "no filter" and "floor" not in CASES[case] else "-", wasm, extra, case, valkey_port,
                                            workdir, pin=pin, warm=warm))
            for v in variants:
                v.ready()
            for r in range(rounds):
                # Every other round in reverse: measured in one fixed order, the
                # second of two modules on the same case came out 10-20 % slower
                # whichever module it was (the order, not the code).
                for v in (variants if r % 2 == 0 else variants[::-1]):
                    if fresh and r > 0:
                        v.restart()
                        v.ready()
                    v.measure(workdir, duration, latency)
                print(f"  round {r + 1} of {rounds} done", flush=True)
            # Each round's µs kept too: a ratio of two cases is also taken
            # within each round (both measured minutes apart at most).
            results = {(v.label, v.case_name): dict(v.summary(), us_rounds=[r["us"] for r in v.rows]) for v in variants}
            for v in variants:
                v.stop()
            variants = []
            for (label, case), summary in results.items():
                summary["host_calls"] = 0.0
                if case == "no filter" or "floor" in CASES[case]:
                    continue
                module = next(m for m in modules if m[0] == label)
                counter = Variant(label, module[1], module[2], case, valkey_port, workdir, count_calls=True)
                variants.append(counter)
                counter.ready()
                summary["host_calls"] = counter.host_calls(workdir)
            return results
        finally:
            for v in variants:
                v.stop()


def paired(a, u):
    """The ratio of `a`'s µs to `u`'s within each round: median (range)."""
    ratios = sorted(x / y for x, y in zip(a.get("us_rounds", []), u.get("us_rounds", [])) if y)
    if not ratios:
        return "-"
    return f"{statistics.median(ratios):.2f} ({ratios[0]:.2f}–{ratios[-1]:.2f})"


def table(results):
    """Markdown rows: per variant and case, and the admitted/unmatched CPU ratio per variant."""
    lines = ["| variant | case | Envoy CPU µs/request | decisions/message | host calls/request | requests/s (64 conn) "
             "| p50 1 conn (ms) | p99 16 conn (ms) |", "|---|---|---|---|---|---|---|---|"]
    for (label, case), s in results.items():
        lines.append(f"| {label} | {case} | {s['us']:.1f} | {s['per_message']:.1f} | {s['host_calls']:.1f} "
                     f"| {s['rps']:.0f} | {s['p50_1']:.2f} | {s['p99_16']:.2f} |")
    lines.append("")
    lines.append("| variant | case | ÷ unmatched: Envoy CPU per request | the same per round: median (range) "
                 "| ÷ unmatched: requests/s |")
    lines.append("|---|---|---|---|---|")
    for (label, case), a in results.items():
        u = results.get((label, "unmatched"))
        if case not in ("unmatched", "no filter") and u and u["us"] and u["rps"]:
            lines.append(f"| {label} | {case} | {a['us'] / u['us']:.2f} | {paired(a, u)} "
                         f"| {a['rps'] / u['rps']:.2f} |")
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--baseline", default=None)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--duration", default="3s")
    parser.add_argument("--messages", default=None, help="values of valkey.max_messages_in_flight to compare")
    parser.add_argument("--fresh", action="store_true", help="a new Envoy per variant and round")
    parser.add_argument("--pin", action="store_true", help="Envoy on CPU 0, wrk on CPU 1")
    parser.add_argument("--warm", default="1s", help="load before each Envoy is measured")
    parser.add_argument("--latency", default="1s", help="length of each p50 (1 conn) and p99 (16 conn) run")
    parser.add_argument("--module", action="append", default=[], help="LABEL=PATH: another module to compare")
    parser.add_argument("--cases", default="no filter,unmatched,admitted", help="comma-separated: " + ", ".join(CASES))
    args = parser.parse_args()
    if not WASM.exists():
        sys.exit("build the module first: make build")
    modules = []
    if args.messages:
        modules += [(f"max_messages_in_flight {m}", WASM, {"max_messages_in_flight": int(m)})
                    for m in args.messages.split(",")]
    elif not args.module:
        modules.append(("this tree", WASM, {}))
    modules += [(m.split("=", 1)[0], Path(m.split("=", 1)[1]), {}) for m in args.module]
    if args.baseline:
        workdir = Path(tempfile.mkdtemp(prefix="tollgate-baseline-"))
        modules.insert(0, (f"baseline {args.baseline}", build_baseline(args.baseline, workdir), {}))
    print(table(run(modules, args.rounds, args.duration, tuple(args.cases.split(",")), args.fresh, args.pin, args.warm,
                    args.latency)))


if __name__ == "__main__":
    main()
