//! Running it: the access log, Prometheus rules, `tollgate simulate` against Envoy, `tollgate inspect`/`reset`/`override` against Valkey (its topologies too), a 1,000-rule config, hostile requests, what a request costs Envoy.

mod access_log;
mod cli_inspect;
mod cli_ops;
mod cli_simulate;
mod cli_topologies;
mod config_limits;
mod hostile_requests;
mod monitoring;
mod request_cost;
