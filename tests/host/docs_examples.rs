//! Every JSON example in docs/configuration.md and README.md parses with the
//! real configuration parser and passes the JSON Schema
//! (`schema/tollgate.schema.json`). Fences: `json` = a whole configuration,
//! `json rule` = one rule, `json match` = one match object, `json key` = one
//! key part (wrapped into a minimal configuration before parsing).

use crate::plugin;

use plugin::plugin;
use tollgate::config::Config;

/// `(info string, body, line)` of every fenced block whose info starts with `json`.
fn json_blocks(text: &str) -> Vec<(String, String, usize)> {
    let mut out = Vec::new();
    let mut current: Option<(String, String, usize)> = None;
    for (n, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        match (&mut current, trimmed.strip_prefix("```")) {
            (None, Some(info)) if info.starts_with("json") => {
                current = Some((info.trim().to_owned(), String::new(), n + 1))
            }
            (Some(_), Some("")) => out.extend(current.take()),
            (Some((_, body, _)), _) => {
                body.push_str(line);
                body.push('\n');
            }
            _ => {}
        }
    }
    assert!(current.is_none(), "unclosed code fence");
    out
}

/// The fenced example as a whole configuration: a rule, a match or a key part
/// goes into a rule of its own (written as JSON: its period is a number).
fn wrap(info: &str, body: &str) -> String {
    let rule = |r: &str| plugin().cluster("c").rule_json(r).json();
    match info {
        "json" => body.to_owned(),
        "json rule" => rule(body),
        "json match" => {
            rule(&format!(r#"{{ "name": "r", "match": {body}, "limits": [ {{ "limit": 1, "period": 1 }} ] }}"#))
        }
        "json key" => {
            rule(&format!(r#"{{ "name": "r", "key": [ {body} ], "limits": [ {{ "limit": 1, "period": 1 }} ] }}"#))
        }
        other => panic!("unknown fence info {other:?}"),
    }
}

fn check(file: &str, minimum: usize) {
    let text = std::fs::read_to_string(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(file)).unwrap();
    let blocks = json_blocks(&text);
    assert!(blocks.len() >= minimum, "{file}: only {} JSON examples found", blocks.len());
    let schema = jsonschema::validator_for(&tollgate::config::schema::json_schema()).unwrap();
    let failures: Vec<String> = blocks
        .iter()
        .filter_map(|(info, body, line)| {
            let doc = wrap(info, body);
            if let Err(e) = Config::from_json(doc.as_bytes()) {
                return Some(format!("{file}:{line} ({info}): {e}"));
            }
            let value: serde_json::Value = serde_json::from_str(&doc).unwrap();
            let errors: Vec<String> =
                schema.iter_errors(&value).map(|e| format!("{}: {e}", e.instance_path())).collect();
            (!errors.is_empty()).then(|| format!("{file}:{line} ({info}): schema: {}", errors.join("; ")))
        })
        .collect();
    assert!(failures.is_empty(), "examples that do not parse:\n{}", failures.join("\n"));
}

#[test]
fn configuration_reference_examples_parse() {
    check("docs/configuration.md", 25);
}

#[test]
fn readme_examples_parse() {
    check("README.md", 1);
}

#[test]
fn a_broken_example_would_be_caught() {
    let blocks = json_blocks("text\n```json key\n{ \"header\": \"\" }\n```\n");
    assert_eq!(blocks.len(), 1);
    let doc = wrap(&blocks[0].0, &blocks[0].1);
    assert!(Config::from_json(doc.as_bytes()).is_err());
    let schema = jsonschema::validator_for(&tollgate::config::schema::json_schema()).unwrap();
    assert!(!schema.is_valid(&serde_json::from_str(&doc).unwrap()), "the schema rejects it too");
}
