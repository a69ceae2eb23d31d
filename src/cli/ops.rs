//! The commands that operate on live keys: `inspect`, `reset`, `override
//! set|list|rm`. Each reads the configuration as `check` does, resolves
//! the rule and key with the filter's key code, and talks to the store with
//! the CLI's own client ([`super::store`]). Errors are one line on stderr,
//! with the exit status of [`Failure`].

use super::args::{self, Args};
use super::failure::Failure;
use crate::config::Config;
use std::io::Write;

/// Runs `tollgate <command> <args>`; the exit status.
pub fn run(command: &[&str], rest: &[&str], out: &mut dyn Write, err: &mut dyn Write) -> i32 {
    let result = match command {
        ["inspect"] => args::parse(rest, &["--json", "--at"]).and_then(|a| super::inspect::run(&a, out)),
        ["reset"] => args::parse(rest, &["--key-prefix", "--all-keys", "--dry-run", "--leases"])
            .and_then(|a| super::reset::run(&a, out)),
        ["override", "set"] => {
            args::parse(rest, &["--times", "--limit", "--concurrency", "--for", "--until", "--note", "--by"])
                .and_then(|a| super::overrides::set(&a, out))
        }
        ["override", "list"] => args::parse(rest, &["--json"]).and_then(|a| super::overrides::list(&a, out)),
        ["override", "rm"] => args::parse(rest, &[]).and_then(|a| super::overrides::rm(&a, out)),
        _ => Err(Failure::usage("unknown command")),
    };
    match result {
        Ok(()) => 0,
        Err(f) => {
            let _ = writeln!(err, "tollgate: {}", f.message);
            f.code
        }
    }
}

/// The configuration of FILE (the `--config`th when it holds several),
/// validated as the filter validates it; exit 2 when it is invalid.
pub fn config(args: &Args) -> Result<Config, Failure> {
    let path = args.file.as_deref().ok_or_else(|| Failure::usage("missing FILE"))?;
    let found = super::load(path).map_err(Failure::usage)?;
    let embedded = match (args.config, found.configs.as_slice()) {
        (None, [one]) => one,
        (None, many) => {
            let origins: Vec<String> =
                many.iter().enumerate().map(|(i, e)| format!("{}: {}", i + 1, e.origin)).collect();
            return Err(Failure::usage(format!(
                "{} holds {} configurations; pick one with --config N ({})",
                path.display(),
                many.len(),
                origins.join("; ")
            )));
        }
        (Some(n), all) => all.get(n - 1).ok_or_else(|| {
            Failure::usage(format!("--config {n}: {} holds {} configuration(s)", path.display(), all.len()))
        })?,
    };
    super::parse(embedded).map_err(|errors| {
        let first = errors.first().map(ToString::to_string).unwrap_or_default();
        Failure::usage(format!("{}: invalid configuration: {first} (see `tollgate check`)", embedded.origin))
    })
}

/// Writes `text` to `out`.
pub fn emit(out: &mut dyn Write, text: &str) -> Result<(), Failure> {
    out.write_all(text.as_bytes()).map_err(|e| Failure { code: 1, message: e.to_string() })
}
