//! The protocol without sockets: JSON-RPC classification (`jsonrpc`) over the strict JSON
//! reader of the `wire` crate (`wire::json`, which also writes JSON text), the list filters
//! (`tools_list`), JSON pointers into arguments (`pointer`), the guardrails' detectors
//! (`guard`), and the Streamable HTTP transport's formats (`transport`).

pub mod approvals;
pub mod bridge;
pub mod discover;
pub mod era;
pub mod federation;
pub mod guard;
pub mod jsonrpc;
pub mod list_changes;
pub mod listen;
pub mod meta_trace;
pub mod pointer;
pub mod rounds;
pub mod task_ids;
pub mod to_legacy;
pub mod tools_list;
pub mod transport;
