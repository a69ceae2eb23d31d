"""Runs one entry point of the bench package:

    python3 scripts/bench NAME [ARGS]     (from scripts/: python3 -m bench NAME [ARGS])

NAME is one of those below; `python3 scripts/bench NAME --help` shows its
arguments (and its module's docstring, what it measures).
"""

import runpy
import sys
from pathlib import Path

ENTRIES = {
    "suite": "make bench: every case against Envoy's own baselines, into docs/benchmarks.md",
    "charts": "docs/benchmarks.md's charts drawn again from its table (--check DIR: into DIR)",
    "variants": "modules or configurations measured against one another in one run",
    "together": "Envoy CPU per request of cases measured during the same seconds",
    "cpu_split": "Envoy's user and system CPU per request, apart",
    "floor": "make bench-floor: tollgate's paths beside the floor module",
    "instructions": "make bench-instructions: Envoy's instructions per request by case (callgrind)",
    "admitted_cost": "make bench-host: instructions per admitted decision on the host, by stage",
    "v8_profile": "the module's compute under node's V8, by function",
    "script_cost": "make bench-script: what one decision costs inside Valkey",
    "fcall_batch_cost": "Valkey CPU per decision: N FCALLs against one FCALL of N decisions",
    "concurrency": "Envoy CPU per admitted request with a concurrency limit against windows only",
    "overrides": "Valkey CPU per decision of a rule open to per-key overrides against the same rule without",
}


def main():
    name = sys.argv[1] if len(sys.argv) > 1 else None
    if name not in ENTRIES:
        width = max(map(len, ENTRIES))
        listing = "\n".join(f"  {n:<{width}}  {what}" for n, what in ENTRIES.items())
        asked = name in ("-h", "--help")
        print(f"{__doc__}\n{listing}", file=sys.stdout if asked else sys.stderr)
        sys.exit(0 if asked else 2)
    # Run as `python3 scripts/bench`, the path starts with scripts/bench/:
    # scripts/ instead, so that the modules are the package's.
    sys.path[0] = str(Path(__file__).resolve().parent.parent)
    sys.argv = [f"bench {name}", *sys.argv[2:]]
    runpy.run_module(f"bench.{name}", run_name="__main__")


if __name__ == "__main__":
    main()
