"""`make bench-script`: what one decision costs inside Valkey.

Runs `examples/script_cost`: every algorithm, 1 and 2 windows,
allowed on a new key, allowed on a key in use and denied, through the function
library (FCALL) and the script (EVALSHA), straight to a valkey-server of its
own (no Envoy). Prints the table and writes it into docs/algorithms.md.

    python3 scripts/bench script_cost [--baseline GIT_REF] [--server PATH] [--no-docs]

--baseline also measures the script of an older version in the same run: the
concatenation of its src/limiter/{prelude,sliding_log,gcra,sliding_window,
fixed_window,decide}.lua (the layout since the four algorithms; a version
whose decide.lua only defines `decide` gets `return decide(KEYS, ARGV, true)`).

From another module of the package:

    from . import script_cost
    rows = script_cost.rows()   # list of dicts, one per algorithm x case x path:
    # server, path ("FCALL" | "EVALSHA"), algorithm, windows, decision,
    # decisions, usec_per_decision (commandstats), cpu_usec_per_decision,
    # decisions_per_core_second, commands_per_decision
"""

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from .common import ROOT

FILES = ["prelude", "sliding_log", "gcra", "sliding_window", "fixed_window", "decide"]


def build():
    """The example, in the dev profile: the release profile aborts on a panic,
    which would leave its valkey-servers running (they are stopped on unwind);
    the figures are Valkey's, not the client's."""
    subprocess.run(["cargo", "build", "--quiet", "--example", "script_cost"], cwd=ROOT, check=True)
    return ROOT / "target/debug/examples/script_cost"


def baseline_script(ref, workdir):
    """The EVAL script of version `ref`, written to a file in `workdir`."""
    parts = []
    for name in FILES:
        out = subprocess.run(["git", "show", f"{ref}:src/limiter/{name}.lua"], cwd=ROOT, capture_output=True,
                             text=True)
        if out.returncode != 0:
            sys.exit(f"--baseline {ref}: no src/limiter/{name}.lua there ({out.stderr.strip()})")
        parts.append(out.stdout)
    body = "".join(parts)
    if "local function decide(" in parts[-1] and "return decide(KEYS, ARGV" not in body:
        body += "return decide(KEYS, ARGV, true)\n"
    path = Path(workdir) / f"baseline-{ref.replace('/', '_')}.lua"
    path.write_text(body)
    return path


def rows(decisions=10000, server=None):
    """The measured rows, as dicts (see the module docstring)."""
    cmd = [str(build()), "--json", "--decisions", str(decisions)]
    if server:
        cmd += ["--server", server]
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=True).stdout
    return json.loads(out)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline", help="also measure the script of this git ref (e.g. the previous release)")
    parser.add_argument("--server", help="a valkey-server or redis-server binary (default: .tools/bin/valkey-server)")
    parser.add_argument("--decisions", type=int, default=10000, help="decisions per cell")
    parser.add_argument("--no-docs", action="store_true", help="print only; leave docs/algorithms.md alone")
    args = parser.parse_args()
    cmd = [str(build()), "--decisions", str(args.decisions)]
    if args.server:
        cmd += ["--server", args.server]
    if not args.no_docs:
        cmd.append("--write-docs")
    with tempfile.TemporaryDirectory(prefix="tollgate-script-cost-") as workdir:
        if args.baseline:
            cmd += ["--script", f"{args.baseline} (EVALSHA)={baseline_script(args.baseline, workdir)}"]
        subprocess.run(cmd, cwd=ROOT, check=True)


if __name__ == "__main__":
    main()
