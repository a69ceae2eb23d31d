//! The `tollgate` command, run as a process from the repository root: exact
//! output for the fixtures of `tests/fixtures/cli/`, `check` on every shipped
//! Envoy and Istio file, every invalid configuration fixture reported as the
//! filter logs it, and bad input. Fast: no Envoy, no Valkey.

use crate::plugin;

use plugin::{plugin, rule};
use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// `(exit status, stdout, stderr)` of `tollgate ARGS` run in the repository root.
fn tollgate(args: &[&str]) -> (i32, String, String) {
    tollgate_env(args, &[])
}

fn tollgate_env(args: &[&str], env: &[(&str, &str)]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .args(args)
        .envs(env.iter().copied())
        .current_dir(root())
        .output()
        .unwrap();
    let text = |b: Vec<u8>| String::from_utf8(b).unwrap();
    (out.status.code().unwrap(), text(out.stdout), text(out.stderr))
}

fn expected(name: &str) -> String {
    std::fs::read_to_string(root().join("tests/fixtures/cli").join(name)).unwrap()
}

fn scratch(name: &str, text: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tollgate-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn check_accepts_every_shipped_envoy_and_istio_file() {
    let mut files: Vec<String> = std::fs::read_dir(root().join("envoy"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .map(|p| format!("envoy/{}", p.file_name().unwrap().to_str().unwrap()))
        .collect();
    files.push("envoy/istio/wasmplugin.yaml".into());
    assert!(files.len() >= 5, "{files:?}");
    for file in &files {
        let (code, out, err) = tollgate(&["check", file]);
        assert_eq!((code, err.as_str()), (0, ""), "{file}:\n{out}");
        assert!(out.contains("  ok: 1 rule (auth.createToken)\n"), "{file}:\n{out}");
        assert!(out.ends_with("check: 1 configuration, no errors\n"), "{file}:\n{out}");
        if file.ends_with("istio/wasmplugin.yaml") {
            assert!(out.contains("wiring: not checked"), "{out}");
        } else {
            assert!(
                out.contains(
                    "  wiring: valkey.cluster \"tollgate_valkey\" -> internal listener \"tollgate_valkey_tunnel\"\n"
                ),
                "{file}:\n{out}"
            );
        }
    }
    // The LDS and ECDS variants keep the filter in another file: it is followed.
    let (_, out, _) = tollgate(&["check", "envoy/envoy-ecds.yaml"]);
    assert!(out.starts_with("envoy/dynamic/tollgate-filter.yaml (from envoy/envoy-ecds.yaml): tollgate\n"), "{out}");
    let (_, out, _) = tollgate(&["check", "envoy/envoy-sentinel.yaml"]);
    assert!(
        out.contains(
            "wiring: valkey.sentinel.cluster \"tollgate_sentinels\" -> internal listener \"tollgate_sentinel_tunnel\""
        ),
        "{out}"
    );
}

#[test]
fn check_reports_every_error_and_the_wiring_exactly() {
    let (code, out, err) = tollgate(&["check", "tests/fixtures/cli/broken-envoy.yaml"]);
    assert_eq!(out, expected("broken-envoy.check.expected"));
    assert_eq!((code, err.as_str()), (1, ""));
}

/// Each invalid fixture: the line the filter logs, `tollgate: invalid plugin
/// configuration: <the fixture's .expected>`, and exit status 1.
#[test]
fn check_prints_each_invalid_fixture_as_the_filter_logs_it() {
    let dir = root().join("tests/fixtures/config/invalid");
    let mut seen = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "json") {
            continue;
        }
        let message = std::fs::read_to_string(path.with_extension("expected")).unwrap();
        let relative = path.strip_prefix(root()).unwrap().to_str().unwrap().to_owned();
        let (code, out, _) = tollgate(&["check", &relative]);
        let line = format!("  tollgate: invalid plugin configuration: {}\n", message.trim_end());
        assert_eq!(code, 1, "{relative}:\n{out}");
        assert!(out.starts_with(&format!("{relative}\n{line}")), "{relative}:\n{out}");
        seen += 1;
    }
    assert!(seen > 100, "{seen} fixtures");
}

#[test]
fn check_reports_one_error_per_section_and_per_rule() {
    let doc = r#"{ "valkey": { "cluster": "c", "max_batch": 0 }, "failure_mode": "open",
        "rules": [ { "name": "a", "limits": [ { "limit": 0, "period": "1s" } ] },
                   { "name": "b", "limits": [ { "limit": 1, "period": "1s" } ] },
                   { "name": "a", "limits": [ { "limit": 1, "period": "1s" } ] } ],
        "response": { "status": 200 } }"#;
    let path = scratch("several.json", doc);
    let (code, out, _) = tollgate(&["check", path.to_str().unwrap()]);
    let lines: Vec<&str> = out.lines().skip(1).collect();
    assert_eq!(
        lines,
        [
            "  tollgate: invalid plugin configuration: valkey.max_batch: must be >= 1",
            "  tollgate: invalid plugin configuration: failure_mode: unknown value \"open\", expected one of allow, deny, local",
            "  tollgate: invalid plugin configuration: rules[0].limits[0].limit: must be > 0",
            "  tollgate: invalid plugin configuration: rules[2].name: duplicate rule name \"a\" (also rules[0].name)",
            "  tollgate: invalid plugin configuration: response.status: must be an HTTP error status (400..=599)",
            "check: 1 configuration, 5 errors",
        ]
    );
    assert_eq!(code, 1);
}

#[test]
fn check_reads_password_variables_from_the_vm_config() {
    let yaml = std::fs::read_to_string(root().join("envoy/envoy.yaml")).unwrap().replace(
        r#""valkey": { "cluster": "tollgate_valkey","#,
        r#""valkey": { "cluster": "tollgate_valkey", "password_env": "TOLLGATE_PW","#,
    );
    let unset = scratch("auth-unset.yaml", &yaml);
    let (code, out, _) = tollgate(&["check", unset.to_str().unwrap()]);
    assert!(out.contains("valkey.password_env: environment variable \"TOLLGATE_PW\" is not set"), "{out}");
    assert_eq!(code, 1);
    let with_env = yaml.replace("          vm_id: tollgate\n", "          vm_id: tollgate\n                          environment_variables: { key_values: { TOLLGATE_PW: s3cret } }\n");
    assert_ne!(with_env, yaml);
    let set = scratch("auth-set.yaml", &with_env);
    let (code, out, _) = tollgate(&["check", set.to_str().unwrap()]);
    assert_eq!(code, 0, "{out}");
    let (code, out, _) = tollgate_env(&["check", unset.to_str().unwrap()], &[("TOLLGATE_PW", "x")]);
    assert_eq!(code, 1, "host variables count only when host_env_keys names them:\n{out}");
}

#[test]
fn check_refuses_files_without_a_configuration() {
    let (code, out, err) = tollgate(&["check", "envoy/docker-compose.yml"]);
    assert_eq!((code, out.as_str()), (2, ""));
    assert!(err.contains("no tollgate configuration found"), "{err}");
    let (code, _, err) = tollgate(&["check", "no/such/file.yaml"]);
    assert_eq!(code, 2);
    assert!(err.starts_with("tollgate: no/such/file.yaml: "), "{err}");
    let (code, _, err) = tollgate(&["frobnicate"]);
    assert_eq!(code, 2);
    assert!(err.starts_with("usage:"), "{err}");
}

#[test]
fn explain_prints_the_demo_rule() {
    let (code, out, err) = tollgate(&["explain", "envoy/envoy.yaml"]);
    assert_eq!(out, expected("envoy.explain.expected"));
    assert_eq!((code, err.as_str()), (0, ""));
    for line in [
        "  bucket:  one per value of header x-user-id; a request without it skips the rule",
        "           key tollgate:{auth.createToken:<header x-user-id>}:log",
        "  steady client: the 60s window binds first (the lowest rate, 20 per 60s)",
        "  bursty client: the 3s window binds first (5 requests at once)",
        "    request 6 at once: 429 (denied by auth.createToken/3s)",
        "      retry-after: 3",
    ] {
        assert!(out.contains(&format!("{line}\n")), "missing {line:?}");
    }
}

#[test]
fn explain_describes_every_algorithm_and_refuses_invalid_files() {
    for algorithm in ["gcra", "sliding_window", "fixed_window"] {
        let rule = rule("r")
            .algorithm(algorithm)
            .field(r#""cost": 2"#)
            .key(r#"{ "remote_address": { "v4_prefix": 24 } }"#)
            .key(r#""method""#)
            .limit(600, "600s")
            .limit(30, "20s");
        let doc = plugin().cluster("c").with(rule).json();
        let path = scratch(&format!("{algorithm}.json"), &doc);
        let (code, out, _) = tollgate(&["explain", path.to_str().unwrap()]);
        assert_eq!(code, 0, "{out}");
        assert!(out.contains(&format!("rule r ({algorithm}, cost 2)")), "{out}");
        assert!(out.contains("a hash of 4 fields") || out.contains("a hash of 6 fields"), "{out}");
        assert!(out.contains("bursty client: the 20s window binds first (15 requests at once)"), "{out}");
        assert!(out.contains("key tollgate:{r:<client address (/24 for IPv4, /128 for IPv6)>:<method>}:"), "{out}");
    }
    let (code, out, _) = tollgate(&["explain", "tests/fixtures/config/invalid/limit-zero.json"]);
    assert_eq!(code, 1);
    assert!(out.contains("tollgate: invalid plugin configuration: rules[0].limits[0].limit: must be > 0"), "{out}");
}

#[test]
fn explain_shows_the_key_of_a_rule_with_a_hash_tag() {
    let config = scratch(
        "tagged.json",
        r#"{ "valkey": { "cluster": "c" }, "rules": [ { "name": "user.path", "key": [ { "header": "x-user-id" }, "path" ], "hash_tag": 0, "limits": [ { "limit": 10, "period": "1s" } ] } ] }"#,
    );
    let (code, out, _) = tollgate(&["explain", config.to_str().unwrap()]);
    assert_eq!(code, 0);
    assert!(out.contains("key tollgate:{<header x-user-id>}:user.path:<header x-user-id>:<path>:log\n"), "{out}");
}

/// A rule with a concurrency limit: `explain` says what it does and
/// stores, and shows its items and a denial by the full lease set;
/// `check` lists it.
#[test]
fn explain_and_check_show_a_concurrency_limit() {
    let (code, out, err) = tollgate(&["explain", "tests/fixtures/cli/concurrency.json"]);
    assert_eq!((code, err.as_str()), (0, ""));
    assert_eq!(out, expected("concurrency.explain.expected"));
    assert!(out.contains("key tollgate:{llm.completions:<header x-user-id>}:log\n"), "{out}");
    assert!(out.contains("{llm.completions:<header x-user-id>}:lease (the bucket's slot)"), "{out}");
    assert!(out.contains("request 4 at once: 429 (denied by llm.completions/concurrency)"), "{out}");
    assert!(out.contains(r#""llm.completions/concurrency";q=3;qu="concurrent-requests""#), "{out}");
    let (code, out, _) = tollgate(&["check", "tests/fixtures/config/valid/concurrency.json"]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("  concurrency: api.calls: at most 5 in flight per bucket (lease TTL 30s)\n"), "{out}");
    assert!(out.contains("  concurrency: llm.completions: at most 2 in flight per bucket (lease TTL 2m)\n"), "{out}");
    // `simulate` gives the concurrency limit a column after the rule's windows.
    let trace = scratch(
        "concurrency.jsonl",
        r#"{"time": 1800000000000, "method": "GET", "path": "/v1/completions", "headers": {"x-user-id": "a"}}"#,
    );
    let (code, out, _) = tollgate(&["simulate", "tests/fixtures/cli/concurrency.json", trace.to_str().unwrap()]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("| remaining (1m) | remaining (1s) | remaining (concurrency) | denied by\n"), "{out}");
    let (code, out, _) = tollgate(&["check", "tests/fixtures/config/invalid/concurrency-with-sync.json"]);
    assert_eq!(code, 1);
    assert!(out.contains("rules[0].concurrency: does not apply with rules[0].sync: "), "{out}");
}

#[test]
fn simulate_prints_the_seed_table() {
    for (trace, table) in [("seed.jsonl", "seed-jsonl.simulate.expected"), ("seed.csv", "seed-csv.simulate.expected")] {
        let (code, out, err) = tollgate(&["simulate", "envoy/envoy.yaml", &format!("tests/fixtures/cli/{trace}")]);
        assert_eq!(out, expected(table), "{trace}");
        assert_eq!((code, err.as_str()), (0, ""));
    }
    let out = expected("seed-jsonl.simulate.expected");
    assert!(out.contains("   6 |      0 |    429 |              15 |              0 | auth.createToken/3s\n"), "{out}");
}

/// A Valkey Cluster configuration simulates as a single store (one master
/// serving every slot), through the slot map's refreshes: one request every
/// 700 ms for 28 s, past five 5 s refreshes.
#[test]
fn simulate_a_cluster_configuration_gives_the_single_store_table() {
    let trace: String = (0..40u64)
        .map(|i| {
            let t = 1_800_000_000_000 + i * 700;
            format!("{{\"time\": {t}, \"method\": \"POST\", \"path\": \"/auth/token\", \"headers\": {{\"x-user-id\": \"alice\"}}}}\n")
        })
        .collect();
    let trace = scratch("long.jsonl", &trace);
    let table = |file: &str| {
        let (code, out, err) = tollgate(&["simulate", file, trace.to_str().unwrap()]);
        assert_eq!((code, err.as_str()), (0, ""), "{file}");
        out.lines().skip(1).map(str::to_owned).collect::<Vec<_>>()
    };
    let single = table("envoy/envoy.yaml");
    assert!(single.iter().any(|l| l.contains("| auth.createToken/60s")), "{single:?}");
    assert_eq!(table("envoy/envoy-cluster.yaml"), single);
}

#[test]
fn simulate_refuses_bad_traces_and_invalid_configurations() {
    let bad = scratch("bad.jsonl", "{\"time\": 1, \"method\": \"GET\", \"path\": \"/\"}\n{\"time\": \"soon\"}\n");
    let (code, _, err) = tollgate(&["simulate", "envoy/envoy.yaml", bad.to_str().unwrap()]);
    assert_eq!(code, 2);
    assert!(err.ends_with("bad.jsonl: line 2: time: expected an integer (ms since the epoch)\n"), "{err}");
    let csv = scratch("bad.csv", "when,method,path\n1,GET,/\n");
    let (code, _, err) = tollgate(&["simulate", "envoy/envoy.yaml", csv.to_str().unwrap()]);
    assert_eq!(code, 2);
    assert!(err.ends_with("line 1: the header row must start with time,method,path\n"), "{err}");
    let (code, out, _) =
        tollgate(&["simulate", "tests/fixtures/config/invalid/limit-zero.json", "tests/fixtures/cli/seed.csv"]);
    assert_eq!(code, 1);
    assert!(out.contains("rules[0].limits[0].limit: must be > 0"), "{out}");
}

#[test]
fn schema_prints_the_committed_schema() {
    let (code, out, _) = tollgate(&["schema"]);
    assert_eq!(code, 0);
    assert_eq!(out, std::fs::read_to_string(root().join("schema/tollgate.schema.json")).unwrap());
    assert!(Path::new(&root().join("schema/tollgate.schema.json")).is_file());
}

/// Shaping: a held request goes on at its slot on the trace's clock, and
/// its row says how long it was held; beyond `max_delay`, a 429.
#[test]
fn simulate_shows_requests_held_for_their_slot() {
    let (code, out, err) = tollgate(&["simulate", "tests/fixtures/cli/shape.json", "tests/fixtures/cli/shape.csv"]);
    assert_eq!(out, expected("shape.simulate.expected"));
    assert_eq!((code, err.as_str()), (0, ""));
    assert!(out.contains("   4 |     10 |    200 |              0 | held 990 ms\n"), "{out}");
    let (code, out, _) = tollgate(&["explain", "tests/fixtures/cli/shape.json"]);
    assert_eq!(code, 0);
    assert!(out.contains("  shaped: a request that does not fit waits for its turn, up to 1000 ms"), "{out}");
}
