//! Running it: the access log, Prometheus rules, `tollgate simulate` against Envoy, a 1,000-rule config, hostile requests, what a request costs Envoy.

mod access_log;
mod cli_simulate;
mod config_limits;
mod hostile_requests;
mod monitoring;
mod request_cost;
