//! The flags of `inspect`, `reset` and `override`: `--name value` or
//! `--name=value`, some repeatable, each command accepting its own set.

use super::failure::Failure;
use super::store::address::{self, Address, Flags};
use crate::config::Config;
use std::path::PathBuf;
use std::time::Duration;

/// Every flag of the operating commands, as given.
#[derive(Debug, Clone, Default)]
pub struct Args {
    pub file: Option<PathBuf>,
    pub rule: Option<String>,
    /// `--key part=value`, in order.
    pub keys: Vec<(String, String)>,
    /// `--key-prefix part=valueprefix`.
    pub key_prefixes: Vec<(String, String)>,
    pub store: Flags,
    /// `--config N`: which configuration of FILE (1-based).
    pub config: Option<usize>,
    pub json: bool,
    pub dry_run: bool,
    pub leases: bool,
    pub all_keys: bool,
    pub times: Option<String>,
    /// `--limit PERIOD=N`.
    pub limits: Vec<(String, String)>,
    pub concurrency: Option<String>,
    pub for_: Option<String>,
    pub until: Option<String>,
    pub note: Option<String>,
    pub by: Option<String>,
    /// `--at`: inspect as at this time (RFC 3339 or ms since the epoch).
    pub at: Option<String>,
}

/// The flags every operating command takes (the store's, the config's).
pub const COMMON: &[&str] = &[
    "--rule",
    "--key",
    "--store",
    "--sentinel",
    "--master",
    "--cluster",
    "--user",
    "--tls-ca",
    "--tls-cert",
    "--tls-key",
    "--timeout",
    "--config",
];

const SWITCHES: &[&str] = &["--json", "--dry-run", "--leases", "--all-keys"];

/// Parses `args` (after the command words); `extra` are the flags this
/// command takes beyond [`COMMON`].
pub fn parse(args: &[&str], extra: &[&str]) -> Result<Args, Failure> {
    let mut out = Args::default();
    let mut rest = args.iter();
    while let Some(arg) = rest.next() {
        if !arg.starts_with("--") {
            if out.file.is_some() {
                return Err(Failure::usage(format!("unexpected argument {arg:?}")));
            }
            out.file = Some(PathBuf::from(arg));
            continue;
        }
        let (flag, inline) = match arg.split_once('=') {
            Some((f, v)) => (f, Some(v.to_owned())),
            None => (*arg, None),
        };
        if !COMMON.contains(&flag) && !extra.contains(&flag) {
            return Err(Failure::usage(format!("unknown flag {flag} for this command")));
        }
        if SWITCHES.contains(&flag) {
            if inline.is_some() {
                return Err(Failure::usage(format!("{flag} takes no value")));
            }
            match flag {
                "--json" => out.json = true,
                "--dry-run" => out.dry_run = true,
                "--leases" => out.leases = true,
                _ => out.all_keys = true,
            }
            continue;
        }
        let value = match inline {
            Some(v) => v,
            None => {
                rest.next().map(|v| (*v).to_owned()).ok_or_else(|| Failure::usage(format!("{flag} needs a value")))?
            }
        };
        set(&mut out, flag, value)?;
    }
    if out.file.is_none() {
        return Err(Failure::usage("missing FILE (plugin JSON, Envoy YAML or WasmPlugin)"));
    }
    Ok(out)
}

fn set(out: &mut Args, flag: &str, value: String) -> Result<(), Failure> {
    let once = |slot: &mut Option<String>| match slot {
        Some(_) => Err(Failure::usage(format!("{flag} given twice"))),
        None => {
            *slot = Some(value.clone());
            Ok(())
        }
    };
    match flag {
        "--rule" => once(&mut out.rule)?,
        "--key" => out.keys.push(pair(flag, &value)?),
        "--key-prefix" => out.key_prefixes.push(pair(flag, &value)?),
        "--limit" => out.limits.push(pair(flag, &value)?),
        "--store" => once(&mut out.store.store)?,
        "--sentinel" => once(&mut out.store.sentinel)?,
        "--master" => once(&mut out.store.master)?,
        "--cluster" => once(&mut out.store.cluster)?,
        "--user" => once(&mut out.store.user)?,
        "--tls-ca" => out.store.tls_ca = Some(PathBuf::from(value)),
        "--tls-cert" => out.store.tls_cert = Some(PathBuf::from(value)),
        "--tls-key" => out.store.tls_key = Some(PathBuf::from(value)),
        "--timeout" => {
            let ms =
                duration_ms(&value).ok_or_else(|| Failure::usage(format!("--timeout {value:?}: e.g. 2s, 500ms")))?;
            out.store.timeout = Some(Duration::from_millis(ms.max(1)));
        }
        "--config" => {
            let n = value.parse::<usize>().ok().filter(|n| *n >= 1);
            out.config = Some(n.ok_or_else(|| Failure::usage("--config N: the Nth configuration of FILE, from 1"))?);
        }
        "--times" => once(&mut out.times)?,
        "--concurrency" => once(&mut out.concurrency)?,
        "--for" => once(&mut out.for_)?,
        "--until" => once(&mut out.until)?,
        "--note" => once(&mut out.note)?,
        "--by" => once(&mut out.by)?,
        "--at" => once(&mut out.at)?,
        other => return Err(Failure::usage(format!("unknown flag {other}"))),
    }
    Ok(())
}

fn pair(flag: &str, value: &str) -> Result<(String, String), Failure> {
    match value.split_once('=') {
        Some((k, v)) if !k.is_empty() => Ok((k.to_owned(), v.to_owned())),
        _ => Err(Failure::usage(format!("{flag} {value:?}: expected NAME=VALUE"))),
    }
}

/// `<digits><unit>` (`ms`, `s`, `m`, `h`, `d`) or bare seconds, in ms: the
/// configuration's duration syntax (its own reader), and its whole seconds.
pub fn duration_ms(text: &str) -> Option<u64> {
    use crate::config::duration::{from_seconds, parse_str};
    match text.parse::<u64>() {
        Ok(seconds) if text.bytes().all(|b| b.is_ascii_digit()) => from_seconds(seconds).ok(),
        _ => parse_str(text).ok(),
    }
}

impl Args {
    /// The store address (exit 2 when the flags do not give one).
    pub fn address(&self) -> Result<Address, Failure> {
        let env = std::env::var(address::PASSWORD_ENV).ok();
        address::address(&self.store, env).map_err(Failure::usage)
    }

    /// `--at` in ms since the epoch, if given (exit 2 if it is not a time).
    pub fn at_ms(&self) -> Result<Option<u64>, Failure> {
        self.at
            .as_deref()
            .map(|t| {
                t.parse::<u64>().ok().or_else(|| super::clock::parse(t)).ok_or_else(|| {
                    Failure::usage(format!("--at {t:?}: RFC 3339 (2026-12-04T18:00:00Z) or ms since the epoch"))
                })
            })
            .transpose()
    }

    /// `--rule`, required.
    pub fn rule(&self) -> Result<&str, Failure> {
        self.rule.as_deref().ok_or_else(|| Failure::usage("missing --rule NAME"))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags() {
        let a =
            parse(&["f.json", "--rule=r", "--key", "x-user-id=a=b", "--json", "--store", "h:1"], &["--json"]).unwrap();
        assert_eq!(a.keys, [("x-user-id".to_owned(), "a=b".to_owned())]);
        assert!(a.json && a.rule.as_deref() == Some("r"));
        assert_eq!(parse(&["f", "--dry-run"], &[]).unwrap_err().code, 2);
        assert_eq!(parse(&["--rule", "r"], &[]).unwrap_err().code, 2);
        assert_eq!(parse(&["f", "--rule", "r", "--rule", "s"], &[]).unwrap_err().code, 2);
        assert_eq!(duration_ms("90m"), Some(5_400_000));
        assert_eq!(duration_ms("3"), Some(3_000));
        assert_eq!(duration_ms("1w"), None);
    }
}
