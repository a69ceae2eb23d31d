#!/usr/bin/env python3
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
  flood                  2,048 connections, a new user per request, failure_mode
                         local: who decided (the store, the local limiter, an
                         explicit overload refusal, failure_mode)
  cluster                Valkey Cluster (envoy/envoy-cluster.yaml): 10,000 users
                         spread over the slots of 1 master, then of 3 masters;
                         requests of two rules in different slots (two calls,
                         admitted), and the same denied by one rule (two calls
                         and an undo); Valkey CPU per call on each master
                         (scripts/bench_cluster.py)

With perf available, the allowed path at 64 connections is also profiled
(software clock, by DSO: Envoy's C++, the V8-compiled module, the kernel).

For each tollgate case, a second Envoy whose limiter VM reports its cost
(`TOLLGATE_COUNT_HOST_CALLS=1`, docs/performance.md) gives the host calls,
callbacks and buffers per request (16 connections, 2 s); it is never timed.

Every Envoy config is envoy/envoy.yaml with only its ports changed and the
demo listener's route answering directly (so the upstream costs nothing).
"""

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TOOLS = ROOT / ".tools"
ENVOY = os.environ.get("TOLLGATE_ENVOY", str(TOOLS / "bin/envoy"))
VALKEY = os.environ.get("TOLLGATE_VALKEY", str(TOOLS / "bin/valkey-server"))
WASM = ROOT / "target/wasm32-wasip1/release/tollgate.wasm"
DURATION = os.environ.get("BENCH_DURATION", "8s")
CONNECTIONS = [16, 64]

DIRECT = 'direct_response: { status: 200, body: { inline_string: "ok" } }'


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port, timeout=30):
    end = time.time() + timeout
    while time.time() < end:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.02)
    raise RuntimeError(f"port {port} never opened")


def resp(port, *args):
    """One Valkey command, one reply (bulk or integer), as text."""
    out = b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in (x.encode() for x in args))
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.sendall(out)
        data = b""
        while True:
            data += s.recv(65536)
            if data.startswith(b"$"):
                n = int(data[1:data.index(b"\r\n")])
                head = data.index(b"\r\n") + 2
                if len(data) >= head + n + 2:
                    return data[head:head + n].decode()
            elif data.endswith(b"\r\n"):
                return data[1:-2].decode()


def valkey_stats(port):
    """Connections accepted, commands processed, and the µs Valkey booked to
    the limiter's calls (FCALL, EVALSHA, EVAL: each includes the commands
    its code ran)."""
    info = resp(port, "INFO", "stats")
    get = lambda k: int(re.search(rf"^{k}:(\d+)", info, re.M).group(1))
    calls = resp(port, "INFO", "commandstats")
    usec = sum(int(u) for u in re.findall(r"^cmdstat_(?:fcall|evalsha|eval):calls=\d+,usec=(\d+)", calls, re.M))
    return get("total_connections_received"), get("total_commands_processed"), usec


def cpu_seconds(pid):
    """User + system CPU time of process `pid` so far, in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def plugin(rule, base=None):
    doc = dict(base or {"valkey": {"cluster": "tollgate_valkey", "timeout": "1s"}})
    doc["rules"] = [rule]
    return json.dumps(doc, indent=2)


def render(case, ports, valkey_port):
    text = (ROOT / "envoy/envoy.yaml").read_text()
    for old, new in [("10000", ports[0]), ("10001", ports[1]), ("9901", ports[2]), ("6379", valkey_port)]:
        text = text.replace(f"port_value: {old}", f"port_value: {new}")
    text = text.replace("filename: target/wasm32-wasip1/release/tollgate.wasm", f"filename: {WASM}")
    text = text.replace("route: { cluster: demo_upstream }", DIRECT)
    lines = text.split("\n")
    start = next(i for i, l in enumerate(lines) if l.strip() == "- name: tollgate")
    indent = len(lines[start]) - len(lines[start].lstrip())
    end = next(i for i in range(start + 1, len(lines)) if lines[i].strip().startswith("- name:")
               and len(lines[i]) - len(lines[i].lstrip()) == indent)
    pad = " " * indent
    if case["kind"] == "none":
        replacement = []
    elif case["kind"] == "local":
        tokens = 1 if case["deny"] else 100000000
        replacement = [
            f"{pad}- name: envoy.filters.http.local_ratelimit",
            f"{pad}  typed_config:",
            f'{pad}    "@type": type.googleapis.com/envoy.extensions.filters.http.local_ratelimit.v3.LocalRateLimit',
            f"{pad}    stat_prefix: bench",
            f"{pad}    token_bucket: {{ max_tokens: {tokens}, tokens_per_fill: {tokens}, fill_interval: 3600s }}",
            f"{pad}    filter_enabled: {{ default_value: {{ numerator: 100, denominator: HUNDRED }} }}",
            f"{pad}    filter_enforced: {{ default_value: {{ numerator: 100, denominator: HUNDRED }} }}",
        ]
    else:
        block = lines[start:end]
        value = next(i for i, l in enumerate(block) if l.rstrip().endswith("value: |"))
        json_indent = " " * (len(block[value]) - len(block[value].lstrip()) + 2)
        tail = [l for l in block[value + 1:] if l.strip() and not l.startswith(json_indent)]
        replacement = block[:value + 1] + [json_indent + l for l in plugin(case["rule"], case.get("plugin")).split("\n")] + tail
    return "\n".join(lines[:start] + replacement + lines[end:])


WRK_USERS = """
local n = 0
request = function()
  n = n + 1
  return wrk.format("GET", "/", { ["x-user-id"] = "user-" .. (n %% %d) })
end
"""


def wrk(port, connections, users, workdir, duration=None):
    cmd = ["wrk", "-t1", f"-c{connections}", f"-d{duration or DURATION}", "--latency", f"http://127.0.0.1:{port}/"]
    if users:
        script = workdir / f"users{users}.lua"
        script.write_text(WRK_USERS % users)
        cmd[1:1] = ["-s", str(script)]
    else:
        cmd[1:1] = ["-H", "x-user-id: bench"]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    unit = {"us": 1e-3, "ms": 1.0, "s": 1e3}
    lat = lambda p: next(float(v) * unit[u] for v, u in re.findall(rf"^\s+{p}%\s+([\d.]+)(us|ms|s)\s*$", out, re.M))
    total = int(re.search(r"(\d+) requests in", out).group(1))
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    return {
        "rps": float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1)),
        "p50": lat("50"),
        "p99": lat("99"),
        "requests": total,
        "non2xx": int(non2xx.group(1)) if non2xx else 0,
    }


def admin_stat(port, name):
    """A counter from Envoy's /stats (0 if absent)."""
    try:
        with socket.create_connection(("127.0.0.1", port)) as s:
            s.sendall(f"GET /stats?filter=^{name}$ HTTP/1.1\r\nhost: admin\r\nconnection: close\r\n\r\n".encode())
            data = b""
            while chunk := s.recv(65536):
                data += chunk
        m = re.search(rf"{re.escape(name)}: (\d+)", data.decode(errors="replace"))
        return int(m.group(1)) if m else 0
    except OSError:
        return 0


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


def counting(text):
    """A rendered config whose limiter VM reports its host calls (tollgate.cost.*)."""
    lines = text.split("\n")
    start = next(i for i, l in enumerate(lines) if l.strip() == "- name: tollgate")
    at = next(i for i in range(start, len(lines)) if lines[i].strip() == "vm_config:")
    pad = " " * (len(lines[at]) - len(lines[at].lstrip()) + 2)
    lines.insert(at + 1, f'{pad}environment_variables: {{ key_values: {{ TOLLGATE_COUNT_HOST_CALLS: "1" }} }}')
    return "\n".join(lines)


def cost(case, valkey_port, workdir):
    """Host calls, callbacks and buffers per request of a tollgate case: a second Envoy that counts them
    (never the one timed), 16 connections for 2 s after the warm-up."""
    ports = [free_port(), free_port(), free_port()]
    config = workdir / f"{case['name'].replace(' ', '_')}-cost.yaml"
    config.write_text(counting(render(case, ports, valkey_port)))
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


def run_case(case, valkey_port, valkey_pid, workdir):
    ports = [free_port(), free_port(), free_port()]
    config = workdir / f"{case['name'].replace(' ', '_')}.yaml"
    config.write_text(render(case, ports, valkey_port))
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
            calls = admin_stat(ports[2], "wasmcustom.tollgate.store.calls")
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
            calls = admin_stat(ports[2], "wasmcustom.tollgate.store.calls") - calls
            requests = admin_stat(ports[2], "wasmcustom.tollgate.store.requests") - requests
            result["per_call"] = requests / calls if calls else 0.0
            decisions = result["requests"]
            result["conn_per_decision"] = (after[0] - before[0] - 1) / decisions
            result["cmd_per_decision"] = (after[1] - before[1] - 1) / decisions
            # Per request through Envoy; per decision sent to Valkey.
            result["envoy_us"] = (cpu_after[0] - cpu_before[0]) * 1e6 / decisions
            result["valkey_us"] = (after[2] - before[2]) / requests if requests else 0.0
            result["valkey_cpu_us"] = (cpu_after[1] - cpu_before[1]) * 1e6 / requests if requests else 0.0
            result["connections"] = c
            rows.append(result)
            print(f"  {case['name']:28s} c={c:<3d} {result['rps']:9.0f} rps  p50 {result['p50']:.2f} ms  "
                  f"p99 {result['p99']:.2f} ms  non-2xx {result['non2xx']}", flush=True)
        return rows
    finally:
        envoy.terminate()
        envoy.wait()
        log.close()


def main():
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
    cases[3]["profile"] = True

    workdir = Path(tempfile.mkdtemp(prefix="tollgate-bench-"))
    valkey_port = free_port()
    valkey = subprocess.Popen([VALKEY, "--port", str(valkey_port), "--bind", "127.0.0.1", "--save", "",
                               "--appendonly", "no", "--dir", str(workdir)], stdout=subprocess.DEVNULL)
    try:
        wait_port(valkey_port)
        print(f"benchmark: {DURATION} per run, wrk -t1, Envoy --concurrency 1, module {WASM.stat().st_size} bytes")
        results, costs = {}, {}
        for case in cases:
            resp(valkey_port, "FLUSHALL")
            results[case["name"]] = run_case(case, valkey_port, valkey.pid, workdir)
            if case["kind"] == "tollgate":
                resp(valkey_port, "FLUSHALL")
                costs[case["name"]] = cost(case, valkey_port, workdir)
        profiles = {c["name"]: c["profile_result"] for c in cases if c.get("profile_result")}
        resp(valkey_port, "FLUSHALL")
        flooded = bench_flood.flood(valkey_port, workdir)
    finally:
        valkey.terminate()
        valkey.wait()
    clustered = bench_cluster.cluster_bench(workdir)
    bench_report.write_report(results, profiles, flooded, costs, clustered)


if __name__ == "__main__":
    # Imported here: they take the helpers above from this file (as `bench`).
    import bench_cluster
    import bench_flood
    import bench_report

    if sys.argv[1:] == ["--cluster-only"]:
        # Prints the cluster rows without writing docs/benchmarks.md.
        rows = bench_cluster.cluster_bench(Path(tempfile.mkdtemp(prefix="tollgate-bench-")))
        print("\n".join(bench_cluster.cluster_report(rows)))
    else:
        main()
