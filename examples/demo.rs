//! `make demo`: starts Valkey and Envoy with `envoy/envoy.yaml` (on free
//! ports), runs the seed article's scenario — eight `auth.createToken` calls
//! for one user against 20/60s + 5/3s — prints the seed's table, and stops.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)]

#[path = "../tests/support/mod.rs"]
mod support;

use support::{demo_plugin_config, Envoy, EnvoyOptions, Response, Valkey};

fn remaining(resp: &Response, policy: &str) -> String {
    resp.header("ratelimit")
        .and_then(|h| h.split(", ").find(|item| item.starts_with(&format!("\"{policy}\""))))
        .and_then(|item| item.split(';').find_map(|p| p.strip_prefix("r=")))
        .unwrap_or("-")
        .to_string()
}

fn denied_by(resp: &Response) -> String {
    if resp.status != 429 {
        return String::new();
    }
    let body: serde_json::Value = serde_json::from_slice(&resp.body).unwrap_or_default();
    body["violated-policies"]
        .as_array()
        .map(|v| v.iter().filter_map(|p| p.as_str()).collect::<Vec<_>>().join(", "))
        .unwrap_or_default()
}

fn main() {
    let valkey = Valkey::start();
    let envoy =
        Envoy::start(&EnvoyOptions { plugin_config: demo_plugin_config(), valkey_port: valkey.port, concurrency: 1 });
    println!("POST /auth/token as x-user-id: alice — rule auth.createToken: 20 per 60s AND 5 per 3s\n");
    println!("{:>4} | {:>6} | {:>15} | {:>14} | denied by", "call", "status", "remaining (60s)", "remaining (3s)");
    println!("{}", "-".repeat(70));
    for call in 1..=8 {
        let resp = envoy.request("POST", "/auth/token", &[("x-user-id", "alice")]);
        println!(
            "{call:>4} | {:>6} | {:>15} | {:>14} | {}",
            resp.status,
            remaining(&resp, "auth.createToken/60s"),
            remaining(&resp, "auth.createToken/3s"),
            denied_by(&resp)
        );
    }
    let entries = valkey.int(&["ZCARD", "tollgate:{auth.createToken:alice}:log"]);
    println!("\nValkey holds {entries} entries for alice: the denied calls consumed nothing.");
}
