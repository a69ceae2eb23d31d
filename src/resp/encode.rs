//! RESP encoding: commands (arrays of bulk strings) and, for tests and fake
//! servers, replies.

use super::Value;

/// Appends one command to `out` as a RESP array of bulk strings:
/// `*N\r\n` then `$len\r\narg\r\n` for every argument.
///
/// Every argument is length-prefixed, so it is binary-safe: no byte in it can
/// end the argument or start another command.
pub fn encode_command(out: &mut Vec<u8>, args: &[&[u8]]) {
    let payload: usize = args.iter().map(|a| a.len().saturating_add(16)).fold(16, usize::saturating_add);
    out.reserve(payload);
    push_header(out, b'*', args.len());
    for arg in args {
        push_bulk(out, arg);
    }
}

/// Writes one command into a buffer argument by argument, once the number
/// of arguments is known: what [`encode_command`] writes, without a
/// `Vec<&[u8]>` of the arguments or a `String` per number.
pub struct CommandWriter<'a> {
    out: &'a mut Vec<u8>,
}

impl<'a> CommandWriter<'a> {
    /// Starts a command of `args` arguments.
    pub fn new(out: &'a mut Vec<u8>, args: usize) -> CommandWriter<'a> {
        push_header(out, b'*', args);
        CommandWriter { out }
    }

    pub fn bulk(&mut self, bytes: &[u8]) {
        push_bulk(self.out, bytes);
    }

    /// `parts` one after the other, as one argument.
    pub fn bulk_joined(&mut self, parts: &[&[u8]]) {
        push_header(self.out, b'$', parts.iter().map(|p| p.len()).sum());
        for part in parts {
            self.out.extend_from_slice(part);
        }
        self.out.extend_from_slice(b"\r\n");
    }

    /// `prefix` then `n` in decimal, as one argument.
    pub fn decimal(&mut self, prefix: &[u8], n: u64) {
        let mut digits = itoa::Buffer::new();
        let digits = digits.format(n).as_bytes();
        push_header(self.out, b'$', prefix.len() + digits.len());
        if prefix.is_empty() {
            // The common argument: its digits and line end in one copy (a
            // u64 has at most 20 digits).
            let mut line = [b'\r'; 22];
            for (to, digit) in line.iter_mut().zip(digits) {
                *to = *digit;
            }
            if let Some(newline) = line.get_mut(digits.len() + 1) {
                *newline = b'\n';
            }
            self.out.extend_from_slice(line.get(..digits.len() + 2).unwrap_or_default());
            return;
        }
        self.out.extend_from_slice(prefix);
        self.out.extend_from_slice(digits);
        self.out.extend_from_slice(b"\r\n");
    }
}

/// Appends one reply to `out` in RESP2 (the inverse of
/// [`decode`](super::decode()) for RESP2 input).
///
/// RESP2 cannot carry CR or LF in a simple string or error line, so those
/// bytes are written as spaces there; bulk strings are binary-safe as is.
/// Nesting is handled without recursion.
pub fn encode_value(out: &mut Vec<u8>, value: &Value) {
    let mut stack: Vec<std::slice::Iter<'_, Value>> = Vec::new();
    let mut next = Some(value);
    loop {
        if let Some(value) = next.take() {
            match value {
                Value::Simple(s) => push_line(out, b'+', s),
                Value::Error(e) => push_line(out, b'-', e),
                Value::Integer(i) => {
                    out.push(b':');
                    if *i < 0 {
                        out.push(b'-');
                    }
                    push_decimal(out, i.unsigned_abs());
                    out.extend_from_slice(b"\r\n");
                }
                Value::Bulk(b) => push_bulk(out, b),
                Value::Nil => out.extend_from_slice(b"$-1\r\n"),
                Value::Array(items) => {
                    push_header(out, b'*', items.len());
                    stack.push(items.iter());
                }
            }
        }
        match stack.last_mut() {
            None => return,
            Some(iter) => match iter.next() {
                Some(item) => next = Some(item),
                None => {
                    stack.pop();
                }
            },
        }
    }
}

fn push_bulk(out: &mut Vec<u8>, bytes: &[u8]) {
    push_header(out, b'$', bytes.len());
    out.extend_from_slice(bytes);
    out.extend_from_slice(b"\r\n");
}

fn push_line(out: &mut Vec<u8>, kind: u8, line: &[u8]) {
    out.push(kind);
    out.extend(line.iter().map(|&b| if b == b'\r' || b == b'\n' { b' ' } else { b }));
    out.extend_from_slice(b"\r\n");
}

fn push_header(out: &mut Vec<u8>, kind: u8, len: usize) {
    // Most lengths have one or two digits: the header in one copy.
    match u8::try_from(len) {
        Ok(n @ 0..=9) => out.extend_from_slice(&[kind, b'0' + n, b'\r', b'\n']),
        Ok(n @ 10..=99) => out.extend_from_slice(&[kind, b'0' + n / 10, b'0' + n % 10, b'\r', b'\n']),
        _ => {
            out.push(kind);
            // usize is at most 64 bits on every target, so this widening is lossless.
            push_decimal(out, len as u64);
            out.extend_from_slice(b"\r\n");
        }
    }
}

/// Appends `n` in decimal without allocating.
fn push_decimal(out: &mut Vec<u8>, n: u64) {
    out.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
}
