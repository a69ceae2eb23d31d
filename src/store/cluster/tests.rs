use super::*;
use crate::resp::{decode, Limits};
use wasm_bindgen_test::wasm_bindgen_test;

fn value(bytes: &[u8]) -> Value {
    decode(bytes, &Limits::default()).unwrap().0
}

fn addr(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

/// A flattened map of bulk strings and values, as a node sends it.
fn resp_map(pairs: &[(&str, Value)]) -> Value {
    Value::Array(pairs.iter().flat_map(|(k, v)| [Value::Bulk(k.as_bytes().to_vec()), v.clone()]).collect())
}

fn bulk(s: &str) -> Value {
    Value::Bulk(s.as_bytes().to_vec())
}

fn node(ip: &str, port: i64, role: &str, health: &str) -> Value {
    resp_map(&[
        ("id", bulk("07bedbfc61fc91afef4fbbc59de9f9b584ad7742")),
        ("port", Value::Integer(port)),
        ("ip", bulk(ip)),
        ("endpoint", bulk(ip)),
        ("role", bulk(role)),
        ("replication-offset", Value::Integer(0)),
        ("health", bulk(health)),
    ])
}

fn shard(slots: &[i64], nodes: Vec<Value>) -> Value {
    resp_map(&[
        ("slots", Value::Array(slots.iter().map(|s| Value::Integer(*s)).collect())),
        ("nodes", Value::Array(nodes)),
    ])
}

#[wasm_bindgen_test(unsupported = test)]
fn crc16_and_slots_match_the_servers_known_vectors() {
    assert_eq!(crc16(b"123456789"), 0x31C3);
    // Each value is what `CLUSTER KEYSLOT` answers on Valkey 9.
    for (key, slot) in [
        (&b"foo"[..], 12182),
        (b"bar", 5061),
        (b"", 0),
        (b"{user1000}.following", 3443),
        (b"user1000", 3443),
        (b"foo{}{bar}", 8363),
        (b"foo{{bar}}zap", 4015),
        (b"{bar", 4015),
        (b"foo{bar}{zap}", 5061),
        (b"{", 4092),
        (b"}{a}", 15495),
        (b"a{b", 13340),
        (b"tollgate:{a}:log", 15495),
        (b"tollgate:{b}:log", 3300),
        (b"tollgate:{auth.createToken:alice}:log", 7983),
    ] {
        assert_eq!(key_slot(key), slot, "{}", String::from_utf8_lossy(key));
    }
}

#[wasm_bindgen_test(unsupported = test)]
fn hash_tags_follow_the_first_brace_pair() {
    assert_eq!(hash_tag(b"x{tag}y{other}"), b"tag");
    assert_eq!(hash_tag(b"x{}y{tag}"), b"x{}y{tag}", "an empty first tag hashes the whole key");
    assert_eq!(hash_tag(b"no tag"), b"no tag");
    assert_eq!(hash_tag(b"open{only"), b"open{only");
    assert_eq!(common_slot([&b"t:{u}:log"[..], b"t:{u}:gcra"].into_iter()), Some(key_slot(b"u")));
    assert_eq!(common_slot([&b"t:{a}:log"[..], b"t:{b}:log"].into_iter()), None);
    assert_eq!(common_slot(std::iter::empty()), None);
}

#[wasm_bindgen_test(unsupported = test)]
fn redis7_cluster_shards_reply_gives_the_map() {
    // Debian's redis-server 7.0.15, two masters, verbatim.
    let reply = value(
        b"*2\r\n*4\r\n$5\r\nslots\r\n*2\r\n:8192\r\n:16383\r\n$5\r\nnodes\r\n*1\r\n*14\r\n$2\r\nid\r\n$40\r\n10cd7bfde27a4a0c566d8d665a9ada676471a699\r\n$4\r\nport\r\n:17012\r\n$2\r\nip\r\n$9\r\n127.0.0.1\r\n$8\r\nendpoint\r\n$9\r\n127.0.0.1\r\n$4\r\nrole\r\n$6\r\nmaster\r\n$18\r\nreplication-offset\r\n:0\r\n$6\r\nhealth\r\n$6\r\nonline\r\n*4\r\n$5\r\nslots\r\n*2\r\n:0\r\n:8191\r\n$5\r\nnodes\r\n*1\r\n*14\r\n$2\r\nid\r\n$40\r\na012309640cfb5007b99296c14616446a5fd8490\r\n$4\r\nport\r\n:17011\r\n$2\r\nip\r\n$9\r\n127.0.0.1\r\n$8\r\nendpoint\r\n$9\r\n127.0.0.1\r\n$4\r\nrole\r\n$6\r\nmaster\r\n$18\r\nreplication-offset\r\n:0\r\n$6\r\nhealth\r\n$6\r\nonline\r\n",
    );
    let map = parse_shards(&reply).unwrap();
    assert_eq!(map.owner(0), Some(addr("127.0.0.1:17011")));
    assert_eq!(map.owner(8191), Some(addr("127.0.0.1:17011")));
    assert_eq!(map.owner(8192), Some(addr("127.0.0.1:17012")));
    assert_eq!(map.owner(16383), Some(addr("127.0.0.1:17012")));
    assert_eq!(map.covered(), 16384);
    assert_eq!(map.masters().len(), 2);
}

#[wasm_bindgen_test(unsupported = test)]
fn cluster_slots_reply_gives_the_same_map() {
    // Valkey 9, verbatim.
    let reply = value(
        b"*2\r\n*3\r\n:0\r\n:8191\r\n*4\r\n$9\r\n127.0.0.1\r\n:17001\r\n$40\r\n07bedbfc61fc91afef4fbbc59de9f9b584ad7742\r\n*0\r\n*3\r\n:8192\r\n:16383\r\n*4\r\n$9\r\n127.0.0.1\r\n:17002\r\n$40\r\n2db55539ee0785882f3b534846b6ba8c68631115\r\n*0\r\n",
    );
    let map = parse_slots(&reply).unwrap();
    assert_eq!((map.owner(8191), map.owner(8192)), (Some(addr("127.0.0.1:17001")), Some(addr("127.0.0.1:17002"))));
    // A hostname endpoint falls back to the metadata's ip.
    let named = Value::Array(vec![Value::Array(vec![
        Value::Integer(0),
        Value::Integer(16383),
        Value::Array(vec![
            bulk("valkey-0.svc"),
            Value::Integer(6379),
            bulk("id"),
            resp_map(&[("ip", bulk("10.0.0.7"))]),
        ]),
    ])]);
    assert_eq!(parse_slots(&named).unwrap().owner(5), Some(addr("10.0.0.7:6379")));
}

#[wasm_bindgen_test(unsupported = test)]
fn the_online_master_of_a_shard_wins_and_replicas_never_serve() {
    let reply = Value::Array(vec![
        shard(
            &[0, 99, 200, 299],
            vec![
                node("10.0.0.1", 6379, "master", "failed"),
                node("10.0.0.2", 6379, "replica", "online"),
                node("10.0.0.3", 6379, "master", "online"),
            ],
        ),
        shard(&[100, 199], vec![node("10.0.0.4", 6380, "replica", "online")]),
    ]);
    let map = parse_shards(&reply).unwrap();
    assert_eq!(map.owner(0), Some(addr("10.0.0.3:6379")));
    assert_eq!(map.owner(250), Some(addr("10.0.0.3:6379")));
    assert_eq!(map.owner(150), None, "a shard without a master serves nothing");
    assert_eq!(map.owner(300), None);
    assert_eq!(map.covered(), 200);
    assert!(map.is_master(addr("10.0.0.3:6379")) && !map.is_master(addr("10.0.0.1:6379")));
    assert_eq!(map.to_string(), "200 of 16384 slots on 1 masters (10.0.0.3:6379)");
}

#[wasm_bindgen_test(unsupported = test)]
fn untrusted_topology_replies_are_errors_never_panics() {
    let hostname = Value::Array(vec![shard(&[0, 16383], vec![node("valkey-0", 6379, "master", "online")])]);
    for (reply, why) in [
        (Value::Error(b"ERR This instance has cluster support disabled".to_vec()), "error reply"),
        (Value::Integer(1), "expected an array"),
        (Value::Array(vec![Value::Integer(1)]), "not a map"),
        (Value::Array(vec![shard(&[0], vec![])]), "odd number"),
        (Value::Array(vec![shard(&[0, 20_000], vec![node("10.0.0.1", 1, "master", "online")])]), "not a slot"),
        (Value::Array(vec![shard(&[9, 3], vec![node("10.0.0.1", 1, "master", "online")])]), "ends before"),
        (Value::Array(vec![shard(&[0, 1], vec![node("10.0.0.1", 0, "master", "online")])]), "no slot"),
        (hostname, "no slot"),
        (Value::Array(vec![]), "no slot"),
    ] {
        let err = parse_shards(&reply).unwrap_err().to_string();
        assert!(err.contains(why), "{reply:?}: {err}");
    }
    assert!(parse_slots(&Value::Array(vec![Value::Array(vec![Value::Integer(0)])])).is_err());
    assert!(shards_unknown(&Value::Error(b"ERR unknown subcommand 'SHARDS'. Try CLUSTER HELP.".to_vec())));
    assert!(!shards_unknown(&Value::Error(b"NOPERM no permissions".to_vec())));
}

#[wasm_bindgen_test(unsupported = test)]
fn moved_updates_one_slot() {
    let mut map = SlotMap::default();
    map.assign(0, 16383, addr("10.0.0.1:6379"));
    map.set_owner(42, addr("10.0.0.2:6379"));
    assert_eq!(map.owner(41), Some(addr("10.0.0.1:6379")));
    assert_eq!(map.owner(42), Some(addr("10.0.0.2:6379")));
    assert_eq!(map.masters().len(), 2);
}

#[wasm_bindgen_test(unsupported = test)]
fn redirections_are_parsed_and_unusable_ones_reported() {
    let here = Some("10.0.0.9".parse().unwrap());
    let parse = |text: &str| parse_redirect(&Value::Error(text.as_bytes().to_vec()), here);
    assert_eq!(parse("ASK 7 10.0.0.2:6380"), Some(Ok(Redirect::Ask { slot: 7, addr: addr("10.0.0.2:6380") })));
    assert_eq!(parse("MOVED 7 :6380"), Some(Ok(Redirect::Moved { slot: 7, addr: addr("10.0.0.9:6380") })));
    assert_eq!(parse("MOVED 7 ::1:6380"), Some(Ok(Redirect::Moved { slot: 7, addr: addr("[::1]:6380") })));
    assert!(matches!(parse("MOVED 7 valkey-2.svc:6379"), Some(Err(_))));
    assert!(matches!(parse("MOVED 16384 10.0.0.2:6380"), Some(Err(_))));
    assert!(matches!(parse("ASK 7 10.0.0.2:0"), Some(Err(_))));
    assert_eq!(parse("TRYAGAIN Multiple keys request during rehashing of slot"), None);
    assert_eq!(parse_redirect(&Value::Integer(1), here), None);
}

#[wasm_bindgen_test(unsupported = test)]
fn refreshes_are_periodic_and_sooner_when_suspect_but_never_faster_than_the_minimum() {
    let mut r = Refresh::new(5_000);
    assert!(r.due(0));
    r.sent(0);
    assert!(!r.due(1), "one at a time");
    r.answered(10);
    assert!(!r.due(5_009) && r.due(5_010));
    r.suspect(50);
    assert!(!r.due(99) && r.due(100), "no sooner than 100 ms after the last one sent");
    r.sent(100);
    r.failed(120);
    assert!(!r.due(219) && r.due(220));
}
