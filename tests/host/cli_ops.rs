//! `tollgate inspect`, `reset`, `override`: the flags, the bucket keys a
//! `--rule`/`--key` names (the very keys planning builds for a request with
//! those values), the SCAN patterns of `--key-prefix`, the override limits'
//! validation, and the exit codes that need no store (2, 3, and 4 for a port
//! nobody listens on). The live side is tests/live/operations/cli_*.rs.

use crate::plugin;

use plugin::{plugin, rule};
use std::process::Command;
use tollgate::cli::args::{self, Args};
use tollgate::cli::bucket::{self, decode, pattern, Constraint};
use tollgate::cli::overrides;
use tollgate::cli::trace::Request;
use tollgate::config::Config;
use tollgate::plan::plan;

fn config() -> Config {
    let json = plugin()
        .with(rule("login").header("x-user-id").limit(20, "60s").limit(5, "3s").field(r#""overrides": true"#))
        .with(
            rule("api")
                .algorithm("gcra")
                .header("x-tenant")
                .key(r#""method""#)
                .field(r#""hash_tag": 0"#)
                .field(r#""concurrency": { "limit": 4 }"#)
                .field(r#""overrides": true"#)
                .limit(100, "1m"),
        )
        .with(
            rule("mixed")
                .algorithm("fixed_window")
                .key(r#"{ "remote_address": { "v4_prefix": 24 } }"#)
                .key(r#"{ "query": "page" }"#)
                .key(r#"{ "cookie": "sid" }"#)
                .key(r#""authority""#)
                .key(r#""path""#)
                .key(r#"{ "literal": "v1" }"#)
                .limit(10, "1s"),
        )
        .with(rule("global").limit(1000, "1s"))
        .json();
    Config::from_json(json.as_bytes()).unwrap()
}

fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
    list.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
}

fn request(headers: &[(&str, &str)], path: &str, address: &str) -> Request {
    Request {
        time_ms: 0,
        method: "GET".into(),
        path: path.into(),
        headers: headers.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect(),
        address: Some(address.into()),
    }
}

#[test]
fn the_keys_are_those_planning_builds() {
    let config = config();
    let long = "x".repeat(100);
    for user in ["alice", "a b:{c}", "", long.as_str(), "é%"] {
        let req = request(
            &[("x-user-id", user), ("x-tenant", user), ("cookie", "sid=s1"), (":authority", "API.Example")],
            "/v1/items?page=2",
            "10.1.2.3:5555",
        );
        let planned = plan(&config, &req).checks;
        let login = bucket::resolve(&config, "login", &pairs(&[("x-user-id", user)])).unwrap();
        assert_eq!(login.window_key(), planned[0].key);
        assert_eq!(login.lease_key(), None);
        let api = bucket::resolve(&config, "api", &pairs(&[("x-tenant", user), ("method", "GET")])).unwrap();
        assert_eq!(api.window_key(), planned[1].key, "{user:?}");
        assert_eq!(api.lease_key().as_deref(), Some(planned[2].key.as_str()));
        assert_eq!(api.override_key(), tollgate::key::override_key(&planned[2].key));
        let mixed = bucket::resolve(
            &config,
            "mixed",
            &pairs(&[
                ("remote_address", "10.1.2.3"),
                ("query:page", "2"),
                ("cookie:sid", "s1"),
                ("authority", "API.Example"),
                ("path", "/v1/items?page=2"),
            ]),
        )
        .unwrap();
        assert_eq!(mixed.window_key(), planned[3].key);
        let global = bucket::resolve(&config, "global", &[]).unwrap();
        assert_eq!(global.window_key(), planned[4].key);
        // Every key reads back into the rule's parts.
        for (b, k) in [(&login, &planned[0].key), (&api, &planned[1].key), (&mixed, &planned[3].key)] {
            let d = decode("tollgate", b.rule, k).unwrap_or_else(|| panic!("{k}"));
            assert_eq!(d.parts.len(), b.rule.key.len());
            assert_eq!(d.suffix, b.rule.algorithm.id());
        }
    }
}

#[test]
fn a_bucket_is_named_by_exactly_the_rules_parts() {
    let config = config();
    let err = |rule: &str, given: &[(&str, &str)]| bucket::resolve(&config, rule, &pairs(given)).unwrap_err();
    let e = err("nope", &[]);
    assert_eq!(e.code, 3);
    assert!(e.message.contains("login, api, mixed, global"), "{}", e.message);
    let e = err("api", &[("x-tenant", "t")]);
    assert_eq!(e.code, 3);
    assert!(e.message.contains("--key x-tenant=VALUE --key method=VALUE"), "{}", e.message);
    assert_eq!(err("login", &[("x-user", "a")]).code, 3);
    assert_eq!(err("login", &[("x-user-id", "a"), ("x-user-id", "b")]).code, 3);
    assert_eq!(err("global", &[("x", "y")]).code, 3);
    let e = err("mixed", &[("remote_address", "10.1.2.3/32")]);
    assert!(e.message.contains("10.1.2.0/24"), "{}", e.message);
    // A header part may be named `header:NAME`, a masked address as the network.
    let b = bucket::resolve(&config, "login", &pairs(&[("header:X-User-Id", "a")])).unwrap();
    assert_eq!(b.window_key(), "tollgate:{login:a}:log");
    // A reset's keys: every algorithm's and its syncer set; the lease set on request; never the override.
    let api = bucket::resolve(&config, "api", &pairs(&[("x-tenant", "t"), ("method", "GET")])).unwrap();
    let keys = api.reset_keys(false);
    assert_eq!(keys.len(), 8);
    assert!(keys.contains(&"tollgate:{t}:api:t:GET:sw:syncers".to_owned()), "{keys:?}");
    assert!(!keys.iter().any(|k| k.ends_with(":lease") || k.ends_with(":ovr")));
    assert!(api.reset_keys(true).contains(&"tollgate:{t}:api:t:GET:lease".to_owned()));
}

#[test]
fn prefix_patterns_are_built_by_the_key_code() {
    let config = config();
    let login = &config.rules[0];
    let p = pattern("tollgate", login, &[Constraint::Prefix(b"ali ce".to_vec())], "*").unwrap();
    assert_eq!(p, "tollgate:{login:ali%20ce*}:*");
    assert_eq!(pattern("tollgate", login, &[Constraint::Any], "ovr").unwrap(), "tollgate:{login:*}:ovr");
    let api = &config.rules[1];
    let p = pattern("tollgate", api, &[Constraint::Prefix(b"t".to_vec()), Constraint::Exact(b"GET".to_vec())], "*");
    assert_eq!(p.unwrap(), "tollgate:{t*}:api:t*:GET:*");
    assert_eq!(pattern("tollgate", login, &[Constraint::Prefix(vec![b'x'; 60])], "*").unwrap_err().code, 3);
    // What a pattern finds is checked part by part.
    let d = decode("tollgate", api, "tollgate:{tx}:api:tx:GET:gcra:syncers").unwrap();
    assert_eq!((d.parts.clone(), d.suffix.as_str()), (vec!["tx".to_owned(), "GET".to_owned()], "gcra:syncers"));
    assert!(Constraint::Prefix(b"t".to_vec()).holds(&d.parts[0]));
    assert!(!Constraint::Exact(b"t".to_vec()).holds(&d.parts[0]));
    assert_eq!(decode("tollgate", api, "tollgate:{ty}:api:tx:GET:gcra"), None, "the tag must be the part");
    assert_eq!(decode("tollgate", login, "tollgate:{login:a:b}:log"), None, "two parts for one");
    assert_eq!(decode("tollgate", login, "tollgate:{api:a}:log"), None);
}

fn override_args(flags: &[&str]) -> Args {
    let mut all = vec!["f.json"];
    all.extend_from_slice(flags);
    args::parse(&all, &["--times", "--limit", "--concurrency", "--for", "--until", "--note", "--by"]).unwrap()
}

#[test]
fn override_limits_are_validated_as_the_lua_reads_them() {
    let config = config();
    let (login, api) = (&config.rules[0], &config.rules[1]);
    let fields = overrides::fields(login, &override_args(&["--times", "2.5"])).unwrap();
    let got: Vec<(&str, u64, u64)> = fields.iter().map(|f| (f.name.as_str(), f.limit, f.configured)).collect();
    assert_eq!(got, [("w60000", 50, 20), ("w3000", 12, 5)]);
    let fields = overrides::fields(api, &override_args(&["--times", "10"])).unwrap();
    let got: Vec<(&str, u64)> = fields.iter().map(|f| (f.name.as_str(), f.limit)).collect();
    assert_eq!(got, [("w60000", 1000), ("c", 40)]);
    let fields = overrides::fields(login, &override_args(&["--limit", "3s=7", "--limit", "1m=30"])).unwrap();
    assert_eq!(fields.iter().map(|f| f.name.as_str()).collect::<Vec<_>>(), ["w3000", "w60000"]);
    let fail = |rule, flags: &[&str]| overrides::fields(rule, &override_args(flags)).unwrap_err();
    let e = fail(login, &["--limit", "10s=7"]);
    assert_eq!(e.code, 3);
    assert!(e.message.contains("its periods: 60s, 3s"), "{}", e.message);
    assert_eq!(fail(login, &["--concurrency", "3"]).code, 3);
    assert_eq!(fail(login, &["--limit", "3s=0"]).code, 2);
    assert_eq!(fail(login, &["--limit", "3s=1000000000001"]).code, 2);
    assert_eq!(fail(api, &["--limit", "1m=160000000000"]).code, 2, "gcra: limit x period_ms > 2^53");
    assert_eq!(fail(login, &["--times", "2", "--limit", "3s=7"]).code, 2);
    assert_eq!(fail(login, &[]).code, 2);
    assert!(overrides::rule_allows_overrides(login) && overrides::rule_allows_overrides(api));
    assert!(!overrides::rule_allows_overrides(&config.rules[2]), "a rule without \"overrides\": true");
    let refused = overrides::refuse(login, false).unwrap_err();
    assert_eq!(refused.code, 3);
    assert!(refused.message.contains(r#"add "overrides": true"#), "{}", refused.message);
}

/// `(exit status, stdout, stderr)` of the binary.
fn tollgate(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_tollgate")).args(args).output().unwrap();
    let text = |b: Vec<u8>| String::from_utf8(b).unwrap();
    (out.status.code().unwrap(), text(out.stdout), text(out.stderr))
}

#[test]
fn exit_codes_without_a_store() {
    let dir = std::env::temp_dir().join(format!("tollgate-cli-ops-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("plugin.json");
    std::fs::write(
        &file,
        plugin().with(rule("login").header("x-user-id").limit(5, "3s").field(r#""overrides": true"#)).json(),
    )
    .unwrap();
    let file = file.to_str().unwrap();
    // A port nobody listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let store = format!("redis://127.0.0.1:{port}");
    let cases: &[(&[&str], i32, &str)] = &[
        (&["reset", file, "--rule", "login", "--key", "x-user-id=a"], 2, "exactly one of --store"),
        (
            &["reset", file, "--rule", "login", "--key", "x-user-id=a", "--store", &store, "--json"],
            2,
            "unknown flag --json",
        ),
        (&["inspect", file, "--key", "x-user-id=a", "--store", &store], 2, "missing --rule"),
        (&["override", "list", "/nonexistent.json", "--store", &store], 2, "/nonexistent.json"),
        (&["reset", file, "--rule", "nope", "--store", &store], 3, "the configuration's rules: login"),
        (&["reset", file, "--rule", "login", "--store", &store], 3, "--all-keys"),
        (
            &["override", "set", file, "--rule", "login", "--key", "x-user-id=a", "--limit", "9s=3", "--store", &store],
            3,
            "its periods: 3s",
        ),
        (
            &["inspect", file, "--rule", "login", "--key", "x-user=a", "--store", &store],
            3,
            "keyed by --key x-user-id=VALUE",
        ),
        (&["reset", file, "--rule", "login", "--key", "x-user-id=a", "--store", &store], 4, "cannot reach the store"),
        (&["override", "list", file, "--cluster", &format!("127.0.0.1:{port}")], 4, "cannot reach the store"),
        (
            &[
                "override",
                "rm",
                file,
                "--rule",
                "login",
                "--key",
                "x-user-id=a",
                "--sentinel",
                &format!("127.0.0.1:{port}"),
                "--master",
                "m",
            ],
            4,
            "no Sentinel gave a master",
        ),
    ];
    for (args, code, said) in cases {
        let (got, out, err) = tollgate(args);
        assert_eq!((got, out.as_str()), (*code, ""), "{args:?}: {err}");
        assert!(err.starts_with("tollgate: ") && err.lines().count() == 1, "{args:?}: {err}");
        assert!(err.contains(said), "{args:?}: {err}");
    }
    let (code, out, _) = tollgate(&["help"]);
    assert_eq!(code, 0);
    assert!(out.contains("tollgate override set FILE") && out.contains("4 store unreachable"), "{out}");
}

#[test]
fn inspect_shows_a_dry_runs_verdict_with_the_filters_headers() {
    use tollgate::cli::inspect::{checks, show, Raw};
    use tollgate::limiter::{Decision, WindowOutcome};
    let config = config();
    let b = bucket::resolve(&config, "login", &pairs(&[("x-user-id", "alice")])).unwrap();
    let checks = checks(&b);
    assert_eq!(checks.len(), 1);
    assert_eq!(checks[0].key, "tollgate:{login:alice}:log");
    let window = |window, limit, period_ms, remaining, retry_ms| WindowOutcome {
        check: 0,
        window,
        limit,
        period_ms,
        overridden: limit == 50,
        remaining,
        reset_ms: 2_100,
        retry_ms,
    };
    // What a peek reply parses into: the 3s window (overridden to 50) denies.
    let d = Decision {
        allowed: false,
        now_ms: 1_800_000_000_000,
        windows: vec![window(0, 20, 60_000, 15, 0), window(1, 50, 3_000, 0, 2_100)],
        delay_ms: 0,
    };
    let raw = Raw { window_ttl_ms: 2_100, override_fields: vec![("w3000".into(), "50".into())], ..Raw::default() };
    let text = show::text(&config, &b, &checks, &raw, Some(&d), 1_800_000_000_000);
    assert!(
        text.starts_with("bucket login x-user-id=alice\n  key tollgate:{login:alice}:log (expires in 2.1 s)\n"),
        "{text}"
    );
    assert!(
        text.contains("login/3s   50 (override; configured 5)  50    0          2.1 s      yes, retry in 2.1 s\n"),
        "{text}"
    );
    assert!(text.contains("\nnext request: denied (429) by login/3s, retry in 2.1 s\n"), "{text}");
    assert!(text.contains("  retry-after: 3\n"), "{text}");
    assert!(text.ends_with("\noverride: 3s=50 (tollgate:{login:alice}:ovr)\n"), "{text}");
    let doc: serde_json::Value = serde_json::from_str(&show::json(&config, &b, &checks, &raw, Some(&d), 0)).unwrap();
    assert_eq!(doc["next_request"]["allowed"], false);
    assert_eq!(doc["windows"][1]["overridden"], true);
    assert_eq!(doc["override"]["w3000"], "50");
}
