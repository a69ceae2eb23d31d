//! A Valkey Cluster: the slot map read from a seed (`CLUSTER SLOTS`, the
//! crate's parser), one connection per master opened when first needed,
//! each command sent to its key's master, one `MOVED` or `ASK` followed.

use super::address::{Address, HostPort};
use super::conn::Conn;
use super::{check, refusal, StoreError};
use crate::resp::Value;
use crate::store::cluster::{key_slot, parse_redirect, parse_slots, Redirect, SlotMap};
use std::collections::BTreeMap;
use std::net::SocketAddr;

pub struct ClusterClient {
    map: SlotMap,
    conns: BTreeMap<SocketAddr, Conn>,
    address: Address,
    /// The seed's host: the TLS name of every node.
    tls_name: String,
}

impl ClusterClient {
    pub fn connect(seed: &HostPort, address: &Address) -> Result<ClusterClient, StoreError> {
        let mut conn = Conn::open(seed, address, &seed.host)?;
        let reply = check(conn.call(&[b"CLUSTER", b"SLOTS"])?, &conn.name, "CLUSTER SLOTS")?;
        let map = parse_slots(&reply).map_err(|e| StoreError::Reply(format!("{}: {e}", conn.name)))?;
        let mut conns = BTreeMap::new();
        conns.insert(conn.peer, conn);
        Ok(ClusterClient { map, conns, address: address.clone(), tls_name: seed.host.clone() })
    }

    fn conn(&mut self, addr: SocketAddr) -> Result<&mut Conn, StoreError> {
        if !self.conns.contains_key(&addr) {
            let hp = HostPort { host: addr.ip().to_string(), port: addr.port() };
            let conn = Conn::open(&hp, &self.address, &self.tls_name)?;
            self.conns.insert(addr, conn);
        }
        self.conns.get_mut(&addr).ok_or_else(|| StoreError::Unreachable(format!("no connection to {addr}")))
    }

    /// A connection to every master of the map.
    pub fn masters(&mut self) -> Result<Vec<&mut Conn>, StoreError> {
        let masters = self.map.masters().to_vec();
        for m in &masters {
            self.conn(*m)?;
        }
        Ok(self.conns.iter_mut().filter(|(a, _)| masters.contains(a)).map(|(_, c)| c).collect())
    }

    pub fn on_key(&mut self, key: &str, commands: &[Vec<Vec<u8>>], what: &str) -> Result<Vec<Value>, StoreError> {
        let slot = key_slot(key.as_bytes());
        let owner = self
            .map
            .owner(slot)
            .ok_or_else(|| StoreError::Unreachable(format!("no master serves slot {slot} of {key:?}")))?;
        for _ in 0..TRYAGAIN_ATTEMPTS {
            match self.redirected(owner, commands, what)? {
                Sent::Answered(replies) => return Ok(replies),
                Sent::Redirected => {
                    return Err(StoreError::Unreachable(format!(
                        "slot {slot} of {key:?} is moving: redirected twice, try again"
                    )))
                }
                Sent::TryAgain => std::thread::sleep(TRYAGAIN_PAUSE),
            }
        }
        Err(StoreError::Unreachable(format!(
            "slot {slot} of {key:?} is being migrated, its keys split between two masters (TRYAGAIN for {} s): \
             try again when the migration ends",
            (TRYAGAIN_PAUSE * TRYAGAIN_ATTEMPTS).as_secs()
        )))
    }

    /// `commands` sent to `owner`, one `MOVED` or `ASK` followed.
    fn redirected(&mut self, owner: SocketAddr, commands: &[Vec<Vec<u8>>], what: &str) -> Result<Sent, StoreError> {
        let mut target = owner;
        let mut asking = false;
        for _ in 0..2 {
            let conn = self.conn(target)?;
            let name = conn.name.clone();
            let mut sent = commands.to_vec();
            if asking {
                sent.insert(0, vec![b"ASKING".to_vec()]);
            }
            let mut replies = conn.pipeline(&sent)?;
            if asking && !replies.is_empty() {
                replies.remove(0);
            }
            for reply in &replies {
                if let Some(e) = refusal(reply, &name, what) {
                    return Err(e);
                }
            }
            if replies.iter().any(|r| r.error_kind() == Some("TRYAGAIN")) {
                return Ok(Sent::TryAgain);
            }
            let redirect = replies.iter().find_map(|r| parse_redirect(r, Some(target.ip())));
            match redirect {
                None => return Ok(Sent::Answered(replies)),
                Some(Err(e)) => return Err(StoreError::Reply(format!("{name}: {e}"))),
                Some(Ok(Redirect::Moved { slot, addr })) => {
                    self.map.set_owner(slot, addr);
                    (target, asking) = (addr, false);
                }
                Some(Ok(Redirect::Ask { addr, .. })) => (target, asking) = (addr, true),
            }
        }
        Ok(Sent::Redirected)
    }
}

/// What became of commands sent to a slot's master.
enum Sent {
    Answered(Vec<Value>),
    /// Redirected twice.
    Redirected,
    /// A command of several keys while the slot migrates and its keys are
    /// split between the two masters (`TRYAGAIN`).
    TryAgain,
}

/// How often, and how far apart, commands answered `TRYAGAIN` are sent
/// again (a slot whose keys are being moved: moments, unless a migration
/// stalls).
const TRYAGAIN_ATTEMPTS: u32 = 20;
const TRYAGAIN_PAUSE: std::time::Duration = std::time::Duration::from_millis(100);
