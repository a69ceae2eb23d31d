//! `AUTH` through Envoy against real Valkey processes: a server with
//! `--requirepass`, an ACL user holding only the commands the script needs,
//! and wrong passwords under both failure modes (counted as `auth`, logged
//! once, never a silent pass). The password reaches the VM through
//! `vm_config.environment_variables.key_values`.

use crate::support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;
use support::load::{self, Plan, Request};
use support::plugin::{plugin, rule};
use support::{Envoy, EnvoyOptions, Valkey};
use tollgate::resp::{decode_all, encode_command, Limits, Value};

const ADMIN_PASSWORD: &str = "admin-pw";
/// Every command the limiter runs, plus `FCALL` and `FUNCTION LOAD` to run
/// it (`invoke: fcall`, the default): the smallest ACL that decides every
/// algorithm.
const LIMITER_ACL: &[&str] = &[
    "on",
    ">limiter-pw",
    "~tollgate:*",
    "+fcall",
    "+function|load",
    "+time",
    "+zadd",
    "+zcount",
    "+zrangebyscore",
    "+zremrangebyscore",
    "+hmget",
    "+hset",
    "+pexpire",
];

/// Commands on one connection after `AUTH`; returns every reply.
fn authed(port: u16, auth: &[&str], args: &[&str]) -> Vec<Value> {
    let mut out = Vec::new();
    let mut auth_cmd: Vec<&[u8]> = vec![b"AUTH"];
    auth_cmd.extend(auth.iter().map(|a| a.as_bytes()));
    encode_command(&mut out, &auth_cmd);
    encode_command(&mut out, &args.iter().map(|a| a.as_bytes()).collect::<Vec<_>>());
    let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    stream.write_all(&out).unwrap();
    stream.shutdown(std::net::Shutdown::Write).unwrap();
    let mut buf = Vec::new();
    stream.read_to_end(&mut buf).unwrap();
    decode_all(&buf, &Limits::default()).unwrap()
}

/// A Valkey whose default user needs `ADMIN_PASSWORD` (set after start:
/// the helper polls readiness with an unauthenticated `PING`).
fn protected() -> Valkey {
    let valkey = Valkey::start();
    assert_eq!(valkey.cmd(&["CONFIG", "SET", "requirepass", ADMIN_PASSWORD]), Value::Simple(b"OK".to_vec()));
    valkey
}

fn config(failure_mode: &str, username: Option<&str>) -> String {
    let mut config = plugin().timeout("500ms");
    if let Some(user) = username {
        config = config.valkey(&format!(r#""username": "{user}""#));
    }
    config
        .valkey(r#""password_env": "TOLLGATE_VALKEY_PASSWORD""#)
        .failure_mode(failure_mode)
        .with(rule("api").header("x-user-id").limit(5, "60s"))
        .with(rule("burst").algorithm("gcra").header("x-user-id").limit(50, "60s"))
        .json()
}

/// Envoy with `password` in the VM's environment (`None`: not provided).
fn envoy(valkey: &Valkey, plugin_config: String, password: Option<&str>) -> Result<Envoy, String> {
    let options = EnvoyOptions { plugin_config, valkey_port: valkey.port, concurrency: 1 };
    let password = password.map(str::to_string);
    Envoy::try_start_edited(&options, &move |text| match &password {
        None => text,
        Some(pw) => with_vm_env(&text, "TOLLGATE_VALKEY_PASSWORD", pw),
    })
}

/// Adds `environment_variables.key_values` to the Wasm `vm_config`.
fn with_vm_env(text: &str, name: &str, value: &str) -> String {
    let mut out = String::new();
    for line in text.lines() {
        out.push_str(line);
        out.push('\n');
        if line.trim() == "runtime: envoy.wasm.runtime.v8" {
            let indent = &line[..line.len() - line.trim_start().len()];
            out.push_str(&format!("{indent}environment_variables: {{ key_values: {{ {name}: \"{value}\" }} }}\n"));
        }
    }
    out
}

fn stat(envoy: &Envoy, name: &str) -> u64 {
    envoy.stat(&format!("wasmcustom.tollgate.{name}")).unwrap_or(0)
}

/// The seed's first seconds: 5 of 6 admitted for one user, with headers.
fn assert_limits(envoy: &Envoy, user: &str) {
    let statuses: Vec<u16> = (0..6).map(|_| envoy.request("GET", "/", &[("x-user-id", user)]).status).collect();
    assert_eq!(statuses, [200, 200, 200, 200, 200, 429], "{user}");
    assert_eq!(stat(envoy, "store.errors"), 0);
}

#[test]
fn requirepass_with_the_right_password_limits() {
    let valkey = protected();
    let envoy = envoy(&valkey, config("deny", None), Some(ADMIN_PASSWORD)).unwrap();
    assert_limits(&envoy, "alice");
    let count = authed(valkey.port, &[ADMIN_PASSWORD], &["ZCARD", "tollgate:{api:alice}:log"]);
    assert_eq!(count, [Value::Simple(b"OK".to_vec()), Value::Integer(5)]);
    assert!(!envoy.log_text().contains(ADMIN_PASSWORD), "the password is never logged");
}

#[test]
fn an_acl_user_with_only_the_script_commands_limits() {
    let valkey = protected();
    let mut setuser = vec!["ACL", "SETUSER", "limiter"];
    setuser.extend_from_slice(LIMITER_ACL);
    assert_eq!(authed(valkey.port, &[ADMIN_PASSWORD], &setuser)[1], Value::Simple(b"OK".to_vec()));
    let envoy = envoy(&valkey, config("deny", Some("limiter")), Some("limiter-pw")).unwrap();
    assert_limits(&envoy, "alice");
    // Both algorithms' keys were written, by the ACL user.
    for key in ["tollgate:{api:alice}:log", "tollgate:{burst:alice}:gcra"] {
        assert_eq!(authed(valkey.port, &[ADMIN_PASSWORD], &["EXISTS", key])[1], Value::Integer(1), "{key}");
    }
    // One command fewer and the script fails (an ACL failure inside a script
    // is an `-ERR`, counted as `script`): the set above is the minimum.
    authed(valkey.port, &[ADMIN_PASSWORD], &["ACL", "SETUSER", "limiter", "-pexpire"]);
    let r = envoy.request("GET", "/", &[("x-user-id", "bob")]);
    assert_eq!(r.status, 503);
    assert_eq!(stat(&envoy, "store.errors.script"), 1);
}

/// An ACL written for scripts (`EVALSHA`/`EVAL`, no `FUNCTION LOAD`): the
/// refused load is logged once and the worker calls the script from then
/// on, so limiting works without a configuration change.
#[test]
fn an_acl_that_allows_only_scripts_falls_back_to_the_script() {
    let valkey = protected();
    let mut setuser = vec!["ACL", "SETUSER", "limiter"];
    setuser.extend(LIMITER_ACL.iter().filter(|p| !p.starts_with("+f")));
    setuser.extend(["+evalsha", "+eval"]);
    assert_eq!(authed(valkey.port, &[ADMIN_PASSWORD], &setuser)[1], Value::Simple(b"OK".to_vec()));
    let envoy = envoy(&valkey, config("deny", Some("limiter")), Some("limiter-pw")).unwrap();
    assert_limits(&envoy, "alice");
    assert_eq!(stat(&envoy, "store.errors"), 0, "the refused load failed no request");
    let line = "function library cannot be used (NOPERM";
    support::wait_until("the refusal to be logged", Duration::from_secs(30), || envoy.log_text().contains(line));
    assert_eq!(envoy.log_text().matches(line).count(), 1, "logged once");
}

/// 20 requests with a wrong password: none decided, all counted as `auth`,
/// one log line, and `failure_mode` decides each.
fn wrong_password(failure_mode: &str, username: Option<&str>) {
    let valkey = protected();
    if let Some(user) = username {
        let mut setuser = vec!["ACL", "SETUSER", user];
        setuser.extend_from_slice(LIMITER_ACL);
        authed(valkey.port, &[ADMIN_PASSWORD], &setuser);
    }
    let envoy = envoy(&valkey, config(failure_mode, username), Some("not-the-password")).unwrap();
    let report =
        load::run(envoy.port, Plan::closed(2, 10), load::repeat(Request::new("GET", "/", &[("x-user-id", "alice")])));
    println!("{}", report.summary("wrong password"));
    assert_eq!(report.decided(), 0);
    for s in &report.samples {
        match failure_mode {
            "allow" => assert_eq!(s.status(), Some(200), "{s:?}"),
            _ => assert_eq!((s.status(), s.header("retry-after")), (Some(503), Some("1")), "{s:?}"),
        }
    }
    let kinds = support::admin_get(envoy.admin_port, "/stats?filter=store.errors").unwrap().body;
    println!("{}", String::from_utf8_lossy(&kinds));
    assert_eq!(stat(&envoy, "store.errors.auth"), 20);
    assert_eq!(stat(&envoy, "store.errors"), 20, "no other kind");
    let (allowed, denied) = (stat(&envoy, "failure_mode.allowed"), stat(&envoy, "failure_mode.denied"));
    assert_eq!((allowed, denied), if failure_mode == "allow" { (20, 0) } else { (0, 20) });
    // Nothing was written: the scripts after the failed AUTH met NOAUTH.
    assert_eq!(authed(valkey.port, &[ADMIN_PASSWORD], &["DBSIZE"])[1], Value::Integer(0));
    support::wait_until("the failure to be logged", Duration::from_secs(30), || envoy.log_text().contains("WRONGPASS"));
    let log = envoy.log_text();
    let lines: Vec<&str> = log.lines().filter(|l| l.contains("tollgate: store error reply")).collect();
    assert_eq!(lines.len(), 1, "logged once: {lines:#?}");
    assert!(lines[0].contains("WRONGPASS invalid username-password pair"), "{}", lines[0]);
    assert!(!log.contains("not-the-password"), "the password is never logged");
}

#[test]
fn a_wrong_password_is_counted_and_passes_under_allow() {
    wrong_password("allow", None);
}

#[test]
fn a_wrong_acl_password_is_counted_and_denied_under_deny() {
    wrong_password("deny", Some("limiter"));
}

#[test]
fn a_missing_password_variable_refuses_the_configuration() {
    let valkey = protected();
    let log = match envoy(&valkey, config("allow", None), None) {
        Ok(_) => panic!("Envoy started without the password variable"),
        Err(log) => log,
    };
    assert!(
        log.contains(r#"valkey.password_env: environment variable "TOLLGATE_VALKEY_PASSWORD" is not set"#),
        "{log}"
    );
}
