//! Configuration: the TOML file (`raw`), its value languages (`units`), name patterns
//! (`glob`) and the compiled, immutable `Snapshot` the request path reads (`compile`).

pub mod compile;
pub mod federation;
pub mod generation;
pub mod glob;
pub mod identity;
pub mod message;
pub mod pins;
pub mod position;
pub mod proxies;
pub mod raw;
pub mod restart;
pub mod tls;
pub mod token;
pub mod units;
pub mod watch;

pub use compile::{
    Address, Auth, Balance, ConfigError, Endpoint, Head, HealthCheck, IDENTITY_FILE_VAR,
    IDENTITY_TOKEN_VAR, Judge, Listener, LogFormat, LogSettings, Outlier, Profile, Protocol, Read,
    Route, RouteMatch, ServerSettings, SessionKey, Sharing, Snapshot, Stages, StdioCommand,
    TelemetrySettings, TokenEntry, Upstream, load, load_str,
};
