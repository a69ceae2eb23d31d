//! The split of `tests/` between `make unit` and `make integration`, read from
//! what make would run (`make -n`): every test target of the crate runs in
//! exactly one of them, and the ones `make unit` runs are pure: they start no
//! Envoy or Valkey (`tests/support`) and need no built module
//! and nothing from `.tools/`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)]

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn run(program: &str, args: &[&str]) -> String {
    let out = Command::new(program)
        .args(args)
        .current_dir(root())
        .env_remove("MAKEFLAGS")
        .env_remove("MAKELEVEL")
        .output()
        .unwrap_or_else(|e| panic!("{program}: {e}"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{program} {args:?} failed:\n{stderr}");
    String::from_utf8(out.stdout).unwrap()
}

/// The `--test` names of the `cargo test` commands `make -n target` prints.
fn run_by(target: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let printed = run("make", &["-n", "--no-print-directory", target]);
    for line in printed.lines().filter(|l| l.trim_start().starts_with("cargo test")) {
        let words: Vec<&str> = line.split_whitespace().collect();
        names.extend(words.windows(2).filter(|w| w[0] == "--test").map(|w| w[1].to_string()));
    }
    names
}

/// Cargo's integration-test targets and their source files.
fn test_targets() -> Vec<(String, PathBuf)> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    let metadata: serde_json::Value =
        serde_json::from_str(&run(&cargo, &["metadata", "--no-deps", "--format-version", "1"])).unwrap();
    let targets = metadata["packages"][0]["targets"].as_array().unwrap();
    targets
        .iter()
        .filter(|t| t["kind"].as_array().unwrap().iter().any(|k| k == "test"))
        .map(|t| (t["name"].as_str().unwrap().to_string(), PathBuf::from(t["src_path"].as_str().unwrap())))
        .collect()
}

#[test]
fn every_test_file_runs_in_unit_or_in_integration_never_both() {
    let (unit, integration) = (run_by("unit"), run_by("integration"));
    let all: BTreeSet<String> = test_targets().into_iter().map(|(name, _)| name).collect();
    assert!(all.len() > 10, "cargo lists {all:?}");
    let both: Vec<&String> = unit.intersection(&integration).collect();
    assert!(both.is_empty(), "run by make unit and by make integration: {both:?}");
    let run: BTreeSet<String> = unit.union(&integration).cloned().collect();
    assert_eq!(run, all, "make unit runs {unit:?}, make integration {integration:?}");
    for name in ["config_fixtures", "resp_properties", "test_split"] {
        assert!(unit.contains(name), "{name} is pure: make unit runs it");
    }
    assert!(integration.contains("e2e"), "{integration:?}");
}

#[test]
fn the_files_make_unit_runs_start_no_process_of_the_integration_tests() {
    let unit = run_by("unit");
    let this = env!("CARGO_CRATE_NAME");
    let mut checked = 0;
    for (name, path) in test_targets().into_iter().filter(|(name, _)| unit.contains(name) && name != this) {
        let text = std::fs::read_to_string(&path).unwrap();
        for needle in ["mod support", "TOLLGATE_ENVOY", "TOLLGATE_VALKEY", "TOLLGATE_WASM", ".tools/"] {
            assert!(!text.contains(needle), "{name} ({}) is run by make unit but names {needle:?}", path.display());
        }
        checked += 1;
    }
    assert_eq!(checked, unit.len() - 1, "every file of make unit but this one: {unit:?}");
}
