//! `tollgate`: check, explain and simulate plugin configurations on the
//! host, with the filter's own parser and pure models, and inspect, reset
//! and override a running system's live keys (see `tollgate::cli`).

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let code = tollgate::cli::run(&args, &mut std::io::stdout().lock(), &mut std::io::stderr().lock());
    std::process::exit(code);
}
