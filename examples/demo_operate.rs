//! `make demo-operate`: the on-call engineer's tools on live keys. Starts
//! Valkey and Envoy with `envoy/envoy.yaml` and the seed's rule open to
//! overrides, locks alice out (six token requests: the sixth is refused by
//! 5 per 3 s), then runs the `tollgate` command's own code: `inspect` names
//! the window that denies and the headers alice got, `reset` frees her and
//! her next request is admitted; `override set --times 10` gives tenant t42
//! ten times the limits (50 of 60 admitted at once, bob still 5 of 10),
//! `override list` shows it, `override rm` ends it. Then it stops.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)]

#[path = "../tests/support/mod.rs"]
mod support;

use support::{Envoy, EnvoyOptions, Valkey};

const CONFIG: &str = r#"{
  "valkey": { "cluster": "tollgate_valkey", "timeout": "100ms" },
  "rules": [
    {
      "name": "auth.createToken",
      "match": { "path_prefix": "/auth/token", "methods": ["POST"] },
      "key": [ { "header": "x-user-id" } ],
      "limits": [ { "limit": 20, "period": "60s" }, { "limit": 5, "period": "3s" } ],
      "overrides": true
    }
  ]
}"#;

/// `tollgate ARGS` (the command's own code), printed with its output.
fn tollgate(args: &[&str]) {
    let shown: Vec<String> =
        args.iter().map(|a| if a.contains(' ') { format!("{a:?}") } else { a.to_string() }).collect();
    println!("\n$ tollgate {}", shown.join(" ").replace(std::env::temp_dir().to_str().unwrap(), "$TMP"));
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let code = tollgate::cli::run(&args, &mut out, &mut err);
    print!("{}{}", String::from_utf8_lossy(&out), String::from_utf8_lossy(&err));
    assert_eq!(code, 0, "exit {code}");
}

/// `n` token requests of `user`: (admitted, refused).
fn tokens(envoy: &Envoy, user: &str, n: usize) -> (usize, usize) {
    let statuses: Vec<u16> =
        (0..n).map(|_| envoy.request("POST", "/auth/token", &[("x-user-id", user)]).status).collect();
    (statuses.iter().filter(|s| **s == 200).count(), statuses.iter().filter(|s| **s == 429).count())
}

fn main() {
    let valkey = Valkey::start();
    let options = EnvoyOptions { plugin_config: CONFIG.to_string(), valkey_port: valkey.port, concurrency: 2 };
    let envoy = Envoy::start(&options);
    let path = std::env::temp_dir().join(format!("tollgate-demo-operate-{}.json", std::process::id()));
    std::fs::write(&path, CONFIG).unwrap();
    let (file, store) = (path.to_str().unwrap(), format!("redis://127.0.0.1:{}", valkey.port));
    let (alice, t42) = ("x-user-id=alice", "x-user-id=t42");
    let rule = "auth.createToken";

    let (ok, refused) = tokens(&envoy, "alice", 6);
    println!("alice: {ok} token requests admitted, {refused} refused (5 per 3 s AND 20 per 60 s)");
    tollgate(&["inspect", file, "--rule", rule, "--key", alice, "--store", &store]);
    tollgate(&["reset", file, "--rule", rule, "--key", alice, "--store", &store]);
    let r = envoy.request("POST", "/auth/token", &[("x-user-id", "alice")]);
    println!("\nalice's next request: {} (RateLimit: {})", r.status, r.header("ratelimit").unwrap_or("-"));

    let note = "INC-1: load test";
    tollgate(&[
        "override", "set", file, "--rule", rule, "--key", t42, "--times", "10", "--for", "10m", "--note", note,
        "--store", &store,
    ]);
    let (t42_ok, _) = tokens(&envoy, "t42", 60);
    let (bob, _) = tokens(&envoy, "bob", 10);
    println!("\nt42: {t42_ok} of 60 admitted at once (10 x 5 per 3 s); bob: {bob} of 10 (the configured 5)");
    tollgate(&["override", "list", file, "--store", &store]);
    tollgate(&["override", "rm", file, "--rule", rule, "--key", t42, "--store", &store]);
    let _ = std::fs::remove_file(&path);
}
