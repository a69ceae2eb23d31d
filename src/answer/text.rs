//! Text the filter writes on every limited request (rate-limit headers, the
//! problem body of a denial), appended to one buffer without `core::fmt`
//! or a serializer: decimal integers, and JSON strings escaped exactly as
//! serde_json escapes them (the tests compare the two).

/// Appends `n` in decimal: the one digit writer of the crate's text and
/// of the RESP encoder is `itoa` (serde_json's), two digits a step and no
/// UTF-8 check of its own ASCII.
pub fn push_u64(out: &mut String, n: u64) {
    out.push_str(itoa::Buffer::new().format(n));
}

/// `n` in decimal.
pub fn u64_string(n: u64) -> String {
    let mut out = String::with_capacity(20);
    push_u64(&mut out, n);
    out
}

/// Appends `s` as a JSON string, quoted.
pub fn push_json_string(out: &mut String, s: &str) {
    out.push('"');
    push_json_escaped(out, s);
    out.push('"');
}

/// Appends `s` escaped for the inside of a JSON string: `"` and `\`, and
/// the control characters (`\b`, `\t`, `\n`, `\f`, `\r`, else `\u00xx`).
pub fn push_json_escaped(out: &mut String, s: &str) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    // Runs of bytes that need no escape are copied whole; every byte that
    // does is ASCII, so the runs end on character boundaries.
    let mut run = 0;
    for (i, byte) in s.bytes().enumerate() {
        let escape = match byte {
            b'"' => "\\\"",
            b'\\' => "\\\\",
            0x08 => "\\b",
            b'\t' => "\\t",
            b'\n' => "\\n",
            0x0c => "\\f",
            b'\r' => "\\r",
            0..0x20 => "",
            _ => continue,
        };
        out.push_str(s.get(run..i).unwrap_or_default());
        run = i + 1;
        if escape.is_empty() {
            out.push_str("\\u00");
            for nibble in [byte >> 4, byte & 0xf] {
                out.push(HEX.get(usize::from(nibble)).map_or('0', |&h| char::from(h)));
            }
        } else {
            out.push_str(escape);
        }
    }
    out.push_str(s.get(run..).unwrap_or_default());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
    fn decimals() {
        for n in [0, 1, 9, 10, 99, 100, 1_234, 999_999_999_999_999, u64::MAX - 1, u64::MAX] {
            assert_eq!(u64_string(n), n.to_string());
        }
        for n in (0..20_000).chain((1..20).flat_map(|p| [10u64.pow(p) - 1, 10u64.pow(p), 10u64.pow(p) + 1])) {
            assert_eq!(u64_string(n), n.to_string());
        }
    }

    #[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
    fn json_strings_are_serde_json_s() {
        let mut every_char: String = (0u32..0x250).filter_map(char::from_u32).collect();
        every_char.push_str("\u{2028}\u{fffd}😀");
        for s in ["", "auth.createToken/3s", "a\"b\\c\r\n</script>é", "\u{7f}\u{0}\u{1f}", every_char.as_str()] {
            let mut out = String::new();
            push_json_string(&mut out, s);
            assert_eq!(out, serde_json::to_string(s).unwrap(), "{s:?}");
        }
    }
}
