//! The gateway's upstream connection pools, kept across reloads. A pool is keyed by what
//! its connections depend on (host and port or socket path, connect timeout, TLS settings): a reload that keeps those
//! (a token rotation, a new profile, a changed timeout) keeps the pool and its open
//! connections; a changed address gets a new pool, and the old one closes once the last
//! request of the old configuration is done with it.

use super::order::Order;
use super::pool::Pool;
use crate::config::tls::UpstreamTls;
use crate::config::{Address, Upstream};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

/// What an upstream's connections are made with; equal keys share pools.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Key {
    address: Address,
    connect_timeout: Duration,
    /// The TLS settings' digest (`UpstreamTls::identity`), for an https upstream.
    tls: Option<[u8; 32]>,
}

impl Key {
    fn of(upstream: &Upstream) -> Key {
        Key {
            address: upstream.address.clone(),
            connect_timeout: upstream.connect_timeout,
            tls: upstream.tls.as_ref().map(|t| t.identity),
        }
    }
}

/// One upstream's pools: one per worker thread (see `runtime::workers::slot`), made on
/// first use, so a connection is only ever driven by the worker whose requests use it;
/// and the order of its sessions' requests, which every worker shares.
pub struct WorkerPools {
    key: Key,
    tls: Option<Arc<UpstreamTls>>,
    pools: Box<[OnceLock<Arc<Pool>>]>,
    pub order: Order,
}

impl WorkerPools {
    fn new(key: Key, tls: Option<Arc<UpstreamTls>>) -> WorkerPools {
        WorkerPools {
            key,
            tls,
            pools: (0..=crate::runtime::workers::count())
                .map(|_| OnceLock::new())
                .collect(),
            order: Order::default(),
        }
    }

    /// This thread's pool.
    pub fn here(&self) -> &Arc<Pool> {
        let slot = crate::runtime::workers::slot() % self.pools.len();
        self.pools[slot].get_or_init(|| {
            Pool::new(
                self.key.address.clone(),
                self.tls.clone(),
                self.key.connect_timeout,
            )
        })
    }
}

/// The pools of the configuration in force, by key.
#[derive(Default)]
pub struct Registry {
    current: Mutex<HashMap<Key, Arc<WorkerPools>>>,
}

impl Registry {
    /// The pools for `upstreams`, in their order (an upstream's `index`): those whose key
    /// the current configuration has too are kept, the others made. Pools no upstream
    /// names any more are let go.
    pub fn table(&self, upstreams: &BTreeMap<String, Arc<Upstream>>) -> Box<[Arc<WorkerPools>]> {
        let mut current = self.current.lock().unwrap_or_else(|p| p.into_inner());
        let mut next = HashMap::new();
        let mut ordered: Vec<&Arc<Upstream>> = upstreams.values().collect();
        ordered.sort_by_key(|u| u.index);
        let table = ordered
            .into_iter()
            .map(|u| {
                let key = Key::of(u);
                let pools = next
                    .get(&key)
                    .or_else(|| current.get(&key))
                    .cloned()
                    .unwrap_or_else(|| Arc::new(WorkerPools::new(key.clone(), u.tls.clone())));
                next.insert(key, pools.clone());
                pools
            })
            .collect();
        *current = next;
        table
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn upstreams(url: &str, timeout: &str) -> BTreeMap<String, Arc<Upstream>> {
        let text = format!(
            "[[listen]]\nname = \"m\"\naddr = \"127.0.0.1:0\"\n[upstreams.a]\nurl = \"{url}\"\nconnect_timeout = \"{timeout}\"\n[upstreams.b]\nurl = \"http://127.0.0.1:9/mcp\"\n[profiles.p]\nupstream = \"a\"\nallow = [\"*\"]\n"
        );
        crate::config::load_str(&text, "f.toml").unwrap().upstreams
    }

    /// Pools are matched by address and connect timeout: the same ones are kept, a
    /// changed one is made anew, and the table follows the upstreams' order.
    #[test]
    fn pools_are_kept_by_their_settings() {
        let registry = Registry::default();
        let first = registry.table(&upstreams("http://127.0.0.1:8000/mcp", "5s"));
        let again = registry.table(&upstreams("http://127.0.0.1:8000/other", "5s"));
        assert!(
            Arc::ptr_eq(&first[0], &again[0]),
            "the path is not a connection setting"
        );
        assert!(Arc::ptr_eq(&first[1], &again[1]));
        let moved = registry.table(&upstreams("http://127.0.0.1:8001/mcp", "5s"));
        assert!(!Arc::ptr_eq(&again[0], &moved[0]), "another port");
        assert!(Arc::ptr_eq(&again[1], &moved[1]));
        let slower = registry.table(&upstreams("http://127.0.0.1:8001/mcp", "9s"));
        assert!(
            !Arc::ptr_eq(&moved[0], &slower[0]),
            "another connect timeout"
        );
        // A pool no configuration names any more is let go, not kept for later.
        let back = registry.table(&upstreams("http://127.0.0.1:8000/mcp", "5s"));
        assert!(!Arc::ptr_eq(&first[0], &back[0]));
    }
}
