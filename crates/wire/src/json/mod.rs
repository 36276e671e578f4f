//! JSON: a strict one-pass reader that agrees with serde_json or steps aside (`read`), and
//! text written by hand exactly as serde_json writes it (`text`).

pub mod read;
pub mod text;
