//! The store client of `tollgate inspect`, `reset` and `override`: small and
//! synchronous (the filter's own client lives in Envoy). One server, a
//! master found through Sentinel, or a Valkey Cluster whose slot map is read
//! from a seed (`CLUSTER SLOTS`), each command sent to its key's master and
//! one `MOVED`/`ASK` followed. TLS with rustls, `AUTH` user and password.

pub mod address;
mod cluster;
mod conn;
mod tls;

pub use address::{Address, Flags, HostPort, Topology};
use cluster::ClusterClient;
use conn::Conn;

use crate::resp::Value;
use crate::store::printable;

/// Why the store could not do what was asked; each is one line for a person.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreError {
    /// No connection, a timeout, a closed connection, no master (exit 4).
    Unreachable(String),
    /// Credentials or an ACL refused (`WRONGPASS`, `NOAUTH`, `NOPERM`: exit 5).
    Refused(String),
    /// An unexpected reply (exit 1).
    Reply(String),
    /// A bad flag value found only when connecting (a TLS file: exit 2).
    Usage(String),
}

impl StoreError {
    pub fn message(&self) -> &str {
        match self {
            Self::Unreachable(m) | Self::Refused(m) | Self::Reply(m) | Self::Usage(m) => m,
        }
    }

    /// The command's exit status for this error.
    pub fn exit_code(&self) -> i32 {
        match self {
            Self::Unreachable(_) => 4,
            Self::Refused(_) => 5,
            Self::Reply(_) => 1,
            Self::Usage(_) => 2,
        }
    }
}

/// Whether `reply` is a refusal: an ACL (`NOPERM`) or credentials
/// (`WRONGPASS`, `NOAUTH`) that do not allow the command.
pub fn refusal(reply: &Value, server: &str, what: &str) -> Option<StoreError> {
    let kind = reply.error_kind()?;
    let text = reply.as_error().map(|e| printable(e, 200)).unwrap_or_default();
    matches!(kind, "NOPERM" | "WRONGPASS" | "NOAUTH")
        .then(|| StoreError::Refused(format!("the store at {server} refused {what}: {text} (check the user's ACL)")))
}

/// A reply that is an error: a refusal, or else an unexpected reply.
pub fn check(reply: Value, server: &str, what: &str) -> Result<Value, StoreError> {
    if let Some(refused) = refusal(&reply, server, what) {
        return Err(refused);
    }
    match reply.as_error() {
        Some(e) => Err(StoreError::Reply(format!("the store at {server} answered {what}: {}", printable(e, 200)))),
        None => Ok(reply),
    }
}

/// A connected store.
pub enum Client {
    Single(Box<Conn>),
    Cluster(Box<ClusterClient>),
}

impl Client {
    /// Connects as `address` says (for Sentinel: asks each Sentinel in turn
    /// for the master, connects to it and checks it is one).
    pub fn connect(address: &Address) -> Result<Client, StoreError> {
        match &address.topology {
            Topology::Single(hp) => Ok(Client::Single(Box::new(Conn::open(hp, address, &hp.host)?))),
            Topology::Sentinel { sentinels, master } => sentinel(sentinels, master, address),
            Topology::Cluster { seed } => Ok(Client::Cluster(Box::new(ClusterClient::connect(seed, address)?))),
        }
    }

    /// Runs one command on the master of `key`'s slot; `what` names it in
    /// errors. An error reply is an `Err`.
    pub fn call(&mut self, key: &str, args: &[&[u8]], what: &str) -> Result<Value, StoreError> {
        let command: Vec<Vec<u8>> = args.iter().map(|a| a.to_vec()).collect();
        let mut replies = self.on_key(key, &[command], what)?;
        replies.pop().ok_or_else(|| StoreError::Reply(format!("no reply to {what}")))
    }

    /// `MULTI`, `commands` (every key in `key`'s slot), `EXEC`: the replies
    /// of the commands, run atomically.
    pub fn transaction(&mut self, key: &str, commands: &[Vec<Vec<u8>>], what: &str) -> Result<Vec<Value>, StoreError> {
        let mut all = vec![vec![b"MULTI".to_vec()]];
        all.extend(commands.iter().cloned());
        all.push(vec![b"EXEC".to_vec()]);
        let mut replies = self.on_key(key, &all, what)?;
        let exec = replies.pop().unwrap_or(Value::Nil);
        match exec {
            Value::Array(items) if items.len() == commands.len() => {
                for item in &items {
                    if let Some(e) = refusal(item, "the store", what) {
                        return Err(e);
                    }
                }
                Ok(items)
            }
            other => {
                // EXECABORT: the queued command's own error says why.
                let first_error = replies.into_iter().find(Value::is_error).unwrap_or(other);
                check(first_error, "the store", what)
                    .and_then(|v| Err(StoreError::Reply(format!("{what}: the transaction did not run ({v:?})"))))
            }
        }
    }

    fn on_key(&mut self, key: &str, commands: &[Vec<Vec<u8>>], what: &str) -> Result<Vec<Value>, StoreError> {
        match self {
            Client::Single(conn) => {
                let replies = conn.pipeline(commands)?;
                for reply in &replies {
                    if let Some(e) = refusal(reply, &conn.name, what) {
                        return Err(e);
                    }
                }
                Ok(replies)
            }
            Client::Cluster(c) => c.on_key(key, commands, what),
        }
    }

    /// Every key matching `pattern`, on every master (`SCAN ... MATCH`).
    pub fn scan(&mut self, pattern: &str) -> Result<Vec<String>, StoreError> {
        let mut keys = Vec::new();
        match self {
            Client::Single(conn) => scan_one(conn, pattern, &mut keys)?,
            Client::Cluster(c) => {
                for conn in c.masters()? {
                    scan_one(conn, pattern, &mut keys)?;
                }
            }
        }
        keys.sort();
        keys.dedup();
        Ok(keys)
    }
}

fn scan_one(conn: &mut Conn, pattern: &str, keys: &mut Vec<String>) -> Result<(), StoreError> {
    let mut cursor = b"0".to_vec();
    loop {
        let reply = conn.call(&[b"SCAN", &cursor, b"MATCH", pattern.as_bytes(), b"COUNT", b"1000"])?;
        let name = conn.name.clone();
        let reply = check(reply, &name, "SCAN")?;
        let (next, page) = match reply.as_array() {
            Some([next, Value::Array(page)]) => (next.as_bytes().unwrap_or(b"0").to_vec(), page),
            _ => return Err(StoreError::Reply(format!("{name}: SCAN reply of an unexpected shape"))),
        };
        keys.extend(page.iter().filter_map(Value::as_bytes).map(|k| String::from_utf8_lossy(k).into_owned()));
        if next == b"0" {
            return Ok(());
        }
        cursor = next;
    }
}

fn sentinel(sentinels: &[HostPort], master: &str, address: &Address) -> Result<Client, StoreError> {
    // The Sentinels themselves: plain, without the store's credentials.
    let plain = Address { password: None, user: None, tls: None, ..address.clone() };
    let mut why = Vec::new();
    for s in sentinels {
        let mut conn = match Conn::open(s, &plain, &s.host) {
            Ok(c) => c,
            Err(e) => {
                why.push(e.message().to_owned());
                continue;
            }
        };
        let reply = conn.call(&[b"SENTINEL", b"get-master-addr-by-name", master.as_bytes()])?;
        let addr = match crate::store::sentinel::parse_lookup(&reply) {
            Ok(a) => a,
            Err(e) => {
                why.push(format!("sentinel {s}: {e} ({master:?})"));
                continue;
            }
        };
        let hp = HostPort { host: addr.ip().to_string(), port: addr.port() };
        let tls_name = sentinels.first().map_or(hp.host.clone(), |f| f.host.clone());
        let mut conn = Conn::open(&hp, address, &tls_name)?;
        let role = check(conn.call(&[b"ROLE"])?, &conn.name, "ROLE")?;
        let is_master = role.as_array().and_then(|r| r.first()).and_then(Value::as_bytes) == Some(b"master");
        if !is_master {
            return Err(StoreError::Unreachable(format!(
                "sentinel {s} named {hp} as master {master:?}, but it is not a master (a failover in progress?)"
            )));
        }
        return Ok(Client::Single(Box::new(conn)));
    }
    Err(StoreError::Unreachable(format!("no Sentinel gave a master: {}", why.join("; "))))
}
