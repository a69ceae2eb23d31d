//! Configuration fixtures.
//!
//! * `tests/fixtures/config/invalid/<case>.json` must be rejected, and the
//!   error's `Display` must equal `<case>.expected` exactly (one trailing
//!   newline in the `.expected` file is ignored).
//! * `tests/fixtures/config/valid/*.json` must parse; a few are also checked
//!   value by value.
//!
//! These read files, so they run on the host only.
#![cfg(not(target_arch = "wasm32"))]

use std::fs;
use std::num::NonZeroU64;
use std::path::{Path, PathBuf};
use std::time::Duration;

use tollgate::config::{Config, FailureMode, KeyPart};

fn fixture_dir(kind: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/config").join(kind)
}

/// Every `*.json` in a fixture directory, sorted; panics if there are none.
fn json_files(kind: &str) -> Vec<PathBuf> {
    let dir = fixture_dir(kind);
    let mut files: Vec<PathBuf> = fs::read_dir(&dir)
        .unwrap_or_else(|err| panic!("cannot read {}: {err}", dir.display()))
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "json"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no *.json fixtures in {}", dir.display());
    files
}

fn parse_file(path: &Path) -> Result<Config, tollgate::config::ConfigError> {
    Config::from_json(&fs::read(path).unwrap())
}

fn parse_valid(name: &str) -> Config {
    let path = fixture_dir("valid").join(name);
    parse_file(&path).unwrap_or_else(|err| panic!("{}: {err}", path.display()))
}

#[test]
fn invalid_fixtures_fail_with_the_expected_message() {
    let mut failures = Vec::new();
    let files = json_files("invalid");
    for json in &files {
        let expected_path = json.with_extension("expected");
        let expected = fs::read_to_string(&expected_path)
            .unwrap_or_else(|err| panic!("{} has no {}: {err}", json.display(), expected_path.display()));
        let expected = expected.strip_suffix('\n').map(|e| e.strip_suffix('\r').unwrap_or(e)).unwrap_or(&expected);
        match parse_file(json) {
            Ok(_) => failures.push(format!("{}: parsed, expected {expected:?}", json.display())),
            Err(err) if err.to_string() == expected => {}
            Err(err) => failures.push(format!(
                "{}:\n    expected {expected:?}\n    got      {:?}",
                json.display(),
                err.to_string()
            )),
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} invalid fixtures failed:\n{}",
        failures.len(),
        files.len(),
        failures.join("\n")
    );
}

#[test]
fn every_expected_file_has_its_json() {
    let dir = fixture_dir("invalid");
    for entry in fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let ext = path.extension().and_then(|e| e.to_str()).unwrap_or("");
        match ext {
            "json" => {}
            "expected" => assert!(path.with_extension("json").is_file(), "{} has no .json", path.display()),
            _ => panic!("unexpected file {}", path.display()),
        }
    }
}

#[test]
fn valid_fixtures_parse() {
    for path in json_files("valid") {
        if let Err(err) = parse_file(&path) {
            panic!("{}: {err}", path.display());
        }
    }
}

#[test]
fn example_fixture_values() {
    let config = parse_valid("example.json");
    assert_eq!(config.valkey.cluster, "tollgate_valkey");
    assert_eq!(config.valkey.timeout, Duration::from_millis(100));
    assert_eq!(config.valkey.key_prefix, "tollgate");
    assert_eq!(config.failure_mode, FailureMode::Allow);
    assert_eq!(config.rules.len(), 1);
    let rule = &config.rules[0];
    assert_eq!(rule.name, "auth.createToken");
    assert_eq!(rule.matcher.path_prefix.as_deref(), Some("/auth/token"));
    assert_eq!(rule.matcher.methods, ["POST"]);
    assert_eq!(rule.key, [KeyPart::header("x-user-id")]);
    let windows: Vec<(u64, u64, &str)> =
        rule.limits.iter().map(|l| (l.limit.get(), l.period.ms().get(), l.period.label())).collect();
    assert_eq!(windows, [(20, 60_000, "60s"), (5, 3_000, "3s")]);
    assert_eq!(config.testing.now_header.as_deref(), Some("x-tollgate-test-now-ms"));
}

#[test]
fn minimal_fixture_defaults() {
    let config = parse_valid("minimal.json");
    assert_eq!(config.valkey.cluster, "tollgate_valkey");
    assert_eq!(config.valkey.timeout, Duration::from_millis(100));
    assert_eq!(config.valkey.key_prefix, "tollgate");
    assert_eq!(config.failure_mode, FailureMode::Allow);
    assert_eq!(config.testing.now_header, None);
    let rule = &config.rules[0];
    assert_eq!(rule.name, "everything");
    assert_eq!(rule.matcher.path_prefix, None);
    assert!(rule.matcher.methods.is_empty());
    assert!(rule.key.is_empty());
    assert_eq!(rule.limits.len(), 1);
    assert_eq!(rule.limits[0].limit, NonZeroU64::new(100).unwrap());
    assert_eq!(rule.limits[0].period.ms().get(), 1_000);
    assert_eq!(rule.limits[0].period.label(), "1s");
}

#[test]
fn integer_periods_fixture_values() {
    let config = parse_valid("integer-periods.json");
    assert_eq!(config.valkey.timeout, Duration::from_secs(2));
    assert_eq!(config.failure_mode, FailureMode::Deny);
    let periods = |i: usize| -> Vec<(u64, String)> {
        config.rules[i].limits.iter().map(|l| (l.period.ms().get(), l.period.label().to_owned())).collect()
    };
    assert_eq!(periods(0), [(1_000, "1s".to_owned()), (60_000, "60s".to_owned()), (86_400_000, "86400s".to_owned())]);
    assert_eq!(
        periods(1),
        [
            (250, "250ms".to_owned()),
            (600_000, "10m".to_owned()),
            (3_600_000, "1h".to_owned()),
            (86_400_000, "1d".to_owned())
        ]
    );
    let rule = &config.rules[1];
    assert_eq!(rule.matcher.methods, ["GET", "HEAD"]);
    assert_eq!(rule.key, [KeyPart::header(":authority"), KeyPart::header("x-api-key")]);
}

#[test]
fn shape_fixture_values_and_defaults() {
    let config = parse_valid("shape.json");
    let shaping: Vec<_> = config.rules.iter().map(|r| r.shaping.map(|s| (s.max_delay_ms, s.max_waiting))).collect();
    assert_eq!(shaping, [Some((2_000, 256)), Some((30_000, tollgate::config::DEFAULT_MAX_WAITING))]);
    assert_eq!(parse_valid("minimal.json").rules[0].shaping, None);
}
