"""Per-key overrides (#42, docs/cli.md): Valkey CPU per decision of a rule
with `"overrides": true` against the same rule without, both with no
override stored ("overridable": the decision reads an absent hash) and with
one in force for the key ("overridden": it reads the hash and decides with
its limit). One Valkey, one Envoy per case, each driven alone in turns
(wrk -c64, 3 s, the order reversed every other turn); per case, over its
turns: Valkey's process CPU (user + system, /proc) and the µs Valkey booked
to FCALL (commandstats), each divided by the decisions the Envoy's worker
sent (its `tollgate.store.requests`); and Envoy CPU per request.

  python3 scripts/bench overrides [--turns N]
"""

import argparse
import subprocess
import tempfile
from pathlib import Path

from .common import ROOT, WASM, admin_stat, cpu_seconds, valkey_server, valkey_stats
from .together import drive, usage
from .variants import CASES, Variant

TURNS = 6
DURATION = 3
NAMES = ("admitted", "overridable", "overridden")
DECISIONS = "wasmcustom.tollgate.store.requests"


def cli():
    """The `tollgate` command of this tree (built once, in the dev profile:
    it only writes the override)."""
    subprocess.run(["cargo", "build", "--quiet", "--bin", "tollgate"], cwd=ROOT, check=True)
    return ROOT / "target/debug/tollgate"


def override(tollgate, config, valkey_port):
    """Twice the limit for the bench's key of the "overridden" case's rule,
    written as an operator would."""
    subprocess.run([str(tollgate), "override", "set", str(config), "--rule", CASES["overridden"]["rule"]["name"],
                    "--key", "x-user-id=bench", "--store", f"redis://127.0.0.1:{valkey_port}", "--times", "2",
                    "--note", "bench"], check=True, capture_output=True)


def measure(turns=TURNS):
    """{case: {"valkey_us", "fcall_us", "envoy_us": per decision / request}, "ratios": {case: {"valkey": ...,
    "fcall": ...}} against "admitted"}."""
    tollgate = cli()
    workdir = Path(tempfile.mkdtemp(prefix="tollgate-overrides-"))
    sums = {n: {"valkey": 0.0, "fcall": 0, "decisions": 0, "envoy": 0.0, "requests": 0} for n in NAMES}
    with valkey_server(workdir) as (valkey_port, valkey):
        variants = [Variant(n, WASM, {}, n, valkey_port, workdir, pin=True) for n in NAMES]
        try:
            for v in variants:
                v.ready()
            override(tollgate, variants[2].config, valkey_port)
            # Loaded first, all at once (V8 optimises the hot code).
            drive(variants, "4s")
            for t in range(turns):
                for v in (variants if t % 2 == 0 else variants[::-1]):
                    s = sums[v.case_name]
                    decided, vcpu, (_, _, fcall) = admin_stat(v.ports[2], DECISIONS), cpu_seconds(valkey.pid), \
                        valkey_stats(valkey_port)
                    done, ecpu = usage(v)
                    drive([v], f"{DURATION}s", connections=64)
                    now_done, now_ecpu = usage(v)
                    s["decisions"] += admin_stat(v.ports[2], DECISIONS) - decided
                    s["valkey"] += cpu_seconds(valkey.pid) - vcpu
                    s["fcall"] += valkey_stats(valkey_port)[2] - fcall
                    s["requests"] += now_done - done
                    s["envoy"] += now_ecpu - ecpu
        finally:
            for v in variants:
                v.stop()
    out = {n: {"valkey_us": s["valkey"] * 1e6 / max(s["decisions"], 1),
               "fcall_us": s["fcall"] / max(s["decisions"], 1),
               "envoy_us": s["envoy"] * 1e6 / max(s["requests"], 1),
               "decisions": s["decisions"]} for n, s in sums.items()}
    base = out["admitted"]
    out["ratios"] = {n: {"valkey": out[n]["valkey_us"] / base["valkey_us"],
                         "fcall": out[n]["fcall_us"] / base["fcall_us"]} for n in NAMES}
    return out


def report(m):
    """Markdown lines for docs/benchmarks.md."""
    lines = [
        "## Per-key overrides (#42)",
        "",
        "Valkey CPU per decision of the admitted rule with `\"overrides\": true` against the same rule without, one",
        f"Envoy per case, each alone in {TURNS} turns of {DURATION} s at 64 connections against one Valkey",
        "(`python3 scripts/bench overrides`): Valkey's process CPU and the µs it booked to FCALL, per decision.",
        "",
        "| | decisions | Valkey CPU µs / decision | ÷ without | FCALL µs / decision | ÷ without | Envoy CPU µs / request |",
        "|---|---|---|---|---|---|---|",
    ]
    label = {"admitted": "without `overrides`", "overridable": "`overrides`, none stored",
             "overridden": "`overrides`, one in force"}
    for n in NAMES:
        r, q = m[n], m["ratios"][n]
        lines.append(f"| {label[n]} | {r['decisions']:,} | {r['valkey_us']:.2f} | **{q['valkey']:.2f}** | "
                     f"{r['fcall_us']:.2f} | {q['fcall']:.2f} | {r['envoy_us']:.1f} |")
    return lines


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--turns", type=int, default=TURNS)
    args = parser.parse_args()
    print("\n".join(report(measure(args.turns))))


if __name__ == "__main__":
    main()
