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


def sync_report(results, admitted):
    """The report's section on synced rules."""
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


def target(results):
    """The issue's target (#26): the synced allowed path against no rule matching."""
    at = lambda name: next(r["rps"] for r in results[name] if r["connections"] == 64)
    ratio = at(SYNCED) / at("tollgate no match")
    return ("synced allowed path ≥ 0.85 × no rule matching at 64 connections", f"{ratio:.2f} × no match",
            ratio >= 0.85)
