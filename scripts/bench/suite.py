"""`make bench`: Envoy (one worker) + Valkey + wrk, every case at 16 and 64
connections, in one run; writes docs/benchmarks.md with ratios to "no filter"
measured in that same run.

Cases:
  no filter              the demo listener without tollgate
  local_ratelimit allow  Envoy's in-process local_ratelimit, never denying
  local_ratelimit deny   Envoy's local_ratelimit, denying every request
  tollgate <algorithm>   one key far under its limit (allowed path)
  tollgate denied        one key far over its limit (denied from the cache)
  tollgate denied by the store  the same with the denial cache off
  tollgate 10k keys      10,000 users, each under its limit
  tollgate no match      the module loaded, no rule matching (the VM's own cost)
  tollgate synced allowed  one key of a synced rule (`sync`), never denying;
                         with an admission run of 2 workers past a limit,
                         and a run measured at once with no match, with and
                         without headers and filter state, and the store
                         path's too, then the synced and store paths with
                         each Envoy alone on the core in turns
                         (scripts/bench/sync.py, together.py)
  flood                  2,048 connections, a new user per request, failure_mode
                         local: who decided (the store, the local limiter, an
                         explicit overload refusal, failure_mode)
  cluster                Valkey Cluster (envoy/envoy-cluster.yaml): 10,000 users
                         spread over the slots of 1 master, then of 3 masters;
                         requests of two rules in different slots (two calls,
                         admitted), and the same denied by one rule (two calls
                         and an undo); Valkey CPU per call on each master
                         (scripts/bench/cluster.py)
  concurrency            the admitted rule with a concurrency limit against it
                         with windows only, both Envoys in the same rounds,
                         each alone in turns; store calls per message, leases
                         taken and released (scripts/bench/concurrency.py)
  overrides              Valkey CPU per decision of the admitted rule with
                         "overrides": true (none stored; one in force)
                         against it without, each Envoy alone in turns
                         (scripts/bench/overrides.py)

With perf available, the allowed path at 64 connections is also profiled
(software clock, by DSO: Envoy's C++, the V8-compiled module, the kernel).

For each tollgate case, a second Envoy whose limiter VM reports its cost
(`TOLLGATE_COUNT_HOST_CALLS=1`, docs/performance.md) gives the host calls,
callbacks and buffers per request (16 connections, 2 s); it is never timed.

Every Envoy config is envoy/envoy.yaml with only its ports changed and the
demo listener's route answering directly (so the upstream costs nothing).

    python3 scripts/bench suite [--baseline REF | --cluster-only]   (make bench)
"""

import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from . import cluster, concurrency, flood, overrides, report, sync, together, variants
from .common import (CONNECTIONS, DURATION, ENVOY, ROOT, WASM, admin_stat, counting, cpu_seconds,
                     free_port, render, resp, valkey_server, valkey_stats, wait_port, wrk)


def profile(pid, seconds=3):
    """Share of Envoy's CPU samples per DSO, or None without perf."""
    if not shutil.which("perf"):
        return None
    data = Path(tempfile.mkdtemp()) / "perf.data"
    rec = subprocess.run(["perf", "record", "-e", "cpu-clock", "-F", "999", "-o", str(data), "-p", str(pid), "--",
                          "sleep", str(seconds)], capture_output=True)
    if rec.returncode != 0:
        return None
    rep = subprocess.run(["perf", "report", "-i", str(data), "--no-children", "--sort", "dso", "--stdio", "-g", "none"],
                         capture_output=True, text=True).stdout
    rows = re.findall(r"^\s+([\d.]+)%\s+(.+?)\s*$", rep, re.M)
    return [(float(p), re.sub(r"tid \d+", "", d).strip()) for p, d in rows][:6]


COST = ["requests", "host_calls", "callbacks", "buffers"]


def cost(case, valkey_port, workdir, wasm=WASM):
    """Host calls, callbacks and buffers per request of a tollgate case: a second Envoy that counts them
    (never the one timed), 16 connections for 2 s after the warm-up; with module `wasm`."""
    ports = [free_port(), free_port(), free_port()]
    config = workdir / f"{case['name'].replace(' ', '_')}-cost{'' if wasm == WASM else '-baseline'}.yaml"
    config.write_text(counting(render(case, ports, valkey_port)).replace(str(WASM), str(wasm)))
    log = open(workdir / (config.stem + ".log"), "w")
    envoy = subprocess.Popen([ENVOY, "-c", str(config), "--concurrency", "1", "--use-dynamic-base-id",
                              "-l", "error"], stdout=log, stderr=log)
    try:
        wait_port(ports[0])
        subprocess.run(["wrk", "-t1", "-c4", "-d1s", "-H", "x-user-id: bench", f"http://127.0.0.1:{ports[0]}/"],
                       capture_output=True, check=True)
        def read():
            """The counters once every request context so far is deleted (or after 2 s)."""
            end = time.time() + 2
            while True:
                values = [admin_stat(ports[2], f"wasmcustom.tollgate.cost.{n}") for n in COST + ["requests_done"]]
                if values[-1] == values[0] or time.time() > end:
                    return values[:-1]
                time.sleep(0.02)
        before = read()
        wrk(ports[0], 16, case.get("users"), workdir, duration="2s")
        delta = [a - b for a, b in zip(read(), before)]
        return {n: d / max(delta[0], 1) for n, d in zip(COST[1:], delta[1:])}
    finally:
        envoy.terminate()
        envoy.wait()
        log.close()


def run_case(case, valkey_port, valkey_pid, workdir, wasm=WASM):
    """The case's rows at each connection count, with module `wasm`."""
    ports = [free_port(), free_port(), free_port()]
    config = workdir / f"{case['name'].replace(' ', '_')}{'' if wasm == WASM else '-baseline'}.yaml"
    config.write_text(render(case, ports, valkey_port).replace(str(WASM), str(wasm)))
    log = open(workdir / (config.stem + ".log"), "w")
    envoy = subprocess.Popen([ENVOY, "-c", str(config), "--concurrency", "1", "--use-dynamic-base-id",
                              "-l", "error"], stdout=log, stderr=log)
    try:
        wait_port(ports[0])
        # Warm up: load the script, create the key.
        subprocess.run(["wrk", "-t1", "-c4", "-d1s", "-H", "x-user-id: bench", f"http://127.0.0.1:{ports[0]}/"],
                       capture_output=True, check=True)
        rows = []
        for c in CONNECTIONS:
            before = valkey_stats(valkey_port)
            cpu_before = (cpu_seconds(envoy.pid), cpu_seconds(valkey_pid))
            calls = admin_stat(ports[2], "wasmcustom.tollgate.store.messages")
            requests = admin_stat(ports[2], "wasmcustom.tollgate.store.requests")
            if case.get("profile") and c == 64:
                prof = {}
                thread = __import__("threading").Thread(target=lambda: prof.update(p=profile(envoy.pid)))
                thread.start()
                result = wrk(ports[0], c, case.get("users"), workdir)
                thread.join()
                case["profile_result"] = prof.get("p")
            else:
                result = wrk(ports[0], c, case.get("users"), workdir)
            after = valkey_stats(valkey_port)
            cpu_after = (cpu_seconds(envoy.pid), cpu_seconds(valkey_pid))
            calls = admin_stat(ports[2], "wasmcustom.tollgate.store.messages") - calls
            requests = admin_stat(ports[2], "wasmcustom.tollgate.store.requests") - requests
            result["per_call"] = requests / calls if calls else 0.0
            result["store_per_request"] = requests / result["requests"]
            decisions = result["requests"]
            result["conn_per_decision"] = (after[0] - before[0] - 1) / decisions
            result["cmd_per_decision"] = (after[1] - before[1] - 1) / decisions
            # Per request through Envoy; per decision sent to Valkey.
            result["envoy_us"] = (cpu_after[0] - cpu_before[0]) * 1e6 / decisions
            # Per decision sent to Valkey; a synced rule's are made on the
            # worker, so its Valkey time (the flushes) is per request.
            per = decisions if case.get("rule", {}).get("sync") else requests
            result["valkey_us"] = (after[2] - before[2]) / per if per and requests else 0.0
            result["valkey_cpu_us"] = (cpu_after[1] - cpu_before[1]) * 1e6 / per if per and requests else 0.0
            result["connections"] = c
            rows.append(result)
            print(f"  {case['name']:28s} c={c:<3d} {result['rps']:9.0f} rps  p50 {result['p50']:.2f} ms  "
                  f"p99 {result['p99']:.2f} ms  non-2xx {result['non2xx']}", flush=True)
        return rows
    finally:
        envoy.terminate()
        envoy.wait()
        log.close()


def has(ref, commit):
    """Whether git `ref` contains `commit` (None: any ref does)."""
    return commit is None or subprocess.run(["git", "merge-base", "--is-ancestor", commit, ref], cwd=ROOT,
                                            capture_output=True).returncode == 0


def main(baseline=None):
    if not shutil.which("wrk"):
        sys.exit("wrk is missing: run `make bench` (it installs Debian's wrk)")
    big = 1_000_000_000
    cases = [
        {"name": "no filter", "kind": "none"},
        {"name": "local_ratelimit allow", "kind": "local", "deny": False},
        {"name": "local_ratelimit deny", "kind": "local", "deny": True},
    ]
    for algorithm in ["sliding_log", "gcra", "sliding_window", "fixed_window"]:
        period = "1h" if algorithm == "sliding_log" else "1m"
        cases.append({"name": f"tollgate allowed {algorithm}", "kind": "tollgate", "rule": {
            "name": "bench", "algorithm": algorithm, "key": [{"header": "x-user-id"}],
            "limits": [{"limit": big if algorithm == "sliding_log" else 1_000_000, "period": period}]}})
    cases.append({"name": "tollgate denied", "kind": "tollgate", "rule": {
        "name": "bench", "key": [{"header": "x-user-id"}], "limits": [{"limit": 1, "period": "1h"}]}})
    cases.append({"name": "tollgate denied by the store", "kind": "tollgate", "rule": {
        "name": "bench", "key": [{"header": "x-user-id"}], "limits": [{"limit": 1, "period": "1h"}]},
        "plugin": {"valkey": {"cluster": "tollgate_valkey", "timeout": "1s"}, "denial_cache": {"max_keys": 0}}})
    cases.append({"name": "tollgate 10k keys", "kind": "tollgate", "users": 10_000, "rule": {
        "name": "bench", "algorithm": "gcra", "key": [{"header": "x-user-id"}],
        "limits": [{"limit": 100_000, "period": "1h"}]}})
    cases.append({"name": "tollgate no match", "kind": "tollgate", "rule": {
        "name": "bench", "match": {"path_prefix": "/never"}, "limits": [{"limit": 1, "period": "1h"}]}})
    cases.append(sync.case(big))
    cases[3]["profile"] = True

    workdir = Path(tempfile.mkdtemp(prefix="tollgate-bench-"))
    # BASELINE=<ref>: every tollgate case again with that ref's module, right after this tree's.
    baseline_wasm = variants.build_baseline(baseline, workdir) if baseline else None
    with valkey_server(workdir) as (valkey_port, valkey):
        print(f"benchmark: {DURATION} per run, wrk -t1, Envoy --concurrency 1, module {WASM.stat().st_size} bytes")
        results, costs, baselines, baseline_costs = {}, {}, {}, {}
        for i, case in enumerate(cases):
            compared = baseline_wasm and case["kind"] == "tollgate" and has(baseline, case.get("since"))
            # Every other case the baseline goes first: scripts/bench/variants.py
            # found the second of two modules measured on a case 10-20 %
            # slower, whichever it was.
            if compared and i % 2 == 1:
                resp(valkey_port, "FLUSHALL")
                baselines[case["name"]] = run_case(dict(case, profile=False), valkey_port, valkey.pid, workdir,
                                                   baseline_wasm)
            resp(valkey_port, "FLUSHALL")
            results[case["name"]] = run_case(case, valkey_port, valkey.pid, workdir)
            if compared and i % 2 == 0:
                resp(valkey_port, "FLUSHALL")
                baselines[case["name"]] = run_case(dict(case, profile=False), valkey_port, valkey.pid, workdir,
                                                   baseline_wasm)
            if case["kind"] == "tollgate":
                resp(valkey_port, "FLUSHALL")
                costs[case["name"]] = cost(case, valkey_port, workdir)
            if compared:
                resp(valkey_port, "FLUSHALL")
                baseline_costs[case["name"]] = cost(case, valkey_port, workdir, baseline_wasm)
        profiles = {c["name"]: c["profile_result"] for c in cases if c.get("profile_result")}
        resp(valkey_port, "FLUSHALL")
        flooded = flood.flood(valkey_port, workdir)
        resp(valkey_port, "FLUSHALL")
        synced = {"admission": sync.admission(valkey_port, workdir)}
    synced["together"] = together.together(sync.TOGETHER, rounds=sync.TOGETHER_ROUNDS)
    # Alone in turns; the store path beside the BASELINE's module too (its
    # ratio to this tree's no match), in the same rounds.
    synced["alone"] = {}
    for case in sync.ALONE:
        synced["alone"].update(together.together(
            [case], rounds=sync.TOGETHER_ROUNDS, alternate=sync.ALONE_TURNS,
            against=baseline_wasm if case == "admitted" else None))
    synced["baseline"] = baseline
    clustered = cluster.cluster_bench(workdir)
    concurrent = concurrency.measure()
    overridden = overrides.measure()
    report.write_report(results, profiles, flooded, costs, clustered, synced,
                        (baseline, baselines, baseline_costs), concurrent, overridden)


if __name__ == "__main__":
    if sys.argv[1:] in (["-h"], ["--help"]):
        print(__doc__)
    elif len(sys.argv) == 3 and sys.argv[1] == "--baseline":
        main(sys.argv[2])
    elif sys.argv[1:] == ["--cluster-only"]:
        # Prints the cluster rows without writing docs/benchmarks.md.
        rows = cluster.cluster_bench(Path(tempfile.mkdtemp(prefix="tollgate-bench-")))
        print("\n".join(cluster.cluster_report(rows)))
    else:
        main()
