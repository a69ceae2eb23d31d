//! The charts of docs/benchmarks.md: `python3 scripts/bench charts --check`
//! draws them from the main table of the committed report into a temp dir
//! and parses each as SVG (XML); they are byte for byte the committed
//! docs/bench/*.svg, and the report shows each one.

use std::path::Path;
use std::process::Command;

#[test]
fn charts_are_valid_svg_drawn_from_the_reports_figures() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = std::env::temp_dir().join(format!("tollgate-bench-charts-{}", std::process::id()));
    let out = Command::new("python3")
        .arg(root.join("scripts/bench"))
        .arg("charts")
        .arg("--check")
        .arg(&dir)
        .output()
        .expect("python3 runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "scripts/bench charts --check: {stderr}");
    let names: Vec<String> = String::from_utf8_lossy(&out.stdout).lines().map(str::to_owned).collect();
    assert_eq!(names, ["throughput.svg", "ratio.svg", "latency.svg", "decisions.svg"]);
    let report = std::fs::read_to_string(root.join("docs/benchmarks.md")).unwrap();
    for name in &names {
        let drawn = std::fs::read_to_string(dir.join(name)).unwrap();
        let committed = std::fs::read_to_string(root.join("docs/bench").join(name)).unwrap();
        assert!(drawn == committed, "docs/bench/{name} is not what the report's figures draw");
        assert!(report.contains(&format!("](bench/{name})")), "docs/benchmarks.md shows {name}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
