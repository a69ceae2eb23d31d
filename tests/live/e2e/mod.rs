//! End to end through a real Envoy and Valkey: rules, algorithms, the stream and cache, logins, token budgets, what a killed store leaves charged.

mod algorithms;
mod basics;
mod charges;
mod fast;
mod logins;
mod rules;
mod tokens;
