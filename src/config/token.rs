//! Tokens: generation (`mcpgate token new`), hashing (`mcpgate token hash`) and the hash
//! form the config stores. A token is hashed the moment it is read; only the 32-byte
//! digest is kept or compared.

use base64::Engine as _;
use sha2::{Digest, Sha256};
use std::fmt;

/// A token read from a request or stdin. `Debug` never shows it.
pub struct Secret<'a>(pub &'a str);

impl fmt::Debug for Secret<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

impl Secret<'_> {
    pub fn hash(&self) -> [u8; 32] {
        Sha256::digest(self.0.as_bytes()).into()
    }
}

/// 32 random bytes (256 bits) from the OS, base64url without padding: 43 characters that
/// need no escaping in a URL path or header.
pub fn generate() -> Result<String, getrandom::Error> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes)?;
    Ok(base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes))
}

pub fn to_hex(bytes: &[u8]) -> String {
    let mut s = String::with_capacity(bytes.len() * 2);
    push_hex(&mut s, bytes);
    s
}

/// Appends `bytes` in lowercase hex, 32 bytes at a time through a buffer on the stack.
pub fn push_hex(out: &mut String, bytes: &[u8]) {
    out.reserve(bytes.len() * 2);
    for chunk in bytes.chunks(32) {
        let mut text = [0u8; 64];
        let text = hex_into(&mut text, chunk);
        out.push_str(std::str::from_utf8(text).unwrap_or_default());
    }
}

/// Writes `bytes` in lowercase hex at the start of `out` (which must hold twice as many)
/// and returns that part. Four bytes at a time: their nibbles are spread one per byte of
/// a word and turned into digits together.
pub fn hex_into<'a>(out: &'a mut [u8], bytes: &[u8]) -> &'a [u8] {
    let mut quads = bytes.chunks_exact(4);
    for (quad, text) in quads.by_ref().zip(out.chunks_exact_mut(8)) {
        let word = u32::from_be_bytes([quad[0], quad[1], quad[2], quad[3]]);
        text.copy_from_slice(&hex_word(word).to_be_bytes());
    }
    let done = bytes.len() / 4 * 4;
    for (i, b) in quads.remainder().iter().enumerate() {
        out[(done + i) * 2] = HEX[usize::from(b >> 4)];
        out[(done + i) * 2 + 1] = HEX[usize::from(b & 15)];
    }
    &out[..bytes.len() * 2]
}

const HEX: &[u8; 16] = b"0123456789abcdef";

/// The eight hex digits of `word`, most significant first, as the bytes of a big-endian
/// word.
fn hex_word(word: u32) -> u64 {
    const ONES: u64 = 0x0101_0101_0101_0101;
    let mut n = u64::from(word);
    n = (n | (n << 16)) & 0x0000_ffff_0000_ffff;
    n = (n | (n << 8)) & 0x00ff_00ff_00ff_00ff;
    n = (n | (n << 4)) & 0x0f0f_0f0f_0f0f_0f0f;
    // 1 in each byte whose nibble is 10 or more: those become letters.
    let letters = ((n + 6 * ONES) >> 4) & ONES;
    n + u64::from(b'0') * ONES + letters * u64::from(b'a' - b'0' - 10)
}

pub fn parse_hex32(s: &str) -> Result<[u8; 32], String> {
    let s = s.trim();
    if s.len() != 64 || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err("sha256 must be 64 hex digits (the output of `mcpgate token hash`)".into());
    }
    let mut out = [0u8; 32];
    for (i, chunk) in s.as_bytes().chunks(2).enumerate() {
        let hex = std::str::from_utf8(chunk).expect("ascii hex digits");
        out[i] = u8::from_str_radix(hex, 16).expect("checked hex digits");
    }
    Ok(out)
}

/// The TOML lines that register a token, printed by `mcpgate token new`.
pub fn toml_entry(id: &str, hash: &[u8; 32], profiles: &[String]) -> String {
    let profiles: Vec<String> = profiles.iter().map(|p| format!("{p:?}")).collect();
    format!(
        "[[tokens]]\nid = {id:?}\nsha256 = \"{}\"\nprofiles = [{}]\n",
        to_hex(hash),
        profiles.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hash_matches_sha256sum() {
        // echo -n abc | sha256sum
        assert_eq!(
            to_hex(&Secret("abc").hash()),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn generated_tokens_are_long_and_url_safe() {
        let a = generate().unwrap();
        let b = generate().unwrap();
        assert_eq!(a.len(), 43);
        assert_ne!(a, b);
        assert!(
            a.bytes()
                .all(|c| c.is_ascii_alphanumeric() || c == b'-' || c == b'_')
        );
    }

    #[test]
    fn hex_round_trip() {
        let h = Secret("x").hash();
        assert_eq!(parse_hex32(&to_hex(&h)).unwrap(), h);
        assert!(parse_hex32("zz").is_err());
        assert!(format!("{:?}", Secret("s3cret")).contains("redacted"));
    }

    /// Every byte value in every position of a word, and lengths that leave a remainder,
    /// read as `{:02x}` reads them.
    #[test]
    fn hex_digits_match_format() {
        let all: Vec<u8> = (0..=255u8).chain((0..=255u8).rev()).collect();
        for start in 0..4 {
            for len in [0, 1, 3, 4, 5, 7, 16, 31, 32, 33, 255] {
                let bytes = &all[start..start + len];
                let expected: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
                let mut out = vec![0u8; len * 2];
                assert_eq!(hex_into(&mut out, bytes), expected.as_bytes());
                let mut pushed = String::from("x");
                push_hex(&mut pushed, bytes);
                assert_eq!(pushed, format!("x{expected}"));
            }
        }
    }
}
