//! The commands that operate on live keys: `inspect`, `reset`, `override
//! set|list|rm`. Each reads the configuration as `check` does, resolves
//! the rule and key with the filter's key code, and talks to the store with
//! the CLI's own client ([`super::store`]). Errors are one line on stderr,
//! with the exit status of [`Failure`].

use super::args;
use super::failure::Failure;
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
