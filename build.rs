//! Joins the limiter's Lua files (src/limiter/, in definition order) into
//! `$OUT_DIR/limiter.lua` without their whole-line comments: the module and
//! what `FUNCTION LOAD`/`EVAL` send carry the code once, 15 KB lighter. The
//! contracts stay in the source files. Everything else is byte for byte.

use std::fmt::Write as _;
use std::path::Path;

/// The definitions, in the order they must be evaluated.
const FILES: [&str; 11] = [
    "prelude",
    "sliding_log",
    "gcra",
    "sliding_window",
    "fixed_window",
    "lease",
    "overrides",
    "decide",
    "adjust",
    "flush",
    "lease_ops",
];

fn main() {
    let mut out = String::from("-- tollgate's limiter: src/limiter/*.lua, whole-line comments left out.\n");
    for name in FILES {
        let path = format!("src/limiter/{name}.lua");
        println!("cargo:rerun-if-changed={path}");
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(e) => {
                println!("cargo:warning=cannot read {path}: {e}");
                std::process::exit(1);
            }
        };
        for line in text.lines().filter(|l| !l.trim_start().starts_with("--") && !l.trim().is_empty()) {
            let _ = writeln!(out, "{}", line.trim_end());
        }
    }
    let Some(dir) = std::env::var_os("OUT_DIR") else {
        println!("cargo:warning=OUT_DIR is not set");
        std::process::exit(1);
    };
    if let Err(e) = std::fs::write(Path::new(&dir).join("limiter.lua"), out) {
        println!("cargo:warning=cannot write limiter.lua: {e}");
        std::process::exit(1);
    }
}
