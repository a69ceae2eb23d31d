//! `benches/admitted_path.rs` as an example: built for wasm32-wasip1 with
//! `--features v8-profile` and run under node's V8 by
//! `scripts/bench/v8_profile.py` (a bench target would build the CLI binary too,
//! which does not build for wasm).

#[path = "../benches/admitted_path.rs"]
mod bench;

fn main() {
    bench::main();
}
