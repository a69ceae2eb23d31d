"""What the cases of `make bench` share: the paths, free ports, RESP to Valkey, process CPU time,
Envoy's configuration for a case and its stats, and wrk."""

import contextlib
import json
import os
import re
import socket
import subprocess
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TOOLS = ROOT / ".tools"
ENVOY = os.environ.get("TOLLGATE_ENVOY", str(TOOLS / "bin/envoy"))
VALKEY = os.environ.get("TOLLGATE_VALKEY", str(TOOLS / "bin/valkey-server"))
WASM = ROOT / "target/wasm32-wasip1/release/tollgate.wasm"
DURATION = os.environ.get("BENCH_DURATION", "8s")
# 1 connection for the latency of one request alone (nothing else in flight:
# each decision is its own message), 16 and 64 for throughput and batching.
CONNECTIONS = [1, 16, 64]

DIRECT = 'direct_response: { status: 200, body: { inline_string: "ok" } }'


@contextlib.contextmanager
def worktree(ref, path):
    """A detached worktree of git `ref` at `path`, removed on leaving."""
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(path), ref], check=True,
                   capture_output=True)
    try:
        yield path
    finally:
        subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(path)], capture_output=True)


_GIVEN = set()


def free_port():
    """A port free a moment ago and never handed out before by this process:
    two ports of one Envoy must differ or it refuses its configuration."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port not in _GIVEN:
            _GIVEN.add(port)
            return port


def wait_port(port, timeout=30):
    end = time.time() + timeout
    while time.time() < end:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.02)
    raise RuntimeError(f"port {port} never opened")


@contextlib.contextmanager
def valkey_server(workdir):
    """A Valkey of a run's own on a free port, without persistence, ready:
    yields (port, process); stopped on leaving."""
    port = free_port()
    proc = subprocess.Popen([VALKEY, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                             "--dir", str(workdir)], stdout=subprocess.DEVNULL)
    try:
        wait_port(port)
        yield port, proc
    finally:
        proc.terminate()
        proc.wait()


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


# The demo listener's requests an Envoy completed (its admin stat).
COMPLETED = "http.demo.downstream_rq_completed"


def cpu_times(pid):
    """User and system CPU time of process `pid` so far, in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick


def cpu_seconds(pid):
    """User + system CPU time of process `pid` so far, in seconds."""
    return sum(cpu_times(pid))


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
    # No access log: every case measures the filter, not the logger.
    log = next(i for i, l in enumerate(lines) if l.strip() == "access_log:")
    lines = lines[:log] + lines[next(i for i in range(log, len(lines)) if lines[i].strip() == "route_config:"):]
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


def counting(text):
    """A rendered config whose limiter VM reports its host calls (tollgate.cost.*)."""
    lines = text.split("\n")
    start = next(i for i, l in enumerate(lines) if l.strip() == "- name: tollgate")
    at = next(i for i in range(start, len(lines)) if lines[i].strip() == "vm_config:")
    pad = " " * (len(lines[at]) - len(lines[at].lstrip()) + 2)
    lines.insert(at + 1, f'{pad}environment_variables: {{ key_values: {{ TOLLGATE_COUNT_HOST_CALLS: "1" }} }}')
    return "\n".join(lines)


WRK_USERS = """
local n = 0
request = function()
  n = n + 1
  return wrk.format("GET", "/", { ["x-user-id"] = "user-" .. (n %% %d) })
end
"""


def wrk(port, connections, users, workdir, duration=None, cpu=None):
    """wrk -t1 against `port` (on CPU `cpu` alone, if given)."""
    cmd = ["wrk", "-t1", f"-c{connections}", f"-d{duration or DURATION}", "--latency", f"http://127.0.0.1:{port}/"]
    if users:
        script = workdir / f"users{users}.lua"
        script.write_text(WRK_USERS % users)
        cmd[1:1] = ["-s", str(script)]
    else:
        cmd[1:1] = ["-H", "x-user-id: bench"]
    if cpu is not None:
        cmd[:0] = ["taskset", "-c", str(cpu)]
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
