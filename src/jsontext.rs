//! JSON text written straight into a buffer, for the lines mcpgate writes on every request
//! (the log and the audit trail). The output is exactly serde_json's for the same values:
//! same escapes, same number digits. The tests hold both writers to that.

/// For each byte, how a JSON string writes it: `0` as itself, `u` as `\u00XX`, any other
/// letter as that letter after a backslash.
static ESCAPE: [u8; 256] = {
    let mut table = [0u8; 256];
    let mut b = 0;
    while b < 0x20 {
        table[b] = b'u';
        b += 1;
    }
    table[0x08] = b'b';
    table[0x0c] = b'f';
    table[b'\n' as usize] = b'n';
    table[b'\r' as usize] = b'r';
    table[b'\t' as usize] = b't';
    table[b'"' as usize] = b'"';
    table[b'\\' as usize] = b'\\';
    table
};

/// Appends `s` as a JSON string, escaped as serde_json escapes it.
pub fn push_str(out: &mut String, s: &str) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.reserve(s.len() + 2);
    out.push('"');
    let mut plain = 0;
    for (i, &b) in s.as_bytes().iter().enumerate() {
        let escape = ESCAPE[usize::from(b)];
        if escape == 0 {
            continue;
        }
        out.push_str(&s[plain..i]);
        out.push('\\');
        if escape == b'u' {
            out.push_str("u00");
            out.push(char::from(HEX[usize::from(b >> 4)]));
            out.push(char::from(HEX[usize::from(b & 0xf)]));
        } else {
            out.push(char::from(escape));
        }
        plain = i + 1;
    }
    out.push_str(&s[plain..]);
    out.push('"');
}

/// Appends a number as serde_json writes it; JSON has no NaN or infinity, so those are
/// `null`, as serde_json writes them too.
pub fn push_f64(out: &mut String, value: f64) {
    if value.is_finite() {
        let mut digits = zmij::Buffer::new();
        let text = digits.format_finite(value);
        out.push_str(text);
    } else {
        out.push_str("null");
    }
}

pub fn push_u64(out: &mut String, value: u64) {
    out.push_str(itoa::Buffer::new().format(value));
}

pub fn push_i64(out: &mut String, value: i64) {
    out.push_str(itoa::Buffer::new().format(value));
}

/// `bytes` as text: borrowed when it is UTF-8 (the usual case, checked on the fast path),
/// else with U+FFFD for each bad sequence.
pub fn lossy(bytes: &[u8]) -> std::borrow::Cow<'_, str> {
    match std::str::from_utf8(bytes) {
        Ok(text) => std::borrow::Cow::Borrowed(text),
        Err(_) => String::from_utf8_lossy(bytes),
    }
}

/// Appends any serialisable value (a tool's arguments) as serde_json writes it.
pub fn push_value<T: serde::Serialize + ?Sized>(out: &mut String, value: &T) {
    let _ = serde_json::to_writer(StringWriter(out), value);
}

/// Lets serde_json write into a `String` (it only ever writes UTF-8).
struct StringWriter<'a>(&'a mut String);

impl std::io::Write for StringWriter<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let s = std::str::from_utf8(buf).map_err(std::io::Error::other)?;
        self.0.push_str(s);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_are_escaped_as_serde_json_escapes_them() {
        let every_ascii: String = (0u8..0x80).map(char::from).collect();
        for text in [
            every_ascii.as_str(),
            "",
            "plain",
            "é ü 日本 🦀",
            "a\u{2028}b\\\"\u{7f}",
        ] {
            let mut ours = String::new();
            push_str(&mut ours, text);
            assert_eq!(ours, serde_json::to_string(text).unwrap());
        }
    }

    #[test]
    fn numbers_are_written_as_serde_json_writes_them() {
        for v in [
            0.0,
            -0.0,
            1.0,
            0.25,
            1e-7,
            123456.789,
            1e21,
            f64::MAX,
            f64::MIN_POSITIVE,
            f64::NAN,
            f64::INFINITY,
            f64::NEG_INFINITY,
        ] {
            let mut ours = String::new();
            push_f64(&mut ours, v);
            assert_eq!(ours, serde_json::to_string(&v).unwrap(), "{v}");
        }
        for v in [0u64, 7, 499, u64::MAX] {
            let mut ours = String::new();
            push_u64(&mut ours, v);
            assert_eq!(ours, serde_json::to_string(&v).unwrap());
        }
        for v in [0i64, -3, i64::MIN, i64::MAX] {
            let mut ours = String::new();
            push_i64(&mut ours, v);
            assert_eq!(ours, serde_json::to_string(&v).unwrap());
        }
    }
}
