//! The decoder's fast path for arrays of integers (the decision's reply)
//! against the general path, on every such reply cut short, every byte of
//! it replaced, and every limit at its edge: both must give the same.

use crate::resp::decode::decode_tree;
use crate::resp::*;
use wasm_bindgen_test::wasm_bindgen_test;

fn same(buf: &[u8], limits: &Limits) {
    assert_eq!(decode(buf, limits), decode_tree(buf, 0, limits), "{:?} {limits:?}", String::from_utf8_lossy(buf));
}

const REPLIES: [&[u8]; 5] = [
    b"*5\r\n:1\r\n:1764150000123\r\n:999999999\r\n:1792000\r\n:0\r\n",
    b"*2\r\n:-7\r\n:0\r\n",
    b"*1\r\n:9223372036854775807\r\n",
    b"*3\r\n:1\r\n$2\r\nok\r\n:3\r\n",
    b"*2\r\n:1\r\n*1\r\n:2\r\n",
];

#[wasm_bindgen_test(unsupported = test)]
fn fast_path_decodes_as_the_general_path() {
    let limits = Limits::default();
    for reply in REPLIES {
        same(reply, &limits);
        let mut twice = reply.to_vec();
        twice.extend_from_slice(reply);
        same(&twice, &limits);
        for cut in 0..reply.len() {
            same(&reply[..cut], &limits);
        }
        for at in 0..reply.len() {
            for byte in [b'*', b':', b'-', b'0', b'9', b'\r', b'\n', b'$', b'x', b'_'] {
                let mut changed = reply.to_vec();
                changed[at] = byte;
                same(&changed, &limits);
            }
        }
    }
}

#[wasm_bindgen_test(unsupported = test)]
fn fast_path_keeps_every_limit() {
    let reply = REPLIES[0];
    for total in 0..8 {
        same(reply, &Limits { max_total_values: total, ..Limits::default() });
    }
    for elements in 0..7 {
        same(reply, &Limits { max_elements: elements, ..Limits::default() });
    }
    for depth in 0..2 {
        same(reply, &Limits { max_depth: depth, ..Limits::default() });
    }
    same(b"*0\r\n", &Limits::default());
    same(b"*-1\r\n", &Limits::default());
    same(b"*4000000000\r\n:1\r\n", &Limits::default());
}

#[wasm_bindgen_test(unsupported = test)]
fn a_digit_appended_as_checked_arithmetic_would() {
    use crate::resp::decode::push_digit;
    let tenth = u64::MAX / 10;
    for acc in [0, 1, 9, 1_764_150_000_123, tenth - 1, tenth, tenth + 1, u64::MAX / 2, u64::MAX] {
        for digit in b'0'..=b'9' {
            let checked = acc.checked_mul(10).and_then(|n| n.checked_add(u64::from(digit - b'0')));
            assert_eq!(push_digit(acc, digit), checked, "{acc} then {}", char::from(digit));
        }
    }
}

#[wasm_bindgen_test(unsupported = test)]
fn one_pass_integers_read_as_their_lines() {
    use crate::resp::decode::{canonical_integer, read_integer_line};
    let texts = [
        "0",
        "-0",
        "00",
        "01",
        "-01",
        "7",
        "-7",
        "",
        "-",
        "--1",
        "1-",
        "+1",
        "1a",
        "a",
        "9223372036854775807",
        "9223372036854775808",
        "-9223372036854775808",
        "-9223372036854775809",
        "18446744073709551615",
        "18446744073709551616",
        "99999999999999999999",
        "-9999999999999999999",
        "123456789012345678901",
        "1764150000123",
    ];
    for text in texts {
        for tail in ["\r\n", "\r", "", "\n", "\rx", " \r\n", "\r\n:5\r\n"] {
            let line = format!("{text}{tail}");
            let fast = canonical_integer(line.as_bytes(), 0);
            let slow = read_integer_line(line.as_bytes(), 0);
            // The one pass reads what the line reader reads, or leaves it.
            if let Some(found) = fast {
                assert_eq!(Ok(found), slow, "{line:?}");
            }
            if tail.starts_with("\r\n") && slow.is_ok() {
                assert_eq!(fast.map(Ok), Some(slow), "{line:?}: the one pass must read every good line");
            }
        }
    }
}
