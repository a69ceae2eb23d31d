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

from .common import ENVOY, admin_stat, free_port, render, resp, wait_port

SYNCED = "tollgate synced allowed"
INTERVAL = "100ms"
LIMIT = 20_000
RUN = "5s"


def case(big):
    """The main table's synced case: fixed_window, never denying."""
    # `since`: the commit that brought `sync`; an older BASELINE skips the case.
    return {"name": SYNCED, "kind": "tollgate", "since": "e0ef1de", "rule": {
        "name": "bench", "algorithm": "fixed_window", "key": [{"header": "x-user-id"}],
        "limits": [{"limit": big, "period": "1h"}], "sync": {"interval": INTERVAL}}}


# Measured at once with no rule matching (scripts/bench/together.py): the
# synced path as configured by default, with the decision's filter state
# (`logged`), without the RateLimit headers on admitted responses (`quiet`);
# with `admitted`, the store path, for #27's target.
TOGETHER = ("synced", "synced logged", "synced quiet", "admitted")
TOGETHER_ROUNDS = 6
# The targets' two paths again with each Envoy alone on the core, in turns
# (`--alternate`): as a proxy runs, without another one taking the core
# whenever it waits for the store (docs/performance.md, "Measured alone").
ALONE = ("synced", "admitted")
ALONE_TURNS = 3


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
    admitted, together = synced.get("admission"), synced.get("together")
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
    if together:
        lines += ["", "The same against no rule matching, measured at once: per round a new Envoy per case, both",
                  "pinned to CPU 0, each driven by its own `wrk -t1 -c64` on CPU 1 during the same 3 s (loaded 4 s",
                  "first), so that the machine's drift falls on both alike (scripts/bench/together.py); Envoy CPU",
                  "per request, case ÷ no match, per round and the median of "
                  f"{TOGETHER_ROUNDS} rounds. Its inverse is the throughput per",
                  "CPU second. `logged`: `response.filter_state: true`; `quiet`: `response.on_allowed: false`.",
                  "", "| case | ÷ no match, per round | median | throughput × no match | Envoy CPU µs / request "
                  "(no match) |", "|---|---|---|---|---|"]
        for case in TOGETHER:
            r = together[case]
            lines.append(f"| {case} | {' '.join(f'{x:.2f}' for x in r['ratios'])} | {r['ratio']:.3f} | "
                         f"{1 / r['ratio']:.3f} | {r['us']:.1f} ({r['unmatched_us']:.1f}) |")
    alone = synced.get("alone")
    if alone:
        lines += ["", f"The same with each Envoy alone on CPU 0 in turns (`--alternate {ALONE_TURNS}`): per round a new",
                  f"Envoy per case, loaded 4 s, then each driven alone by `wrk -c64` for {ALONE_TURNS} turns of 3 s, the",
                  "order reversed every other turn. Sharing the core costs the store path more than the others: it",
                  "waits for the store about once per message, and the other Envoy then takes the core and its",
                  "caches (docs/performance.md, \"Measured alone\"). With BASELINE, the store path of that ref's",
                  "module runs in the same rounds (its ratio to this tree's no match).",
                  "", "| case | ÷ no match, per round | median | throughput × no match | Envoy CPU µs / request "
                  "(no match) |", "|---|---|---|---|---|"]
        for case, r in alone.items():
            case = case.replace(" against", f" ({synced.get('baseline')}'s module)")
            lines.append(f"| {case} | {' '.join(f'{x:.2f}' for x in r['ratios'])} | {r['ratio']:.3f} | "
                         f"{1 / r['ratio']:.3f} | {r['us']:.1f} ({r['unmatched_us']:.1f}) |")
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


def targets(synced):
    """The issues' targets from the run measured at once: #26, the synced
    allowed path's throughput against no rule matching at 64 connections
    (per CPU second); #27, an admitted request's Envoy CPU against no rule
    matching."""
    t = synced["together"]
    synced_tp = 1 / t["synced"]["ratio"]
    shown = ", ".join(f"{case}: {1 / t[case]['ratio']:.3f}" for case in TOGETHER[:3])
    out = [("synced allowed path ≥ 0.85 × no rule matching at 64 connections (measured at once; default config)",
            f"{shown} × no match", synced_tp >= 0.85),
           ("Envoy CPU per admitted request ≤ 1.4 × no rule matching (measured at once)",
            f"{t['admitted']['ratio']:.3f} × no match", t["admitted"]["ratio"] <= 1.4)]
    alone = synced.get("alone")
    if alone:
        out += [("synced allowed path ≥ 0.85 × no rule matching at 64 connections (each Envoy alone, in turns)",
                 f"{1 / alone['synced']['ratio']:.3f} × no match", 1 / alone["synced"]["ratio"] >= 0.85),
                ("Envoy CPU per admitted request ≤ 1.4 × no rule matching (each Envoy alone, in turns)",
                 f"{alone['admitted']['ratio']:.3f} × no match"
                 + (f" ({synced.get('baseline')}: {alone['admitted against']['ratio']:.3f})"
                    if "admitted against" in alone else ""), alone["admitted"]["ratio"] <= 1.4)]
    return out
