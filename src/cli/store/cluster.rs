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
            if asking {
                replies.remove(0);
            }
            for reply in &replies {
                if let Some(e) = refusal(reply, &name, what) {
                    return Err(e);
                }
            }
            let redirect = replies.iter().find_map(|r| parse_redirect(r, Some(target.ip())));
            match redirect {
                None => return Ok(replies),
                Some(Err(e)) => return Err(StoreError::Reply(format!("{name}: {e}"))),
                Some(Ok(Redirect::Moved { slot, addr })) => {
                    self.map.set_owner(slot, addr);
                    (target, asking) = (addr, false);
                }
                Some(Ok(Redirect::Ask { addr, .. })) => (target, asking) = (addr, true),
            }
        }
        Err(StoreError::Unreachable(format!("slot {slot} of {key:?} is moving: redirected twice, try again")))
    }
}
