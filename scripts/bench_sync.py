"""The synced-rule rows of `make bench` (`rules[].sync`, docs/sync.md).

`tollgate synced allowed` is a case of the main table (one key far under
its limit, interval 100 ms); this module adds the admission run and the
report's section: the synced allowed path against "no filter" and against
"tollgate no match" of the same run, the store calls per request, and one
Envoy of 2 workers driven past a limit within one window (admitted against
the limit)."""

import re
import subprocess
import time

import bench_variants
from bench_common import WASM

from bench_common import ENVOY, admin_stat, free_port, render, resp, wait_port

SYNCED = "tollgate synced allowed"
INTERVAL = "100ms"
LIMIT = 20_000
RUN = "5s"


def case(big):
    """The main table's synced case: fixed_window, never denying."""
    return {"name": SYNCED, "kind": "tollgate", "rule": {
        "name": "bench", "algorithm": "fixed_window", "key": [{"header": "x-user-id"}],
        "limits": [{"limit": big, "period": "1h"}], "sync": {"interval": INTERVAL}}}


PAIRED = ("unmatched", "synced", "synced quiet", "synced lean")
PAIRED_ROUNDS = 7
# Each Envoy under load this long before it is measured: V8 recompiles the
# module's hot functions, optimised, a while after the first requests, and
# an Envoy measured before that ran up to 2 × slower.
PAIRED_WARM = "4s"


def paired():
    """The synced allowed path against no rule matching, measured the way
    ../shared/measuring.md compares variants (scripts/bench_variants.py):
    one Envoy per case, pinned to CPU 0 with wrk on CPU 1, a new Envoy per
    round loaded PAIRED_WARM before it is measured, `wrk -c64` 2 s per case
    in turn, medians of PAIRED_ROUNDS rounds. The cases: `synced` as configured by default, `synced quiet`
    without the RateLimit headers on admitted responses
    (`response.on_allowed: false`), `synced lean` without the decision's
    filter state too (`response.filter_state: false`)."""
    results = bench_variants.run([("this tree", WASM, {})], rounds=PAIRED_ROUNDS, duration="2s", cases=PAIRED,
                                 fresh=True, pin=True, warm=PAIRED_WARM)
    return {case: summary for (_, case), summary in results.items()}


def admission(valkey_port, workdir):
    """One Envoy of 2 workers, `wrk -t2 -c64` for 5 s on one key of a synced
    sliding_log rule of LIMIT per 10 s: every request within one window, so
    the exact answer is LIMIT admitted."""
    rule = {"name": "bench", "key": [{"header": "x-user-id"}], "limits": [{"limit": LIMIT, "period": "10s"}],
            "sync": {"interval": INTERVAL}}
    ports = [free_port(), free_port(), free_port()]
    config = workdir / "sync-admission.yaml"
    config.write_text(render({"name": "sync admission", "kind": "tollgate", "rule": rule}, ports, valkey_port))
    log = open(workdir / "sync-admission.log", "w")
    envoy = subprocess.Popen([ENVOY, "-c", str(config), "--concurrency", "2", "--use-dynamic-base-id",
                              "-l", "error"], stdout=log, stderr=log)
    try:
        wait_port(ports[0])
        out = subprocess.run(["wrk", "-t2", "-c64", f"-d{RUN}", "-H", "x-user-id: bench",
                              f"http://127.0.0.1:{ports[0]}/"], capture_output=True, text=True, check=True).stdout
        stat = lambda n: admin_stat(ports[2], f"wasmcustom.tollgate.{n}")
        admitted = stat("rule.bench.allowed")
        # The last flushes land within a few intervals.
        stored = lambda: int(resp(valkey_port, "ZCARD", "tollgate:{bench:bench}:log"))
        end = time.time() + 5
        while stored() < admitted and time.time() < end:
            time.sleep(0.02)
        row = {
            "requests": int(re.search(r"(\d+) requests in", out).group(1)),
            "rps": float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1)),
            "admitted": admitted,
            "stored": stored(),
            "local": stat("sync.allowed") + stat("sync.denied"),
            "store_requests": stat("store.requests"),
            "flushes": stat("sync.flushes"),
        }
        print(f"  sync admission: {row['requests']} requests, {admitted} admitted of {LIMIT}, "
              f"{row['stored']} in Valkey, {row['store_requests']} store calls", flush=True)
        return row
    finally:
        envoy.terminate()
        envoy.wait()
        log.close()


def sync_report(results, synced):
    """The report's section on synced rules."""
    admitted, pair = synced.get("admission"), synced.get("paired")
    at = lambda name, c: next(r for r in results[name] if r["connections"] == c)
    lines = ["", "## Synced rules", "",
             f"`{SYNCED}`: one key of a `fixed_window` rule far under its limit, `sync` every {INTERVAL}: decided",
             "on the worker, flushed every interval (docs/sync.md). Against \"no filter\" and \"tollgate no match\"",
             "(the module loaded, no rule matching) of the same run; store calls are `store.requests` (the",
             "flushes: the warm-up synced the key) per request wrk completed.", "",
             "| conns | req/s | × no filter | × no match | store calls / request |", "|---|---|---|---|---|"]
    for c in (16, 64):
        r = at(SYNCED, c)
        lines.append(f"| {c} | {r['rps']:.0f} | {r['rps'] / at('no filter', c)['rps']:.2f} | "
                     f"{r['rps'] / at('tollgate no match', c)['rps']:.2f} | {r['store_per_request']:.5f} |")
    if pair:
        u = pair["unmatched"]
        lines += ["", "The same against no rule matching, paired: one Envoy per case, pinned to CPU 0 with wrk on",
                  f"CPU 1, a new Envoy per round loaded {PAIRED_WARM} first, `wrk -c64` 2 s per case in turn; medians of "
                  f"{PAIRED_ROUNDS} rounds",
                  "(scripts/bench_sync.py `paired`). The table above runs each case once on a shared machine,",
                  "where one Envoy's speed varies by up to ±15 % from one start to the next; this one is the",
                  "figure to judge by. `quiet`: `response.on_allowed: false`; `lean`: `filter_state: false` too.",
                  "", "| case | Envoy CPU µs / request | req/s (64 conns) | × no match (req/s) "
                  "| host calls / request |", "|---|---|---|---|---|"]
        for case in PAIRED:
            r = pair[case]
            lines.append(f"| {case} | {r['us']:.1f} | {r['rps']:.0f} | {r['rps'] / u['rps']:.2f} | "
                         f"{r['host_calls']:.1f} |")
    if admitted:
        a = admitted
        over = 100 * (a["admitted"] / LIMIT - 1)
        lines += ["", f"One Envoy of 2 workers, `wrk -t2 -c64` for {RUN} on one key of a synced `sliding_log` rule",
                  f"of {LIMIT:,} per 10 s (every request within one window: the exact answer is the limit):", "",
                  "| requests | req/s | admitted | against the limit | in Valkey | decided on the workers "
                  "| store calls / request |", "|---|---|---|---|---|---|---|",
                  f"| {a['requests']} | {a['rps']:.0f} | {a['admitted']} | {over:+.2f} % | {a['stored']} | "
                  f"{a['local']} | {a['store_requests'] / max(a['requests'], 1):.5f} |"]
    return lines


def target(synced):
    """The issue's target (#26): the synced allowed path against no rule
    matching at 64 connections, from the paired run."""
    pair = synced["paired"]
    u = pair["unmatched"]["rps"]
    ratios = {case: pair[case]["rps"] / u for case in PAIRED[1:]}
    shown = ", ".join(f"{case}: {ratio:.2f}" for case, ratio in ratios.items())
    return ("synced allowed path ≥ 0.85 × no rule matching at 64 connections (paired; default config)",
            f"{shown} × no match", ratios["synced"] >= 0.85)
