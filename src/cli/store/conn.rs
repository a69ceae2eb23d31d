//! One connection to one server: TCP (or TLS) with timeouts, commands sent
//! as RESP, replies read with the crate's bounded decoder, `AUTH` first.

use super::address::{Address, HostPort};
use super::{tls, StoreError};
use crate::resp::{decode, encode_command, DecodeError, Limits, Value};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};

enum Stream {
    Plain(TcpStream),
    Tls(Box<rustls::StreamOwned<rustls::ClientConnection, TcpStream>>),
}

/// A connection, authenticated when the address carries credentials.
pub struct Conn {
    stream: Stream,
    /// What the server is called in messages (`host:port`).
    pub name: String,
    /// The peer's socket address.
    pub peer: SocketAddr,
    buf: Vec<u8>,
}

/// Reply bounds: a SCAN page or a lease set of any configurable size fits.
fn limits() -> Limits {
    Limits { max_elements: 1 << 22, ..Limits::default() }
}

impl Conn {
    /// Connects to `hp` with `address`'s timeout, TLS and credentials;
    /// `tls_name` is the name the certificate must carry (the host given).
    pub fn open(hp: &HostPort, address: &Address, tls_name: &str) -> Result<Conn, StoreError> {
        let name = hp.to_string();
        let unreachable = |why: String| StoreError::Unreachable(format!("cannot reach the store at {name}: {why}"));
        let addrs: Vec<SocketAddr> =
            (hp.host.as_str(), hp.port).to_socket_addrs().map_err(|e| unreachable(e.to_string()))?.collect();
        let mut last = "no address".to_owned();
        let mut tcp = None;
        for addr in &addrs {
            match TcpStream::connect_timeout(addr, address.timeout) {
                Ok(s) => {
                    tcp = Some(s);
                    break;
                }
                Err(e) => last = e.to_string(),
            }
        }
        let tcp = tcp.ok_or_else(|| unreachable(last))?;
        let io = |e: std::io::Error| unreachable(e.to_string());
        tcp.set_read_timeout(Some(address.timeout)).map_err(io)?;
        tcp.set_write_timeout(Some(address.timeout)).map_err(io)?;
        tcp.set_nodelay(true).map_err(io)?;
        let peer = tcp.peer_addr().map_err(io)?;
        let stream = match &address.tls {
            None => Stream::Plain(tcp),
            Some(files) => {
                let config = tls::client_config(files)?;
                let server = rustls::pki_types::ServerName::try_from(tls_name.to_owned())
                    .map_err(|e| StoreError::Usage(format!("{tls_name:?} is not a TLS server name: {e}")))?;
                let conn =
                    rustls::ClientConnection::new(config, server).map_err(|e| unreachable(format!("TLS: {e}")))?;
                let mut s = rustls::StreamOwned::new(conn, tcp);
                while s.conn.is_handshaking() {
                    s.conn.complete_io(&mut s.sock).map_err(|e| unreachable(format!("TLS handshake failed: {e}")))?;
                }
                Stream::Tls(Box::new(s))
            }
        };
        let mut conn = Conn { stream, name, peer, buf: Vec::new() };
        conn.auth(address)?;
        Ok(conn)
    }

    fn auth(&mut self, address: &Address) -> Result<(), StoreError> {
        let Some(password) = &address.password else { return Ok(()) };
        let reply = match &address.user {
            Some(user) => self.call(&[b"AUTH", user.as_bytes(), password.as_bytes()])?,
            None => self.call(&[b"AUTH", password.as_bytes()])?,
        };
        match reply.as_error() {
            None => Ok(()),
            Some(e) => Err(StoreError::Refused(format!(
                "the store at {} refused the credentials: {}",
                self.name,
                crate::store::printable(e, 200)
            ))),
        }
    }

    /// Sends one command and reads its reply (an error reply is a value).
    pub fn call(&mut self, args: &[&[u8]]) -> Result<Value, StoreError> {
        let mut replies = self.pipeline(&[args.iter().map(|a| a.to_vec()).collect()])?;
        replies.pop().ok_or_else(|| StoreError::Reply(format!("{}: no reply", self.name)))
    }

    /// Sends `commands` at once and reads one reply per command.
    pub fn pipeline(&mut self, commands: &[Vec<Vec<u8>>]) -> Result<Vec<Value>, StoreError> {
        let mut out = Vec::new();
        for command in commands {
            let args: Vec<&[u8]> = command.iter().map(Vec::as_slice).collect();
            encode_command(&mut out, &args);
        }
        let name = self.name.clone();
        let lost = |e: std::io::Error| StoreError::Unreachable(format!("the store at {name} stopped answering: {e}"));
        match &mut self.stream {
            Stream::Plain(s) => s.write_all(&out).and_then(|()| s.flush()),
            Stream::Tls(s) => s.write_all(&out).and_then(|()| s.flush()),
        }
        .map_err(lost)?;
        let mut replies = Vec::with_capacity(commands.len());
        while replies.len() < commands.len() {
            match decode(&self.buf, &limits()) {
                Ok((value, used)) => {
                    self.buf.drain(..used);
                    replies.push(value);
                }
                Err(DecodeError::Incomplete) => {
                    let mut chunk = [0u8; 16 * 1024];
                    let n = match &mut self.stream {
                        Stream::Plain(s) => s.read(&mut chunk),
                        Stream::Tls(s) => s.read(&mut chunk),
                    }
                    .map_err(lost)?;
                    if n == 0 {
                        return Err(StoreError::Unreachable(format!("the store at {name} closed the connection")));
                    }
                    self.buf.extend_from_slice(chunk.get(..n).unwrap_or_default());
                }
                Err(e) => return Err(StoreError::Reply(format!("{name}: {e}"))),
            }
        }
        Ok(replies)
    }
}
