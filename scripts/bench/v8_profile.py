"""The module's own compute as V8 runs it, by function: the admitted
path's bench (benches/admitted_path.rs) built for wasm32-wasip1 with the
release profile (`--features v8-profile`, the example admitted_path_wasm)
and run under node's V8 with its CPU profiler; self time per function.

Callgrind counts Envoy's instructions but sees V8's compiled code as
anonymous, and the host bench runs native code: neither says which of the
module's functions cost what once V8 has compiled them. Node's V8 is not
Envoy's (another version), the host here is the bench's (no host calls),
and the sampling profiler attributes time spent in V8's own helpers (a
`memory.copy` it calls out for, say) to the wasm function that called
them: read the shares as where to look, not as Envoy's figures.

    python3 scripts/bench v8_profile [--stage synced] [--iters 2000000] [--top 30]
"""

import argparse
import collections
import json
import os
import re
import subprocess
import tempfile
from pathlib import Path

from .common import ROOT

WASM = ROOT / "target/wasm32-wasip1/release/examples/admitted_path_wasm.wasm"

# Runs the bench's `main` under node's WASI. The module imports Envoy's
# proxy-wasm functions (the filter is in the same library): never called
# by the bench, each is given a function returning 0.
RUNNER = r"""
const { WASI } = require('wasi');
const fs = require('fs');
const [stage, iters, file] = process.argv.slice(2);
const wasi = new WASI({ version: 'preview1', args: ['admitted_path'],
                        env: { ADMITTED_PATH_STAGE: stage, ADMITTED_PATH_ITERS: iters } });
const mod = new WebAssembly.Module(fs.readFileSync(file));
const imports = wasi.getImportObject();
imports.env = {};
for (const imp of WebAssembly.Module.imports(mod)) {
  if (imp.module === 'env') imports.env[imp.name] = () => 0;
}
const instance = new WebAssembly.Instance(mod, imports);
const start = process.hrtime.bigint();
wasi.start({ exports: { memory: instance.exports.memory, _start: instance.exports._start } });
console.log(JSON.stringify({ ns: Number(process.hrtime.bigint() - start) / Number(iters) }));
"""

ESCAPES = {"$LT$": "<", "$GT$": ">", "$u20$": " ", "$C$": ",", "$RF$": "&", "$BP$": "*", "$u7b$": "{",
           "$u7d$": "}", "$u27$": "'", "$u5b$": "[", "$u5d$": "]", "$LP$": "(", "$RP$": ")"}


def demangle(name):
    """A legacy Rust symbol (`_ZN…17h<hash>E`) made readable; others as they are."""
    m = re.fullmatch(r"_ZN(.*)17h[0-9a-f]{16}E", name)
    if not m:
        return name
    rest, parts = m.group(1), []
    while rest and rest[0].isdigit():
        n = re.match(r"\d+", rest).group(0)
        rest = rest[len(n):]
        parts.append(rest[:int(n)])
        rest = rest[int(n):]
    text = "::".join(parts)
    for k, v in ESCAPES.items():
        text = text.replace(k, v)
    return text.replace("..", "::").lstrip("_")


def build():
    subprocess.run(["cargo", "build", "--quiet", "--release", "--example", "admitted_path_wasm", "--target",
                    "wasm32-wasip1", "--features", "v8-profile"], cwd=ROOT, check=True)


def profile(stage, iters):
    """(ns per iteration, {function: share of samples})."""
    workdir = Path(tempfile.mkdtemp(prefix="tollgate-v8-"))
    (workdir / "run.js").write_text(RUNNER)
    out = subprocess.run(["node", "--no-warnings", "--cpu-prof", "--cpu-prof-interval", "50", "--cpu-prof-dir",
                          str(workdir), str(workdir / "run.js"), stage, str(iters), str(WASM)],
                         check=True, capture_output=True, text=True, cwd=workdir).stdout
    ns = json.loads(out.strip().splitlines()[-1])["ns"]
    prof = json.loads(next(workdir.glob("*.cpuprofile")).read_text())
    nodes = {n["id"]: n["callFrame"] for n in prof["nodes"]}
    counts = collections.Counter(demangle(nodes[s]["functionName"] or nodes[s]["url"] or "(anonymous)")
                                 for s in prof["samples"])
    total = sum(counts.values()) or 1
    return ns, {name: c / total for name, c in counts.most_common()}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--stage", default="synced", help="a stage of benches/admitted_path.rs")
    parser.add_argument("--iters", type=int, default=2_000_000)
    parser.add_argument("--top", type=int, default=30)
    args = parser.parse_args()
    build()
    ns, shares = profile(args.stage, args.iters)
    print(f"{args.stage}: {ns:,.0f} ns per iteration under node {os.popen('node --version').read().strip()} "
          f"(setup and warm-up included)")
    for name, share in list(shares.items())[:args.top]:
        print(f"{100 * share:5.1f} %  {name[:140]}")


if __name__ == "__main__":
    main()
