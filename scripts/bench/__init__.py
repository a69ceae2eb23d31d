"""tollgate's benchmarks and measurements, one package. Each entry point
runs as `python3 scripts/bench NAME [ARGS]` (`__main__.py` lists them; from
scripts/, `python3 -m bench.NAME` too); the make targets `bench`,
`bench-host`, `bench-floor`, `bench-instructions` and `bench-script` call
them. What they share (paths, ports, Valkey, Envoy's configuration and
stats, wrk) is in `common`.

- `suite`: `make bench`, every case against Envoy's own baselines; its
  sections `flood`, `sync` and `cluster`, written by `report` with the
  charts of `charts` into docs/benchmarks.md.
- `variants`, `together`, `cpu_split`, `floor`, `instructions`: Envoy's CPU
  or instructions per request, modules and cases compared in one run.
- `admitted_cost`, `v8_profile`: the module's own compute, on the host
  (callgrind) and under node's V8.
- `script_cost`, `fcall_batch_cost`: what a decision costs inside Valkey.
"""
