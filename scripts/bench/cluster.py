"""The Valkey Cluster section of `make bench` (scripts/bench/suite.py imports it):
the same load through envoy/envoy-cluster.yaml on a cluster of 1 master, then
of 3, in one run, and requests of two rules in different slots (two calls,
admitted; three when one denies and the other's record is undone). Each
master's share of the calls and Valkey's µs per call on it come from
`INFO commandstats`. Run alone: `python3 scripts/bench suite --cluster-only`."""

import re
import subprocess
import json

from .common import (DIRECT, DURATION, ENVOY, ROOT, VALKEY, WASM, WRK_USERS, admin_stat, cpu_seconds, free_port, resp,
                     wait_port, wrk)

CLUSTER_CONNECTIONS = 64
CLUSTER_USERS = 10_000


def start_valkey_cluster(masters, workdir, tag):
    """`masters` valkey-servers in cluster mode, joined by
    scripts/valkey-cluster-join.sh (CLUSTER MEET, the slots split evenly with
    ADDSLOTSRANGE); returns [(port, process)] once every node reports
    cluster_state:ok."""
    nodes = []
    try:
        for i in range(masters):
            port, bus = free_port(), free_port()
            d = workdir / f"{tag}-{i}"
            d.mkdir()
            # The bus port is chosen too (port + 10000, the default, may be
            # past 65535). A lone master receives no MEET to learn its
            # address from: it is announced.
            proc = subprocess.Popen([VALKEY, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly",
                                     "no", "--cluster-enabled", "yes", "--cluster-port", str(bus),
                                     "--cluster-announce-ip", "127.0.0.1", "--dir", str(d)], stdout=subprocess.DEVNULL)
            nodes.append((port, proc))
            wait_port(port)
        subprocess.run(["sh", str(ROOT / "scripts/valkey-cluster-join.sh"), *(f"127.0.0.1:{p}" for p, _ in nodes)],
                       check=True, stdout=subprocess.DEVNULL)
        return nodes
    except BaseException:
        for _, proc in nodes:
            proc.terminate()
            proc.wait()
        raise


def render_cluster(rules, ports, master_ports, cache=True):
    """envoy/envoy-cluster.yaml with its ports moved, the seeds at
    `master_ports`, the module's absolute path, the demo route answering
    directly, and a plugin JSON of `rules`."""
    text = (ROOT / "envoy/envoy-cluster.yaml").read_text()
    for old, new in [("10000", ports[0]), ("10001", ports[1]), ("9901", ports[2])]:
        text = text.replace(f"port_value: {old}", f"port_value: {new}")
    for i, old in enumerate(["7000", "7001", "7002"]):
        text = text.replace(f"port_value: {old} ", f"port_value: {master_ports[i % len(master_ports)]} ")
    text = text.replace("filename: target/wasm32-wasip1/release/tollgate.wasm", f"filename: {WASM}")
    text = text.replace("route: { cluster: demo_upstream }", DIRECT)
    doc = {"valkey": {"cluster": "tollgate_valkey", "timeout": "1s",
                      "cluster_mode": {"seeds": "tollgate_valkey_seeds", "refresh": "5s"}}, "rules": rules}
    if not cache:
        doc["denial_cache"] = {"max_keys": 0}
    lines = text.split("\n")
    start = next(i for i, l in enumerate(lines) if l.strip() == "- name: tollgate")
    value = next(i for i in range(start, len(lines)) if lines[i].rstrip().endswith("value: |"))
    pad = " " * (len(lines[value]) - len(lines[value].lstrip()) + 2)
    end = next(i for i in range(value + 1, len(lines)) if lines[i].strip() and not lines[i].startswith(pad))
    body = [pad + l for l in json.dumps(doc, indent=2).split("\n")]
    return "\n".join(lines[:value + 1] + body + lines[end:])


def fcall_stats(port):
    """(calls, µs) Valkey booked to FCALL on node `port`."""
    m = re.search(r"^cmdstat_fcall:calls=(\d+),usec=(\d+)", resp(port, "INFO", "commandstats"), re.M)
    return (int(m.group(1)), int(m.group(2))) if m else (0, 0)


def cluster_case(name, rules, nodes, workdir, cache=True):
    ports = [free_port(), free_port(), free_port()]
    config = workdir / f"cluster_{name.replace(' ', '_').replace(',', '')}.yaml"
    config.write_text(render_cluster(rules, ports, [p for p, _ in nodes], cache))
    log = open(workdir / (config.stem + ".log"), "w")
    envoy = subprocess.Popen([ENVOY, "-c", str(config), "--concurrency", "1", "--use-dynamic-base-id",
                              "-l", "error"], stdout=log, stderr=log)
    try:
        wait_port(ports[0])
        # Warm up: the slot map, a stream per master, the library on each.
        subprocess.run(["wrk", "-t1", "-c4", "-d1s", "-s", str(workdir / f"users{CLUSTER_USERS}.lua"),
                        f"http://127.0.0.1:{ports[0]}/"], capture_output=True, check=True)
        before = [(fcall_stats(p), cpu_seconds(proc.pid)) for p, proc in nodes]
        result = wrk(ports[0], CLUSTER_CONNECTIONS, CLUSTER_USERS, workdir)
        after = [(fcall_stats(p), cpu_seconds(proc.pid)) for p, proc in nodes]
        seconds = float(DURATION.rstrip("s"))
        per_master = []
        for (c0, t0), (c1, t1) in zip(before, after):
            calls, usec = c1[0] - c0[0], c1[1] - c0[1]
            per_master.append({"calls": calls, "usec": usec / calls if calls else 0.0,
                               "cpu_us": (t1 - t0) * 1e6 / calls if calls else 0.0})
        calls = sum(m["calls"] for m in per_master)
        row = {"name": name, "masters": len(nodes), "rps": result["rps"], "p99": result["p99"],
               "non2xx": result["non2xx"], "calls_per_s": calls / seconds,
               "calls_per_request": calls / max(result["requests"], 1),
               "undos": admin_stat(ports[2], "wasmcustom.tollgate.cluster.undos"), "per_master": per_master}
        print(f"  {name:34s} c={CLUSTER_CONNECTIONS} {row['rps']:9.0f} rps  {row['calls_per_s']:9.0f} calls/s  "
              f"calls/request {row['calls_per_request']:.2f}  non-2xx {row['non2xx']}", flush=True)
        return row
    finally:
        envoy.terminate()
        envoy.wait()
        log.close()


def cluster_bench(workdir):
    """Decisions per second on 1 master, then 3, in this run; requests
    across slots on 3 masters."""
    (workdir / f"users{CLUSTER_USERS}.lua").write_text(WRK_USERS % CLUSTER_USERS)
    spread = {"name": "bench", "algorithm": "gcra", "key": [{"header": "x-user-id"}],
              "limits": [{"limit": 100_000, "period": "1h"}]}
    other = dict(spread, name="bench2")
    denying = dict(spread, name="bench2", limits=[{"limit": 1, "period": "1h"}])
    rows = []
    for masters in (1, 3):
        nodes = start_valkey_cluster(masters, workdir, f"cluster{masters}")
        try:
            rows.append(cluster_case(f"{masters} master{'s' if masters > 1 else ''}", [spread], nodes, workdir))
            if masters == 3:
                rows.append(cluster_case("3 masters, across 2 slots", [spread, other], nodes, workdir))
                rows.append(cluster_case("3 masters, across 2 slots, denied", [spread, denying], nodes, workdir,
                                         cache=False))
        finally:
            for _, proc in nodes:
                proc.terminate()
                proc.wait()
    return rows


def cluster_report(rows):
    one = next(r for r in rows if r["masters"] == 1)
    three = next(r for r in rows if r["name"] == "3 masters")
    lines = ["", "## Valkey Cluster", "",
             f"`envoy/envoy-cluster.yaml`, Envoy with one worker, `wrk -t1 -c{CLUSTER_CONNECTIONS}`, {DURATION} per "
             f"case, {CLUSTER_USERS:,} users spread over the slots (`gcra`, far under its limit), each cluster of "
             "masters without replicas on this machine. \"Across 2 slots\": two rules per request, in different "
             "slots (two calls); \"denied\": the second rule denies (limit 1, denial cache off), so every request "
             "also undoes the first rule's record (three calls). Undos where nothing is denied are requests wrk "
             "dropped at the end of a run (a client gone before its answer is never admitted: its records are "
             "undone). Valkey µs per call is what `INFO commandstats` booked to `FCALL` on each master; CPU µs per "
             "call is the master process's CPU time over its calls.",
             "",
             "| case | masters | req/s | p99 ms | Valkey calls/s | calls / request | undos | per master: calls (share) "
             "| per master: Valkey µs / call | per master: CPU µs / call |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        total = sum(m["calls"] for m in r["per_master"]) or 1
        shares = ", ".join(f"{m['calls']} ({100 * m['calls'] / total:.0f} %)" for m in r["per_master"])
        usec = ", ".join(f"{m['usec']:.1f}" for m in r["per_master"])
        cpu = ", ".join(f"{m['cpu_us']:.1f}" for m in r["per_master"])
        lines.append(f"| {r['name']} | {r['masters']} | {r['rps']:.0f} | {r['p99']:.2f} | {r['calls_per_s']:.0f} | "
                     f"{r['calls_per_request']:.2f} | {r['undos']} | {shares} | {usec} | {cpu} |")
    busiest = lambda r: max(m["calls"] for m in r["per_master"]) / float(DURATION.rstrip("s"))
    lines += ["", f"Decisions per second, 3 masters ÷ 1 master (same run): **{three['calls_per_s'] / one['calls_per_s']:.2f}**. "
              "One Envoy worker on 2 shared cores is the bottleneck here, not Valkey: what 3 masters change is "
              f"each master's share of the calls (the busiest served {busiest(three):,.0f} calls/s with 3 masters, "
              f"{busiest(one):,.0f} with 1), so the decisions a cluster can serve grow with its masters: "
              "Σ over masters of 1,000,000 ÷ Valkey µs per call."]
    return lines
