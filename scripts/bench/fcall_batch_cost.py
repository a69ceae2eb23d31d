"""Whether several decisions per FCALL pay on top of group commit
(docs/performance.md, "Several decisions per FCALL"): Valkey CPU per
decision for N decisions as N pipelined FCALLs in one write (what group
commit sends) against one FCALL carrying the N decisions (a prototype
entry looping over the same `decide`, each decision still all-or-nothing),
straight to a valkey-server of its own. Both entries are registered in one
function library built from this tree's src/limiter/*.lua, so the
definitions are made once, as in the shipped library.

    python3 scripts/bench fcall_batch_cost [--batch 32] [--decisions 200000] [--rounds 3]
"""

import argparse
import socket
import subprocess
import tempfile
import time

from .common import ROOT, VALKEY, cpu_seconds, free_port, wait_port

FILES = ["prelude", "sliding_log", "gcra", "sliding_window", "fixed_window", "decide"]
MULTI = """
redis.register_function('tg_one', function(keys, args) return decide(keys, args, false) end)
redis.register_function('tg_multi', function(keys, args)
  -- args: n, then per decision its key count, its arg count, its args.
  local out, k, a = {}, 1, 2
  for d = 1, tonumber(args[1]) do
    local nk, na = tonumber(args[a]), tonumber(args[a + 1])
    a = a + 2
    local dk, da = {}, {}
    for i = 1, nk do dk[i] = keys[k + i - 1] end
    for i = 1, na do da[i] = args[a + i - 1] end
    k, a = k + nk, a + na
    out[d] = decide(dk, da, false)
  end
  return out
end)
"""


def command(*args):
    args = [a if isinstance(a, bytes) else str(a).encode() for a in args]
    return b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in args)


def library():
    body = "".join((ROOT / f"src/limiter/{name}.lua").read_text() for name in FILES)
    return "#!lua name=tgbatch\n" + body + MULTI


class Conn:
    def __init__(self, port):
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.buf = b""

    def send(self, data):
        self.sock.sendall(data)

    def replies(self, n):
        """Reads `n` top-level replies (only counts them: the figures are Valkey's)."""
        done = 0
        while done < n:
            chunk = self.sock.recv(1 << 20)
            if not chunk:
                raise RuntimeError("valkey closed the connection")
            self.buf += chunk
            done += self.complete()
        return done

    def complete(self):
        """Counts and drops the complete top-level replies at the front of the buffer."""
        count, pos = 0, 0
        while True:
            end = skip(self.buf, pos)
            if end is None:
                self.buf = self.buf[pos:]
                return count
            if self.buf[pos:pos + 1] == b"-":
                raise RuntimeError(self.buf[pos:end].decode(errors="replace"))
            count, pos = count + 1, end


def skip(buf, pos):
    """The end of the RESP value at `pos`, or None if incomplete."""
    line = buf.find(b"\r\n", pos)
    if line < 0:
        return None
    kind, head = buf[pos:pos + 1], buf[pos + 1:line]
    if kind == b"$":
        n = int(head)
        return None if n >= 0 and len(buf) < line + 2 + n + 2 else (line + 2 if n < 0 else line + 2 + n + 2)
    if kind == b"*":
        at = line + 2
        for _ in range(max(int(head), 0)):
            at = skip(buf, at)
            if at is None:
                return None
        return at
    return line + 2


def decision(user):
    """One decision's keys and args: fixed_window, one window far from its limit."""
    return [f"tollgate:{{bench:u{user}}}:fw"], ["", "fw", "1", "1", "1000000000", "3600000"]


def run(conn, valkey_pid, batch, decisions, multi):
    groups = decisions // batch
    messages = []
    for g in range(4):
        ds = [decision(g * batch + i) for i in range(batch)]
        if multi:
            keys = [k for d in ds for k in d[0]]
            args = [batch] + [x for d in ds for x in [len(d[0]), len(d[1])] + d[1]]
            messages.append(command("FCALL", "tg_multi", len(keys), *keys, *args))
        else:
            messages.append(b"".join(command("FCALL", "tg_one", 1, *d[0], *d[1]) for d in ds))
    per_message = 1 if multi else batch
    cpu = cpu_seconds(valkey_pid)
    start = time.time()
    for g in range(groups):
        conn.send(messages[g % 4])
        conn.replies(per_message)
    wall = time.time() - start
    return (cpu_seconds(valkey_pid) - cpu) * 1e6 / (groups * batch), wall


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--decisions", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    workdir = tempfile.mkdtemp(prefix="tollgate-fcall-batch-")
    port = free_port()
    valkey = subprocess.Popen([VALKEY, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly",
                               "no", "--dir", workdir], stdout=subprocess.DEVNULL)
    try:
        wait_port(port)
        conn = Conn(port)
        conn.send(command("FUNCTION", "LOAD", "REPLACE", library()))
        conn.replies(1)
        results = {"pipelined": [], "one FCALL": []}
        for _ in range(args.rounds):
            for name, multi in (("pipelined", False), ("one FCALL", True)):
                results[name].append(run(conn, valkey.pid, args.batch, args.decisions, multi)[0])
        print(f"{args.batch} decisions per message, {args.decisions} decisions per round, {args.rounds} rounds "
              "alternating; Valkey CPU µs per decision (min / median of rounds):")
        for name, values in results.items():
            values.sort()
            print(f"  {name:10s} {values[0]:.2f} / {values[len(values) // 2]:.2f}  ({', '.join(f'{v:.2f}' for v in values)})")
        one, multi = sorted(results["pipelined"]), sorted(results["one FCALL"])
        print(f"  one FCALL ÷ pipelined (medians): {multi[len(multi) // 2] / one[len(one) // 2]:.2f}")
    finally:
        valkey.terminate()
        valkey.wait()


if __name__ == "__main__":
    main()
