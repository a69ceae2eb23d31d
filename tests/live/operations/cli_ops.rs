//! `tollgate reset` and `tollgate override` through the real binary against
//! a real Valkey: one bucket reset (and nothing else), a prefix reset with
//! its dry run, an override set/list/rm round trip (the hash exactly as
//! design #42 has it), and the errors a person can act on: an ACL that
//! refuses (exit 5), a wrong password (exit 5), a store that is not there
//! (exit 4). The topologies (Cluster, Sentinel, TLS) are cli_topologies.rs.

use crate::support;

use std::path::PathBuf;
use std::process::Command;
use support::plugin::{plugin, rule};
use support::Valkey;
use tollgate::resp::Value;

/// `(exit status, stdout, stderr)` of `tollgate ARGS` with `env`.
pub fn tollgate(args: &[&str], env: &[(&str, &str)]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .args(args)
        .env_remove("TOLLGATE_STORE_PASSWORD")
        .envs(env.iter().copied())
        .output()
        .unwrap();
    let text = |b: Vec<u8>| String::from_utf8(b).unwrap();
    (out.status.code().unwrap(), text(out.stdout), text(out.stderr))
}

/// The configuration of these tests, in a scratch file: the seed's rule
/// and a hash-tagged gcra rule with a concurrency limit.
pub fn config_file(name: &str) -> PathBuf {
    let json = plugin()
        .valkey(r#""key_prefix": "tollgate""#)
        .with(rule("login").header("x-user-id").limit(20, "60s").limit(5, "3s").field(r#""overrides": true"#))
        .with(
            rule("api")
                .algorithm("gcra")
                .header("x-tenant")
                .field(r#""hash_tag": 0"#)
                .field(r#""concurrency": { "limit": 4 }"#)
                .field(r#""overrides": true"#)
                .limit(100, "1m"),
        )
        .json();
    let dir = std::env::temp_dir().join(format!("tollgate-cli-live-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("plugin.json");
    std::fs::write(&path, json).unwrap();
    path
}

fn exists(v: &Valkey, key: &str) -> bool {
    v.int(&["EXISTS", key]) == 1
}

/// State as the limiter leaves it: a log, a gcra hash, syncers, a lease set, an override.
fn seed(v: &Valkey, user: &str) {
    v.cmd(&["ZADD", &format!("tollgate:{{login:{user}}}:log"), "1", "a"]);
    v.cmd(&["HSET", &format!("tollgate:{{login:{user}}}:gcra"), "t", "1"]);
    v.cmd(&["ZADD", &format!("tollgate:{{login:{user}}}:log:syncers"), "1", "w1"]);
    v.cmd(&["HSET", &format!("tollgate:{{login:{user}}}:ovr"), "w3000", "50"]);
    v.cmd(&["SET", &format!("tollgate:{{login:{user}}}:log:flush:w1"), "t"]);
}

#[test]
fn reset_clears_one_bucket_and_nothing_else() {
    let v = Valkey::start();
    let file = config_file("one");
    let (file, store) = (file.to_str().unwrap(), format!("redis://127.0.0.1:{}", v.port));
    seed(&v, "alice");
    seed(&v, "bob");
    let (code, out, err) =
        tollgate(&["reset", file, "--rule", "login", "--key", "x-user-id=alice", "--store", &store, "--dry-run"], &[]);
    assert_eq!((code, err.as_str()), (0, ""));
    assert!(out.contains("would delete tollgate:{login:alice}:log\n"), "{out}");
    assert!(exists(&v, "tollgate:{login:alice}:log"), "a dry run deletes nothing");
    let (code, out, _) =
        tollgate(&["reset", file, "--rule", "login", "--key", "x-user-id=alice", "--store", &store], &[]);
    assert_eq!(code, 0);
    assert_eq!(
        out,
        "deleted tollgate:{login:alice}:log:syncers\ndeleted tollgate:{login:alice}:log\n\
         deleted tollgate:{login:alice}:gcra\nreset: login x-user-id=alice: 3 keys deleted\n"
    );
    for gone in ["log", "gcra", "log:syncers"] {
        assert!(!exists(&v, &format!("tollgate:{{login:alice}}:{gone}")), "{gone}");
    }
    assert!(exists(&v, "tollgate:{login:alice}:ovr"), "the override stays");
    assert!(exists(&v, "tollgate:{login:alice}:log:flush:w1"), "flush tokens stay");
    assert!(exists(&v, "tollgate:{login:bob}:log"), "another bucket stays");
    let (code, out, _) =
        tollgate(&["reset", file, "--rule", "login", "--key", "x-user-id=alice", "--store", &store], &[]);
    assert_eq!((code, out.as_str()), (0, "reset: login x-user-id=alice: the bucket holds no state\n"));
    // The lease set goes only with --leases.
    v.cmd(&["HSET", "tollgate:{t1}:api:t1:gcra", "t", "1"]);
    v.cmd(&["ZADD", "tollgate:{t1}:api:t1:lease", "99999999999999", "l1"]);
    let api = ["reset", file, "--rule", "api", "--key", "x-tenant=t1", "--store", &store];
    let (_, out, _) = tollgate(&api, &[]);
    assert!(out.ends_with("1 key deleted; the lease set is kept (--leases deletes it)\n"), "{out}");
    assert!(exists(&v, "tollgate:{t1}:api:t1:lease"));
    let (_, out, _) = tollgate(&[&api[..], &["--leases"]].concat(), &[]);
    assert_eq!(out, "deleted tollgate:{t1}:api:t1:lease\nreset: api x-tenant=t1: 1 key deleted\n");
}

#[test]
fn reset_by_prefix_lists_then_deletes_the_matching_buckets() {
    let v = Valkey::start();
    let file = config_file("prefix");
    let (file, store) = (file.to_str().unwrap(), format!("redis://127.0.0.1:{}", v.port));
    for user in ["alice", "alicia", "al%3Aice", "bob"] {
        seed(&v, user);
    }
    // 500 other keys, so that SCAN pages.
    for i in 0..500 {
        v.cmd(&["SET", &format!("other:{i}"), "x"]);
    }
    let prefix = ["reset", file, "--rule", "login", "--key-prefix", "x-user-id=ali", "--store", &store];
    let (code, out, err) = tollgate(&[&prefix[..], &["--dry-run"]].concat(), &[]);
    assert_eq!((code, err.as_str()), (0, ""));
    assert!(out.contains("would delete bucket x-user-id=alice (3):\n"), "{out}");
    assert!(out.contains("would delete bucket x-user-id=alicia (3):\n"), "{out}");
    assert!(!out.contains("bob") && !out.contains("al:ice") && !out.contains("al%3Aice"), "{out}");
    assert!(
        out.ends_with(
            "reset (dry run): rule login: 2 buckets, 6 keys would be deleted (pattern tollgate:{login:ali*}:*)\n"
        ),
        "{out}"
    );
    assert!(exists(&v, "tollgate:{login:alice}:log"));
    let (code, out, _) = tollgate(&prefix, &[]);
    assert_eq!(code, 0);
    assert!(out.ends_with("2 buckets, 6 keys deleted (pattern tollgate:{login:ali*}:*)\n"), "{out}");
    assert!(!exists(&v, "tollgate:{login:alicia}:gcra"));
    assert!(exists(&v, "tollgate:{login:al%3Aice}:log") && exists(&v, "tollgate:{login:bob}:log"));
    assert!(exists(&v, "tollgate:{login:alice}:ovr"));
    // Every bucket of the rule.
    let (code, out, _) = tollgate(&["reset", file, "--rule", "login", "--all-keys", "--store", &store], &[]);
    assert_eq!(code, 0);
    assert!(out.contains("deleted bucket x-user-id=al:ice (3):\n"), "{out}");
    assert!(out.ends_with("2 buckets, 6 keys deleted (pattern tollgate:{login:*}:*)\n"), "{out}");
    assert_eq!(v.int(&["DBSIZE"]), 500 + 4 + 4, "the other keys, the overrides and flush tokens");
}

fn hash(v: &Valkey, key: &str) -> Vec<(String, String)> {
    let Value::Array(items) = v.cmd(&["HGETALL", key]) else { panic!() };
    let text = |x: &Value| String::from_utf8(x.as_bytes().unwrap().to_vec()).unwrap();
    let mut pairs: Vec<(String, String)> = items.chunks(2).map(|c| (text(&c[0]), text(&c[1]))).collect();
    pairs.sort();
    pairs
}

#[test]
fn override_set_list_rm_round_trip() {
    let v = Valkey::start();
    let file = config_file("override");
    let (file, store) = (file.to_str().unwrap(), format!("redis://127.0.0.1:{}", v.port));
    let key = "tollgate:{login:alice}:ovr";
    let set = ["override", "set", file, "--rule", "login", "--key", "x-user-id=alice", "--store", &store];
    let (code, out, err) =
        tollgate(&[&set[..], &["--times", "10", "--for", "1h", "--note", "INC-7", "--by", "oncall"]].concat(), &[]);
    assert_eq!((code, err.as_str()), (0, ""));
    assert!(out.starts_with("override set: login x-user-id=alice\n  60s window: 200 (configured 20)\n  3s window: 50 (configured 5)\n  until "), "{out}");
    let fields = hash(&v, key);
    let get = |f: &str| fields.iter().find(|(k, _)| k == f).map(|(_, v)| v.clone()).unwrap_or_default();
    assert_eq!(
        (get("w60000"), get("w3000"), get("by"), get("note")),
        ("200".into(), "50".into(), "oncall".into(), "INC-7".into())
    );
    let (at, until): (u64, u64) = (get("at").parse().unwrap(), get("until").parse().unwrap());
    assert_eq!(until - at, 3_600_000);
    let expire_at = v.int(&["PEXPIRETIME", key]) as u64;
    assert_eq!(expire_at, until + 60_000, "PEXPIREAT until + 60 s");
    // A second set replaces the whole hash; no --for: no until, no expiry.
    let (code, _, _) = tollgate(&[&set[..], &["--limit", "3s=9"]].concat(), &[]);
    assert_eq!(code, 0);
    let fields = hash(&v, key);
    let names: Vec<&str> = fields.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(names, ["at", "by", "w3000"]);
    assert_eq!(v.int(&["PTTL", key]), -1);
    // A lease-limited, hash-tagged rule: the concurrency field.
    let api = [
        "override",
        "set",
        file,
        "--rule",
        "api",
        "--key",
        "x-tenant=t1",
        "--store",
        &store,
        "--concurrency",
        "9",
        "--until",
        "2099-01-01T00:00:00Z",
    ];
    assert_eq!(tollgate(&api, &[]).0, 0);
    assert_eq!(hash(&v, "tollgate:{t1}:api:t1:ovr").iter().find(|(k, _)| k == "c").unwrap().1, "9");
    let (code, out, _) = tollgate(&["override", "list", file, "--store", &store], &[]);
    assert_eq!(code, 0);
    let lines: Vec<&str> = out.lines().collect();
    assert!(lines[0].starts_with("rule   key              limits         until "), "{out}");
    assert!(lines[2].starts_with("login  x-user-id=alice  3s=9           never "), "{out}");
    assert!(lines[3].starts_with("api    x-tenant=t1      concurrency=9  2099-01-01T00:00:00Z "), "{out}");
    assert_eq!(lines[4], "2 overrides (keys under \"tollgate\")");
    let (_, out, _) = tollgate(&["override", "list", file, "--rule", "login", "--store", &store, "--json"], &[]);
    let doc: serde_json::Value = serde_json::from_str(&out).unwrap();
    let items = doc["overrides"].as_array().unwrap();
    assert_eq!(items.len(), 1);
    assert_eq!(items[0]["key"]["x-user-id"], "alice");
    assert_eq!(items[0]["limits"]["3s"], 9);
    assert_eq!(items[0]["store_key"], key);
    let rm = ["override", "rm", file, "--rule", "login", "--key", "x-user-id=alice", "--store", &store];
    assert_eq!(tollgate(&rm, &[]), (0, format!("override removed: login x-user-id=alice ({key})\n"), String::new()));
    assert!(!exists(&v, key));
    assert_eq!(tollgate(&rm, &[]).1, format!("no override: login x-user-id=alice ({key} does not exist)\n"));
}

#[test]
fn refusals_and_an_absent_store_are_exit_5_and_4() {
    let v = Valkey::start();
    let file = config_file("acl");
    let file = file.to_str().unwrap();
    v.cmd(&["ACL", "SETUSER", "reader", "on", ">r3ad", "~*", "+@read", "+@connection", "-@write"]);
    let reset = |store: &str, env: &[(&str, &str)]| {
        tollgate(&["reset", file, "--rule", "login", "--key", "x-user-id=a", "--store", store], env)
    };
    let (code, out, err) = reset(&format!("redis://reader:r3ad@127.0.0.1:{}", v.port), &[]);
    assert_eq!((code, out.as_str()), (5, ""), "{err}");
    assert!(err.starts_with("tollgate: the store at ") && err.contains("NOPERM") && err.lines().count() == 1, "{err}");
    // The password from the environment; a wrong one.
    let user_only = format!("redis://reader@127.0.0.1:{}", v.port);
    let (code, _, err) = reset(&user_only, &[("TOLLGATE_STORE_PASSWORD", "nope")]);
    assert_eq!(code, 5, "{err}");
    assert!(err.contains("refused the credentials") && err.contains("WRONGPASS"), "{err}");
    // Reading is allowed: list works with the environment's password.
    let (code, out, err) =
        tollgate(&["override", "list", file, "--store", &user_only], &[("TOLLGATE_STORE_PASSWORD", "r3ad")]);
    assert_eq!((code, err.as_str()), (0, ""));
    assert!(out.ends_with("0 overrides (keys under \"tollgate\")\n"), "{out}");
    let port = v.port;
    drop(v);
    let (code, _, err) = reset(&format!("redis://127.0.0.1:{port}"), &[]);
    assert_eq!(code, 4, "{err}");
    assert_eq!(
        err,
        format!("tollgate: cannot reach the store at 127.0.0.1:{port}: Connection refused (os error 111)\n")
    );
}
