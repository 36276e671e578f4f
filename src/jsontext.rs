//! JSON text written straight into a buffer, for the lines mcpgate writes on every request
//! (the log and the audit trail). The output is exactly serde_json's for the same values:
//! same escapes, same number digits. The tests hold both writers to that.

use std::fmt::Write as _;

/// Appends `s` as a JSON string, escaped as serde_json escapes it.
pub fn push_str(out: &mut String, s: &str) {
    out.reserve(s.len() + 2);
    out.push('"');
    let mut plain = 0;
    for (i, b) in s.bytes().enumerate() {
        let escape = match b {
            b'"' => "\\\"",
            b'\\' => "\\\\",
            b'\n' => "\\n",
            b'\r' => "\\r",
            b'\t' => "\\t",
            0x08 => "\\b",
            0x0c => "\\f",
            0..=0x1f => "",
            _ => continue,
        };
        out.push_str(&s[plain..i]);
        if escape.is_empty() {
            let _ = write!(out, "\\u{b:04x}");
        } else {
            out.push_str(escape);
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
