"""The flood case of `make bench`: 2,048 connections on one worker, a new user
per request, `failure_mode: local`, a healthy Valkey; who decided each
request (the store, the local limiter, an overload refusal, failure_mode)."""

import re
import resource
import subprocess

from .common import DURATION, ENVOY, admin_stat, free_port, render, wait_port

WRK_FLOOD = """
local threads = 0
function setup(thread)
  threads = threads + 1
  thread:set("tid", threads)
end
local n = 0
request = function()
  n = n + 1
  return wrk.format("GET", "/", { ["x-user-id"] = "flood-" .. tid .. "-" .. n })
end
"""

FLOOD_CONNECTIONS = 2048
FLOOD_STATS = ["rule.bench.allowed", "rule.bench.denied", "local.allowed", "local.denied", "overloaded",
               "failure_mode.allowed", "failure_mode.denied", "cache.hits"]


def flood(valkey_port, workdir):
    """2,048 connections, a new user on every request: who decided them."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = 65536 if hard == resource.RLIM_INFINITY else min(65536, hard)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, want), hard))
    case = {"name": "flood", "kind": "tollgate", "rule": {
        "name": "bench", "key": [{"header": "x-user-id"}], "limits": [{"limit": 20, "period": "60s"},
                                                                       {"limit": 5, "period": "3s"}]},
            "plugin": {"valkey": {"cluster": "tollgate_valkey", "timeout": "100ms"}, "failure_mode": "local"}}
    ports = [free_port(), free_port(), free_port()]
    config = workdir / "flood.yaml"
    config.write_text(render(case, ports, valkey_port))
    script = workdir / "flood.lua"
    script.write_text(WRK_FLOOD)
    log = open(workdir / "flood.log", "w")
    envoy = subprocess.Popen([ENVOY, "-c", str(config), "--concurrency", "1", "--use-dynamic-base-id",
                              "-l", "error"], stdout=log, stderr=log)
    try:
        wait_port(ports[0])
        out = subprocess.run(["wrk", "-t2", f"-c{FLOOD_CONNECTIONS}", f"-d{DURATION}", "-s", str(script),
                              f"http://127.0.0.1:{ports[0]}/"], capture_output=True, text=True, check=True).stdout
        stats = {n: admin_stat(ports[2], f"wasmcustom.tollgate.{n}") for n in FLOOD_STATS}
        errors = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out)
        row = {
            "requests": int(re.search(r"(\d+) requests in", out).group(1)),
            "rps": float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1)),
            "timeouts": int(errors.group(4)) if errors else 0,
            "store": stats["rule.bench.allowed"] + stats["rule.bench.denied"]
            - stats["local.allowed"] - stats["local.denied"],
            "local": stats["local.allowed"] + stats["local.denied"],
            "overloaded": stats["overloaded"],
            "failure_mode": stats["failure_mode.allowed"] + stats["failure_mode.denied"],
        }
        print(f"  flood c={FLOOD_CONNECTIONS} {row['rps']:9.0f} rps  store {row['store']}  local {row['local']}  "
              f"overloaded {row['overloaded']}  failure_mode {row['failure_mode']}  wrk timeouts {row['timeouts']}",
              flush=True)
        return row
    finally:
        envoy.terminate()
        envoy.wait()
        log.close()
