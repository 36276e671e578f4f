//! The fronts: what a client of each generation sends, turned into the exchange the stages
//! read, and the answers turned back. The legacy front (`legacy`) owns a legacy client's
//! sessions, `initialize`, its GET stream and its questions; a 2026-07-28 client's
//! `_meta`, header rules and `input_required` rounds are read by the `headers` and
//! `rounds` stages, which need no state of their own.

pub mod legacy;
