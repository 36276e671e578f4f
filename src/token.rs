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
/// and returns that part.
pub fn hex_into<'a>(out: &'a mut [u8], bytes: &[u8]) -> &'a [u8] {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    for (pair, b) in out.chunks_exact_mut(2).zip(bytes) {
        pair[0] = HEX[usize::from(b >> 4)];
        pair[1] = HEX[usize::from(b & 15)];
    }
    &out[..bytes.len() * 2]
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
}
