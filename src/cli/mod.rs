//! The `tollgate` command (`src/bin/tollgate.rs`): the filter's own parser
//! and pure models on the operator's machine. Host-only.
//!
//! - `tollgate check FILE`: every configuration error, each line exactly as
//!   the filter logs it, each rule's concurrency limit, and the Envoy
//!   wiring of the store cluster.
//! - `tollgate explain FILE`: what each rule does, in words and a table.
//! - `tollgate simulate FILE TRACE`: a trace of requests through the rules,
//!   as the seed's table.
//! - `tollgate schema`: the JSON Schema of the configuration.
//! - `tollgate inspect`, `reset`, `override set|list|rm`: one bucket's live
//!   keys in the store ([`ops`]; docs/cli.md).
//!
//! FILE is plugin JSON, an Envoy configuration embedding it (YAML or JSON,
//! bootstrap or xDS file) or an Istio `WasmPlugin` manifest.

pub mod args;
pub mod bucket;
pub mod clock;
pub mod explain;
pub mod failure;
pub mod inspect;
pub mod ops;
pub mod overrides;
pub mod reset;
pub mod simulate;
pub mod source;
pub mod store;
pub mod table;
pub mod trace;
pub mod wiring;

use std::io::Write;
use std::path::Path;

use crate::config::{Config, ConfigError};
use source::{Embedded, Found};
use wiring::{Topology, Wiring};

/// The prefix of the filter's log line for a rejected configuration.
pub const LOG_PREFIX: &str = "tollgate: invalid plugin configuration: ";

const USAGE: &str = "usage:
  tollgate check FILE            every configuration error (as the filter logs it) and the Envoy wiring
  tollgate explain FILE          what each rule matches, its bucket key, windows, memory and headers
  tollgate simulate FILE TRACE   replay TRACE (CSV or JSON lines: time, method, path, headers) through the rules
  tollgate schema                the JSON Schema of the plugin configuration
  tollgate inspect FILE --rule R --key PART=VALUE... STORE [--at TIME] [--json]
                                 what the store holds for one bucket, and what its next request gets
  tollgate reset FILE --rule R (--key PART=VALUE... | --key-prefix PART=PREFIX... | --all-keys) STORE
        [--dry-run] [--leases]   clear one bucket, or every bucket of the rule that matches
  tollgate override set FILE --rule R --key PART=VALUE... STORE (--times N | --limit PERIOD=N... |
        --concurrency N) [--for DURATION | --until TIME] [--note TEXT]
                                 new limits for one bucket, until a time
  tollgate override list FILE [--rule R] STORE [--json]
  tollgate override rm FILE --rule R --key PART=VALUE... STORE

STORE: --store redis://[USER:PASS@]HOST:PORT (rediss:// for TLS: --tls-ca, --tls-cert, --tls-key),
  --sentinel HOST:PORT[,HOST:PORT] --master NAME, or --cluster HOST:PORT (a seed node); --user NAME,
  the password also from TOLLGATE_STORE_PASSWORD; --timeout 5s. docs/cli.md has examples.

FILE: plugin JSON, an Envoy configuration (YAML or JSON) whose Wasm filter embeds it, or an Istio WasmPlugin.
Exit status: 0 valid (done), 1 invalid (an unexpected store reply), 2 usage or unreadable file,
  3 unknown rule or key parts that do not match the rule's key, 4 store unreachable, 5 store refused (ACL, auth).
";

/// Runs the command with `args` (without the program name); returns the
/// exit status.
pub fn run(args: &[String], out: &mut dyn Write, err: &mut dyn Write) -> i32 {
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let result = match args.as_slice() {
        ["check", file] => check(Path::new(file), out),
        ["explain", file] => explain::run(Path::new(file), out),
        ["simulate", file, trace] => simulate::run(Path::new(file), Path::new(trace), out),
        ["inspect" | "reset", rest @ ..] if !rest.is_empty() => {
            return ops::run(args.get(..1).unwrap_or_default(), rest, out, err)
        }
        ["override", "set" | "list" | "rm", rest @ ..] if !rest.is_empty() => {
            return ops::run(args.get(..2).unwrap_or_default(), rest, out, err)
        }
        ["schema"] => {
            write!(out, "{}", crate::config::schema::json_schema_text()).map(|()| 0).map_err(|e| e.to_string())
        }
        ["help" | "--help" | "-h"] => write!(out, "{USAGE}").map(|()| 0).map_err(|e| e.to_string()),
        _ => {
            let _ = write!(err, "{USAGE}");
            return 2;
        }
    };
    match result {
        Ok(code) => code,
        Err(message) => {
            let _ = writeln!(err, "tollgate: {message}");
            2
        }
    }
}

/// Parses one embedded configuration as the filter would, with every error.
pub fn parse(embedded: &Embedded) -> Result<Config, Vec<ConfigError>> {
    let text = match &embedded.json {
        Ok(text) => text,
        Err(why) => return Err(vec![ConfigError::new("(root)", why.clone())]),
    };
    let env = |name: &str| embedded.env.get(name).cloned();
    Config::from_json_all(text.as_bytes(), &env)
}

/// The configurations of `path`, or an error when there are none.
pub fn load(path: &Path) -> Result<Found, String> {
    let found = source::load(path)?;
    if found.configs.is_empty() {
        return Err(format!(
            "{}: no tollgate configuration found (plugin JSON, a Wasm filter with root_id \"{}\", or a WasmPlugin)",
            path.display(),
            source::ROOT_ID
        ));
    }
    Ok(found)
}

fn check(path: &Path, out: &mut dyn Write) -> Result<i32, String> {
    let found = load(path)?;
    let topology = Topology::new(&found.envoy_docs);
    let mut errors = 0;
    let mut text = String::new();
    for embedded in &found.configs {
        text.push_str(&format!("{}\n", embedded.origin));
        match parse(embedded) {
            Ok(config) => {
                let names: Vec<&str> = config.rules.iter().map(|r| r.name.as_str()).collect();
                let s = if names.len() == 1 { "" } else { "s" };
                text.push_str(&format!("  ok: {} rule{s} ({})\n", names.len(), names.join(", ")));
                for (rule, c) in config.rules.iter().filter_map(|r| Some((r, r.concurrency.as_ref()?))) {
                    text.push_str(&format!(
                        "  concurrency: {}: at most {} in flight per bucket (lease TTL {})\n",
                        rule.name,
                        c.limit,
                        crate::config::Period::from_millis(c.lease_ttl_ms)
                    ));
                }
            }
            Err(list) => {
                errors += list.len();
                for e in list {
                    text.push_str(&format!("  {LOG_PREFIX}{e}\n"));
                }
            }
        }
        if embedded.istio {
            text.push_str("  wiring: not checked (a WasmPlugin's store cluster comes from an EnvoyFilter)\n");
        }
        let wired = match &embedded.json {
            Ok(json) if !found.envoy_docs.is_empty() => wiring::cluster_names(json),
            _ => Vec::new(),
        };
        if !wired.is_empty() && !topology.has_clusters() {
            text.push_str("  wiring: not checked (no clusters in this file or the files it references)\n");
            continue;
        }
        for (field, cluster) in wired {
            match topology.check(&cluster) {
                Wiring::Internal(listeners) => {
                    let shown: Vec<String> = listeners.iter().map(|l| format!("{l:?}")).collect();
                    text.push_str(&format!(
                        "  wiring: {field} {cluster:?} -> internal listener {}\n",
                        shown.join(", ")
                    ));
                }
                Wiring::Broken(problem) => {
                    errors += 1;
                    text.push_str(&format!("  wiring: {field}: {problem}\n"));
                }
            }
        }
    }
    let n = found.configs.len();
    let s = if n == 1 { "" } else { "s" };
    match errors {
        0 => text.push_str(&format!("check: {n} configuration{s}, no errors\n")),
        1 => text.push_str(&format!("check: {n} configuration{s}, 1 error\n")),
        e => text.push_str(&format!("check: {n} configuration{s}, {e} errors\n")),
    }
    out.write_all(text.as_bytes()).map_err(|e| e.to_string())?;
    Ok(i32::from(errors > 0))
}
