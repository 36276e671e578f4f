//! The protocol without sockets: JSON-RPC classification (`jsonrpc`) over a strict JSON
//! reader (`jsonread`), JSON text written by hand (`jsontext`), the list filters
//! (`tools_list`), JSON pointers into arguments (`pointer`), and the Streamable HTTP
//! transport's formats (`transport`).

pub mod jsonread;
pub mod jsonrpc;
pub mod jsontext;
pub mod list_changes;
pub mod pointer;
pub mod tools_list;
pub mod transport;
