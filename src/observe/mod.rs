//! What operators see: the audit trail (`audit`), Prometheus metrics (`metrics`), the JSON
//! operational log (`log`) and the admin listener (`admin`).

pub mod admin;
pub mod audit;
pub mod log;
pub mod metrics;
