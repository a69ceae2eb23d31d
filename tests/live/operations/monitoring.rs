//! monitoring/: `promtool check rules` and `promtool test rules` on the alert
//! rules, then a real Prometheus (Debian's, `make prometheus`) scraping a
//! real Envoy with tollgate through a short load that admits, denies,
//! overloads and then loses its store: every expression of the alert rules
//! and of the Grafana dashboard returns data, each alert's condition holds
//! (but the cluster undo failures', which needs a Valkey Cluster losing an
//! undo: its signal returns data, 0).

use crate::support;

use serde::Deserialize;
use serde_json::Value as Json;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;
use support::load::{self, Plan, Request};
use support::plugin::{plugin, rule};
use support::{free_port, repo_root, wait_until, Envoy, EnvoyOptions, Valkey};

const PROMETHEUS: &str = "/usr/bin/prometheus";
const PROMTOOL: &str = "/usr/bin/promtool";
/// The alerts whose condition this test cannot produce with one Valkey.
const NOT_PRODUCED: &[&str] = &["TollgateClusterUndoFailed"];

fn monitoring(file: &str) -> PathBuf {
    repo_root().join("monitoring").join(file)
}

fn installed(bin: &str) -> &str {
    assert!(Path::new(bin).exists(), "{bin} is missing: make prometheus (Debian's prometheus package)");
    bin
}

#[test]
fn promtool_checks_and_unit_tests_the_alert_rules() {
    for (what, file) in [("check", "tollgate-alerts.yml"), ("test", "tollgate-alerts.test.yml")] {
        let out = Command::new(installed(PROMTOOL))
            .args([what, "rules"])
            .arg(monitoring(file))
            .current_dir(monitoring(""))
            .output()
            .unwrap();
        let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(out.status.success(), "promtool {what} rules {file}:\n{text}");
        assert!(text.contains("SUCCESS"), "{text}");
    }
}

/// `(alert, expr)` of every rule of monitoring/tollgate-alerts.yml.
fn alerts() -> Vec<(String, String)> {
    let text = std::fs::read_to_string(monitoring("tollgate-alerts.yml")).unwrap();
    let doc = Json::deserialize(serde_norway::Deserializer::from_str(&text)).unwrap();
    let rules = doc["groups"].as_array().unwrap().iter().flat_map(|g| g["rules"].as_array().unwrap().iter());
    rules.map(|r| (r["alert"].as_str().unwrap().to_owned(), r["expr"].as_str().unwrap().to_owned())).collect()
}

/// `(panel title, expr)` of every target of the dashboard, its `$instance`
/// variable at "All" (`.+`).
fn dashboard() -> Vec<(String, String)> {
    let text = std::fs::read_to_string(monitoring("tollgate-dashboard.json")).unwrap();
    let doc: Json = serde_json::from_str(&text).unwrap();
    let mut out = Vec::new();
    for panel in doc["panels"].as_array().unwrap() {
        for target in panel["targets"].as_array().unwrap() {
            let expr = target["expr"].as_str().unwrap().replace("$instance", ".+");
            assert!(!expr.contains('$') || expr.contains("\"$1\""), "an unknown variable: {expr}");
            out.push((panel["title"].as_str().unwrap().to_owned(), expr));
        }
    }
    out
}

/// A Prometheus on a free loopback port, scraping Envoy's admin every
/// second, with the alert rules loaded; its storage in a temp dir.
struct Prometheus {
    port: u16,
    child: Child,
    dir: PathBuf,
}

impl Prometheus {
    fn start(admin_port: u16) -> Prometheus {
        let dir = std::env::temp_dir().join(format!("tollgate-prometheus-{}-{admin_port}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let config = format!(
            "global: {{ scrape_interval: 1s, evaluation_interval: 1s }}\n\
             rule_files: [ {:?} ]\n\
             scrape_configs:\n\
             - job_name: envoy\n  metrics_path: /stats/prometheus\n\
             \x20 static_configs: [ {{ targets: [ \"127.0.0.1:{admin_port}\" ] }} ]\n",
            monitoring("tollgate-alerts.yml").display().to_string()
        );
        std::fs::write(dir.join("prometheus.yml"), config).unwrap();
        let port = free_port();
        let child = Command::new(installed(PROMETHEUS))
            .arg(format!("--config.file={}", dir.join("prometheus.yml").display()))
            .arg(format!("--storage.tsdb.path={}", dir.join("data").display()))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join("prometheus.log")).unwrap())
            .spawn()
            .unwrap();
        let prometheus = Prometheus { port, child, dir };
        wait_until("Prometheus ready", Duration::from_secs(30), || {
            support::http(port, "GET", "/-/ready", &[]).is_ok_and(|r| r.status == 200)
        });
        prometheus
    }

    /// The instant vector `expr` evaluates to now.
    fn query(&self, expr: &str) -> Vec<Json> {
        let path = format!("/api/v1/query?query={}", percent_encode(expr));
        let resp = support::http(self.port, "GET", &path, &[]).unwrap();
        let body: Json = serde_json::from_slice(&resp.body).unwrap();
        assert_eq!(body["status"], "success", "{expr}: {body}");
        assert_eq!(body["data"]["resultType"], "vector", "{expr}");
        body["data"]["result"].as_array().unwrap().clone()
    }

    /// Polls `expr` until it returns a sample that `ok` accepts.
    fn until(&self, what: &str, expr: &str, ok: impl Fn(f64) -> bool) -> Vec<Json> {
        let mut last = Vec::new();
        wait_until(&format!("{what}: {expr} (last: {last:?})"), Duration::from_secs(60), || {
            last = self.query(expr);
            last.iter().any(|s| s["value"][1].as_str().and_then(|v| v.parse().ok()).is_some_and(&ok))
        });
        last
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

fn percent_encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[test]
fn every_alert_and_dashboard_expression_returns_data() {
    let mut valkey = Valkey::start();
    // One decision in flight per worker and one waiting: concurrent clients
    // overload it; 5 per 10 s per user: denials.
    let config = plugin()
        .failure_mode("allow")
        .valkey(r#""max_in_flight": 2"#)
        .valkey(r#""max_queue": 1"#)
        .with(rule("api.calls").header("x-user").limit(5, "10s"));
    let envoy = Envoy::start(&EnvoyOptions { plugin_config: config.json(), valkey_port: valkey.port, concurrency: 2 });
    let prometheus = Prometheus::start(envoy.admin_port);
    prometheus.until("the first scrape", "tollgate_store_messages", |_| true);

    let request = |_: usize, i: usize| Request::new("GET", "/", &[("x-user", &format!("user-{}", i % 8))]);
    let stat = |name: &str| envoy.stat(&format!("wasmcustom.tollgate.{name}")).unwrap_or(0);
    // One request at a time until both workers have their stream (a
    // request that finds none opening would have no queue to wait in).
    wait_until("a store stream on each worker", Duration::from_secs(20), || {
        envoy.request("GET", "/", &[("x-user", "warm-up")]);
        stat("stream.opens") >= 2
    });
    let report = load::run(envoy.port, Plan::keep_alive(8, 60), Arc::new(request));
    eprintln!("{}", report.summary("with the store"));
    assert!(stat("rule.api.calls.allowed") > 0 && stat("rule.api.calls.denied") > 0, "admitted and denied");
    assert!(stat("overloaded") > 0, "8 clients on 2 workers, each worker with room for 2");
    // The store gone: store errors, failure_mode: allow, stream resets (new
    // users: the denied ones are answered from the denial cache).
    valkey.stop();
    let request = |t: usize, i: usize| Request::new("GET", "/", &[("x-user", &format!("later-{t}-{i}"))]);
    let report = load::run(envoy.port, Plan::closed(2, 20), Arc::new(request));
    eprintln!("{}", report.summary("without the store"));
    assert!(stat("failure_mode.allowed") > 0 && stat("store.errors") > 0);

    for (alert, expr) in alerts() {
        let signal = expr.trim_end().strip_suffix("> 0").unwrap_or_else(|| panic!("{alert}: not `... > 0`"));
        let got = if NOT_PRODUCED.contains(&alert.as_str()) {
            prometheus.until(&alert, signal, |v| v == 0.0)
        } else {
            prometheus.until(&alert, &expr, |v| v > 0.0)
        };
        eprintln!("alert {alert}: {}", Json::from(got));
    }
    for (title, expr) in dashboard() {
        // A number: the round trip's quantiles too (Envoy flushes its
        // histograms every 5 s).
        let got = prometheus.until(&title, &expr, |v| !v.is_nan());
        eprintln!("panel {title:?}: {expr}\n  -> {}", Json::from(got));
    }
}
