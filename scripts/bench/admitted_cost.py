"""Instructions per admitted decision on the host, by stage, counted by
callgrind (repeatable on a loaded machine, unlike time): the bench
benches/admitted_path.rs run with ADMITTED_PATH_STAGE and ADMITTED_PATH_ITERS,
counting only its `measured_loop`. With --baseline REF, the same bench file
is built in a worktree of REF (its Cargo.toml given the bench target and
divan if it lacks them) and counted in the same run, with the ratio.

    python3 scripts/bench admitted_cost [--baseline REF] [--iters N]
"""

import argparse
import json
import os
import re
import subprocess
import tempfile
from pathlib import Path

from .common import ROOT, worktree

STAGES = ["plan", "key", "encode", "decode", "respond", "whole", "synced"]
BENCH_TOML = """
[target.'cfg(not(target_family = "wasm"))'.dev-dependencies.divan]
version = "0.1.21"

[[bench]]
name = "admitted_path"
harness = false

[profile.bench]
lto = false
strip = "none"
"""


def build(tree, target):
    """The bench's executable, built in `tree` into `target`."""
    out = subprocess.run(["cargo", "bench", "--bench", "admitted_path", "--no-run", "--message-format=json"],
                         cwd=tree, check=True, stdout=subprocess.PIPE, text=True,
                         env={**os.environ, "CARGO_TARGET_DIR": str(target)}).stdout
    for line in out.splitlines():
        message = json.loads(line)
        if message.get("executable") and message.get("target", {}).get("name") == "admitted_path":
            return message["executable"]
    raise RuntimeError("cargo built no admitted_path bench")


def build_baseline(ref, workdir):
    with worktree(ref, workdir / "baseline") as tree:
        bench = tree / "benches/admitted_path.rs"
        own = bench.read_text() if bench.exists() else None
        if own is None:
            bench.parent.mkdir(exist_ok=True)
            with open(tree / "Cargo.toml", "a") as toml:
                toml.write(BENCH_TOML)
        # This tree's bench, so that every stage is the same code (a stage
        # the older tree cannot run is reported as n/a); the ref's own when
        # this one does not build against the ref's API.
        bench.write_text((ROOT / "benches/admitted_path.rs").read_text())
        try:
            return build(tree, ROOT / "target/baseline-bench")
        except subprocess.CalledProcessError:
            if own is None:
                raise
            print(f"(this tree's bench does not build against {ref}: its own bench file is counted)")
            bench.write_text(own)
            return build(tree, ROOT / "target/baseline-bench")


def instructions(executable, stage, iters, workdir):
    """Instructions per iteration of `stage` (callgrind, only `measured_loop`)."""
    out = workdir / f"callgrind.{stage}.{abs(hash(executable))}.out"
    run = subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", "--collect-atstart=no",
                          "--toggle-collect=*measured_loop*", "--error-exitcode=0", executable],
                         capture_output=True,
                         env={**os.environ, "ADMITTED_PATH_STAGE": stage, "ADMITTED_PATH_ITERS": str(iters),
                              "RUST_BACKTRACE": "0"})
    if run.returncode != 0 or not out.exists():
        return float("nan")
    total = re.search(r"^(?:summary|totals): (\d+)", out.read_text(), re.M)
    return int(total.group(1)) / iters if total else float("nan")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--baseline", default=None)
    parser.add_argument("--iters", type=int, default=2000)
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="tollgate-admitted-"))
    builds = [("this tree", build(ROOT, ROOT / "target"))]
    if args.baseline:
        builds.insert(0, (f"baseline {args.baseline}", build_baseline(args.baseline, workdir)))
    counts = {label: {s: instructions(exe, s, args.iters, workdir) for s in STAGES} for label, exe in builds}
    labels = [label for label, _ in builds]
    head = "| stage | " + " | ".join(f"{l} (instructions)" for l in labels) + (" | ratio |" if len(labels) > 1 else " |")
    print(head)
    print("|---" * (head.count("|") - 1) + "|")
    for s in STAGES:
        row = [f"{counts[l][s]:,.0f}" if counts[l][s] == counts[l][s] else "n/a" for l in labels]
        if len(labels) > 1:
            row.append(f"{counts[labels[1]][s] / counts[labels[0]][s]:.2f}")
        print(f"| {s} | " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
