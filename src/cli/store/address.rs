//! Where the store is, from the command line: `--store redis://[user:pass@]host:port`
//! (or `rediss://` for TLS, or a bare `host:port`), `--sentinel host:port[,host:port]
//! --master NAME`, `--cluster host:port` (a seed node), the TLS files, and the
//! password from `TOLLGATE_STORE_PASSWORD` when the address carries none.

use std::path::PathBuf;
use std::time::Duration;

/// One `host:port`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostPort {
    pub host: String,
    pub port: u16,
}

impl std::fmt::Display for HostPort {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.host.contains(':') {
            write!(f, "[{}]:{}", self.host, self.port)
        } else {
            write!(f, "{}:{}", self.host, self.port)
        }
    }
}

/// How the store is laid out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Topology {
    /// One server.
    Single(HostPort),
    /// Sentinels to ask for the master named `master`.
    Sentinel { sentinels: Vec<HostPort>, master: String },
    /// A Valkey Cluster reached first through `seed`.
    Cluster { seed: HostPort },
}

/// TLS to the store (and to every node of a cluster).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tls {
    /// PEM CA bundle; `None`: the Mozilla roots.
    pub ca: Option<PathBuf>,
    /// PEM client certificate chain and key (both or neither).
    pub cert: Option<PathBuf>,
    pub key: Option<PathBuf>,
}

/// Everything needed to reach the store.
#[derive(Clone, PartialEq, Eq)]
pub struct Address {
    pub topology: Topology,
    pub user: Option<String>,
    pub password: Option<String>,
    pub tls: Option<Tls>,
    /// Connect, read and write timeout of every connection.
    pub timeout: Duration,
}

impl std::fmt::Debug for Address {
    /// The password is never shown.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Address")
            .field("topology", &self.topology)
            .field("user", &self.user)
            .field("password", &self.password.as_ref().map(|_| "***"))
            .field("tls", &self.tls)
            .field("timeout", &self.timeout)
            .finish()
    }
}

/// The address flags as given.
#[derive(Debug, Clone, Default)]
pub struct Flags {
    pub store: Option<String>,
    pub sentinel: Option<String>,
    pub master: Option<String>,
    pub cluster: Option<String>,
    pub user: Option<String>,
    pub tls_ca: Option<PathBuf>,
    pub tls_cert: Option<PathBuf>,
    pub tls_key: Option<PathBuf>,
    pub timeout: Option<Duration>,
}

/// The default timeout of every connection and reply.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);

/// The password variable read when the address carries no password.
pub const PASSWORD_ENV: &str = "TOLLGATE_STORE_PASSWORD";

/// The store address of `flags`; `env_password` is `TOLLGATE_STORE_PASSWORD`.
/// `Err` is a usage message.
pub fn address(flags: &Flags, env_password: Option<String>) -> Result<Address, String> {
    let given = [flags.store.is_some(), flags.sentinel.is_some(), flags.cluster.is_some()];
    if given.iter().filter(|g| **g).count() != 1 {
        return Err("give the store with exactly one of --store URL, --sentinel HOST:PORT[,...] --master NAME, \
                    --cluster HOST:PORT"
            .to_owned());
    }
    let mut parsed = Vec::new();
    let topology = if let Some(store) = &flags.store {
        let url = url(store)?;
        let hp = url.hp.clone();
        parsed.push(url);
        Topology::Single(hp)
    } else if let Some(list) = &flags.sentinel {
        let Some(master) = flags.master.clone().filter(|m| !m.is_empty()) else {
            return Err("--sentinel needs --master NAME (the name the Sentinels monitor)".to_owned());
        };
        let mut sentinels = Vec::new();
        for one in list.split(',').filter(|s| !s.is_empty()) {
            let url = url(one)?;
            sentinels.push(url.hp.clone());
            parsed.push(url);
        }
        Topology::Sentinel { sentinels, master }
    } else if let Some(seed) = &flags.cluster {
        let url = url(seed)?;
        let seed = url.hp.clone();
        parsed.push(url);
        Topology::Cluster { seed }
    } else {
        return Err("no store address".to_owned());
    };
    if flags.master.is_some() && flags.sentinel.is_none() {
        return Err("--master goes with --sentinel".to_owned());
    }
    let user = flags.user.clone().or_else(|| parsed.iter().find_map(|u| u.user.clone()));
    let password = parsed.iter().find_map(|u| u.password.clone()).or(env_password.filter(|p| !p.is_empty()));
    let tls_files = flags.tls_ca.is_some() || flags.tls_cert.is_some() || flags.tls_key.is_some();
    if flags.tls_cert.is_some() != flags.tls_key.is_some() {
        return Err("--tls-cert and --tls-key go together".to_owned());
    }
    let tls = (tls_files || parsed.iter().any(|u| u.tls)).then(|| Tls {
        ca: flags.tls_ca.clone(),
        cert: flags.tls_cert.clone(),
        key: flags.tls_key.clone(),
    });
    Ok(Address { topology, user, password, tls, timeout: flags.timeout.unwrap_or(DEFAULT_TIMEOUT) })
}

/// One parsed `redis://`, `rediss://` or bare `host:port`.
struct Url {
    hp: HostPort,
    user: Option<String>,
    password: Option<String>,
    tls: bool,
}

fn url(text: &str) -> Result<Url, String> {
    let (tls, rest) = if let Some(rest) = text.strip_prefix("rediss://") {
        (true, rest)
    } else if let Some(rest) = text.strip_prefix("redis://") {
        (false, rest)
    } else if text.contains("://") {
        return Err(format!("{text:?}: the store address is redis://HOST:PORT or rediss://HOST:PORT"));
    } else {
        (false, text)
    };
    let rest = rest.split('/').next().unwrap_or(rest);
    let (credentials, hostport) = match rest.rsplit_once('@') {
        Some((c, h)) => (Some(c), h),
        None => (None, rest),
    };
    let (user, password) = match credentials {
        None => (None, None),
        Some(c) => match c.split_once(':') {
            Some((u, p)) => ((!u.is_empty()).then(|| percent_decode(u)), Some(percent_decode(p))),
            None => ((!c.is_empty()).then(|| percent_decode(c)), None),
        },
    };
    Ok(Url { hp: host_port(hostport)?, user, password, tls })
}

/// `host:port`, `[v6]:port`, or `host` (port 6379).
pub fn host_port(text: &str) -> Result<HostPort, String> {
    let bad = || format!("{text:?}: expected HOST:PORT");
    let (host, port) = if let Some(v6) = text.strip_prefix('[') {
        let (host, tail) = v6.split_once(']').ok_or_else(bad)?;
        (host, tail.strip_prefix(':'))
    } else {
        match text.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (text, None),
        }
    };
    let port = match port {
        None => 6379,
        Some(p) => p.parse::<u16>().ok().filter(|p| *p > 0).ok_or_else(bad)?,
    };
    if host.is_empty() {
        return Err(bad());
    }
    Ok(HostPort { host: host.to_owned(), port })
}

/// `text` with each `%XX` decoded (a URL's user or password, a key's
/// encoded part); anything else, a lone `%` too, as it is.
pub fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while let Some(&b) = bytes.get(i) {
        let hex = |j: usize| bytes.get(j).and_then(|c| (*c as char).to_digit(16));
        match (b, hex(i + 1), hex(i + 2)) {
            (b'%', Some(h), Some(l)) => {
                out.push((h * 16 + l) as u8);
                i += 3;
            }
            _ => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flags(store: &str) -> Flags {
        Flags { store: Some(store.to_owned()), ..Flags::default() }
    }

    #[test]
    fn urls() {
        let a = address(&flags("redis://ops:p%40ss@10.0.0.1:6380"), None).unwrap();
        assert_eq!(a.topology, Topology::Single(HostPort { host: "10.0.0.1".into(), port: 6380 }));
        assert_eq!((a.user.as_deref(), a.password.as_deref(), a.tls.is_some()), (Some("ops"), Some("p@ss"), false));
        assert!(!format!("{a:?}").contains("p@ss"));
        let a = address(&flags("rediss://valkey.example"), Some("env".into())).unwrap();
        assert_eq!(a.topology, Topology::Single(HostPort { host: "valkey.example".into(), port: 6379 }));
        assert_eq!((a.password.as_deref(), a.tls.is_some()), (Some("env"), true));
        let a = address(&flags("[::1]:7000"), None).unwrap();
        assert_eq!(a.topology, Topology::Single(HostPort { host: "::1".into(), port: 7000 }));
        assert!(address(&flags("http://x:1"), None).is_err());
        assert!(address(&flags("x:0"), None).is_err());
        assert!(address(&Flags::default(), None).is_err());
        let s = Flags { sentinel: Some("a:1,b:2".into()), ..Flags::default() };
        assert!(address(&s, None).unwrap_err().contains("--master"));
        let s = Flags { master: Some("m".into()), ..s };
        let Topology::Sentinel { sentinels, master } = address(&s, None).unwrap().topology else { panic!() };
        assert_eq!((sentinels.len(), master.as_str()), (2, "m"));
    }
}
