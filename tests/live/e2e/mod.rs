//! End to end through a real Envoy and Valkey: rules, algorithms, the stream and cache, logins, token budgets, what a killed store leaves charged, concurrency limits, operating live keys with the CLI.

mod algorithms;
mod basics;
mod charges;
mod concurrency;
mod fast;
mod logins;
mod operate;
mod rules;
mod tokens;
