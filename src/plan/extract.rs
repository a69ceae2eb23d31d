//! Values of key parts taken from a request: query parameters, cookies,
//! client addresses (masked to a prefix). Pure functions over bytes.

use crate::config::Prefixes;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// The path without its query string or fragment.
pub fn path_only(path: &[u8]) -> &[u8] {
    let end = path.iter().position(|&b| b == b'?' || b == b'#').unwrap_or(path.len());
    path.get(..end).unwrap_or(path)
}

/// The first value of query parameter `name` in `path`, percent-decoded
/// (`+` is a space, as in HTML forms). A parameter without `=` has the empty
/// value.
pub fn query_param(path: &[u8], name: &str) -> Option<Vec<u8>> {
    let start = path.iter().position(|&b| b == b'?')? + 1;
    let query = path.get(start..)?;
    let query = query.split(|&b| b == b'#').next().unwrap_or(query);
    query.split(|&b| b == b'&').find_map(|pair| {
        let (k, v) = match pair.iter().position(|&b| b == b'=') {
            Some(eq) => (pair.get(..eq)?, pair.get(eq + 1..)?),
            None => (pair, &[][..]),
        };
        (percent_decode(k) == name.as_bytes()).then(|| percent_decode(v))
    })
}

fn percent_decode(input: &[u8]) -> Vec<u8> {
    let hex = |b: u8| (b as char).to_digit(16);
    let mut out = Vec::with_capacity(input.len());
    let mut i = 0;
    while let Some(&b) = input.get(i) {
        match b {
            b'+' => out.push(b' '),
            b'%' => match (input.get(i + 1).and_then(|&h| hex(h)), input.get(i + 2).and_then(|&l| hex(l))) {
                (Some(h), Some(l)) => {
                    out.push((h * 16 + l) as u8);
                    i += 2;
                }
                _ => out.push(b'%'),
            },
            other => out.push(other),
        }
        i += 1;
    }
    out
}

/// The value of cookie `name` in a `cookie` header value (`a=1; b=2`).
pub fn cookie(header: &[u8], name: &str) -> Option<Vec<u8>> {
    header.split(|&b| b == b';').find_map(|pair| {
        let pair = trim(pair);
        let eq = pair.iter().position(|&b| b == b'=')?;
        (trim(pair.get(..eq)?) == name.as_bytes()).then(|| trim(pair.get(eq + 1..).unwrap_or_default()).to_vec())
    })
}

fn trim(bytes: &[u8]) -> &[u8] {
    let start = bytes.iter().position(|b| !b.is_ascii_whitespace()).unwrap_or(bytes.len());
    let end = bytes.iter().rposition(|b| !b.is_ascii_whitespace()).map_or(start, |e| e + 1);
    bytes.get(start..end).unwrap_or_default()
}

/// Parses `1.2.3.4`, `1.2.3.4:80`, `::1`, `[::1]:80` (Envoy's `source.address`
/// and `x-forwarded-for` entries).
pub fn parse_ip(text: &[u8]) -> Option<IpAddr> {
    let text = std::str::from_utf8(trim(text)).ok()?;
    text.parse::<IpAddr>()
        .ok()
        .or_else(|| text.parse::<SocketAddr>().ok().map(|s| s.ip()))
        .or_else(|| text.strip_prefix('[')?.strip_suffix(']')?.parse().ok())
}

/// The network of `ip` with the configured prefix length, as `addr/len`
/// (IPv4-mapped IPv6 addresses count as IPv4).
pub fn masked(ip: IpAddr, prefixes: Prefixes) -> String {
    let ip = match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    };
    match ip {
        IpAddr::V4(v4) => {
            let bits = u32::from(prefixes.v4.min(32));
            let mask = u32::MAX.checked_shl(32 - bits).unwrap_or(0);
            format!("{}/{bits}", Ipv4Addr::from(u32::from(v4) & mask))
        }
        IpAddr::V6(v6) => {
            let bits = u32::from(prefixes.v6.min(128));
            let mask = u128::MAX.checked_shl(128 - bits).unwrap_or(0);
            format!("{}/{bits}", Ipv6Addr::from(u128::from(v6) & mask))
        }
    }
}

/// The client in `x-forwarded-for`: skip `trusted_hops` entries from the
/// right (each added by a trusted proxy), take the next one.
pub fn forwarded_client(header: &[u8], trusted_hops: u32) -> Option<IpAddr> {
    let entries: Vec<&[u8]> = header.split(|&b| b == b',').map(trim).collect();
    let index = entries.len().checked_sub(1)?.checked_sub(usize::try_from(trusted_hops).ok()?)?;
    parse_ip(entries.get(index)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    const FULL: Prefixes = Prefixes { v4: 32, v6: 128 };

    #[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
    fn query_parameters() {
        assert_eq!(query_param(b"/a?key=v1&x=2&key=v2", "key"), Some(b"v1".to_vec()));
        assert_eq!(query_param(b"/a?api%5Fkey=a%20b+c", "api_key"), Some(b"a b c".to_vec()));
        assert_eq!(query_param(b"/a?flag&x=1", "flag"), Some(Vec::new()));
        assert_eq!(query_param(b"/a?x=1#key=2", "key"), None);
        assert_eq!(query_param(b"/a", "key"), None);
        assert_eq!(query_param(b"/a?k=%zz%4", "k"), Some(b"%zz%4".to_vec()));
    }

    #[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
    fn cookies() {
        assert_eq!(cookie(b"a=1; session=abc ;b=2", "session"), Some(b"abc".to_vec()));
        assert_eq!(cookie(b"a=1", "session"), None);
        assert_eq!(cookie(b"session", "session"), None);
        assert_eq!(cookie(b"s=x=y", "s"), Some(b"x=y".to_vec()));
    }

    #[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
    fn addresses_are_masked() {
        let v4 = Prefixes { v4: 24, v6: 64 };
        assert_eq!(parse_ip(b"10.1.2.3:5555").map(|ip| masked(ip, v4)), Some("10.1.2.0/24".into()));
        assert_eq!(parse_ip(b"[2001:db8:1:2:3::4]:443").map(|ip| masked(ip, v4)), Some("2001:db8:1:2::/64".into()));
        assert_eq!(parse_ip(b"::ffff:10.9.8.7").map(|ip| masked(ip, v4)), Some("10.9.8.0/24".into()));
        assert_eq!(parse_ip(b"10.1.2.3").map(|ip| masked(ip, FULL)), Some("10.1.2.3/32".into()));
        let zero = Prefixes { v4: 0, v6: 0 };
        assert_eq!(parse_ip(b"10.1.2.3").map(|ip| masked(ip, zero)), Some("0.0.0.0/0".into()));
        assert_eq!(parse_ip(b"not an ip"), None);
    }

    #[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
    fn forwarded_for_skips_trusted_hops_from_the_right() {
        let xff = b"203.0.113.7, 10.0.0.1 , 10.0.0.2";
        assert_eq!(forwarded_client(xff, 0), parse_ip(b"10.0.0.2"));
        assert_eq!(forwarded_client(xff, 2), parse_ip(b"203.0.113.7"));
        assert_eq!(forwarded_client(xff, 3), None);
        assert_eq!(forwarded_client(b"garbage", 0), None);
    }
}
