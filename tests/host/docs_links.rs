//! The documentation names only what exists: in README.md and every
//! `docs/**/*.md`, each relative link (`[text](path#anchor)`, or a reference
//! `[name]: path`) resolves from the file's folder, and each repository path
//! written as inline code (`` `src/...` ``, `` `tests/...` ``, ...) resolves
//! from the root. Fenced code blocks are commands and output, not checked;
//! neither are globs and placeholders (`*`, `<case>`, `{a,b}`).

use std::path::{Path, PathBuf};

/// The folders whose paths inline code is taken to name.
const ROOTS: [&str; 10] =
    ["src/", "tests/", "scripts/", "envoy/", "docs/", "examples/", "schema/", "fuzz/", "models/", ".ci/"];

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// README.md and the Markdown files under docs/.
fn documents() -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "md") {
                out.push(path);
            }
        }
    }
    let mut out = vec![root().join("README.md")];
    walk(&root().join("docs"), &mut out);
    out.sort();
    out
}

/// `(line, text)` of the lines outside fenced code blocks.
fn prose(text: &str) -> Vec<(usize, &str)> {
    let mut fenced = false;
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
        } else if !fenced {
            out.push((n + 1, line));
        }
    }
    out
}

/// Link targets of a line: inline `](target)` and reference `[name]: target`.
fn link_targets(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = line;
    while let Some(at) = rest.find("](") {
        let after = &rest[at + 2..];
        let Some(end) = after.find(')') else { break };
        out.push(after[..end].to_string());
        rest = &after[end..];
    }
    let trimmed = line.trim_start();
    if let Some(label_end) = trimmed.strip_prefix('[').and_then(|t| t.find("]:")) {
        out.push(trimmed[label_end + 3..].trim().to_string());
    }
    out
}

/// The path a link target names in the repository, if it is relative.
fn relative_path(target: &str) -> Option<&str> {
    let target = target.trim();
    let target = match target.strip_prefix('<') {
        Some(bracketed) => bracketed.split('>').next()?,
        None => target.split_whitespace().next()?,
    };
    let path = target.split('#').next()?;
    let external = target.contains("://") || target.starts_with("mailto:");
    (!external && !path.is_empty()).then_some(path)
}

/// Inline code spans of a line.
fn code_spans(line: &str) -> Vec<&str> {
    line.split('`').skip(1).step_by(2).collect()
}

/// The repository path an inline code span names, if it names one.
fn repository_path(span: &str) -> Option<&str> {
    let span = span.trim();
    let named = ROOTS.iter().any(|r| span.starts_with(r));
    let placeholder = span.contains(|c: char| c.is_whitespace() || "*<>{}[]|$…".contains(c)) || span.contains("...");
    if !named || placeholder {
        return None;
    }
    // `src/x.rs:42`, `docs/a.md#section`: the file.
    span.split([':', '#']).next()
}

#[test]
fn every_relative_link_and_named_path_in_the_docs_exists() {
    let mut missing = Vec::new();
    let mut checked = 0;
    for doc in documents() {
        let text = std::fs::read_to_string(&doc).unwrap();
        let name = doc.strip_prefix(root()).unwrap().display().to_string();
        for (n, line) in prose(&text) {
            for target in link_targets(line) {
                let Some(path) = relative_path(&target) else { continue };
                checked += 1;
                if !doc.parent().unwrap().join(path).exists() {
                    missing.push(format!("{name}:{n}: link ({target})"));
                }
            }
            for span in code_spans(line) {
                let Some(path) = repository_path(span) else { continue };
                checked += 1;
                if !root().join(path).exists() {
                    missing.push(format!("{name}:{n}: `{span}`"));
                }
            }
        }
    }
    assert!(checked > 50, "only {checked} links and paths found: is the parsing right?");
    assert!(
        missing.is_empty(),
        "{} of {checked} named in the docs do not exist:\n{}",
        missing.len(),
        missing.join("\n")
    );
}

#[test]
fn the_checker_reads_links_paths_and_placeholders() {
    assert_eq!(link_targets("see [a](docs/a.md#x) and [b](https://e.org)"), ["docs/a.md#x", "https://e.org"]);
    assert_eq!(link_targets("[ref]: ../src/lib.rs"), ["../src/lib.rs"]);
    assert_eq!(relative_path("docs/a.md#x"), Some("docs/a.md"));
    assert_eq!(relative_path("<docs/a b.md>"), Some("docs/a b.md"));
    assert_eq!(relative_path("docs/a.md \"title\""), Some("docs/a.md"));
    assert_eq!(relative_path("#section"), None);
    assert_eq!(relative_path("https://e.org/x"), None);
    assert_eq!(code_spans("`src/a.rs` and `make test`, `tests/`"), ["src/a.rs", "make test", "tests/"]);
    assert_eq!(repository_path("src/worker/mod.rs:42"), Some("src/worker/mod.rs"));
    assert_eq!(repository_path("tests/fixtures/config/invalid/<case>.json"), None);
    assert_eq!(repository_path("envoy/*.yaml"), None);
    assert_eq!(repository_path("cargo test"), None);
    assert_eq!(prose("a\n```\n`src/x`\n```\nb").iter().map(|l| l.1).collect::<Vec<_>>(), ["a", "b"]);
}
