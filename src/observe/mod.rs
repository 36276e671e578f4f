//! What operators see: the audit trail (`audit`), Prometheus metrics (`metrics`), the JSON
//! operational log (`log`, and `combined`: the access log in nginx's format) and the
//! admin listener (`admin`).

pub mod admin;
pub mod audit;
pub mod combined;
pub mod log;
pub mod metrics;
pub mod page;
pub mod status;
pub mod trace;
