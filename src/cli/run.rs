//! `mcpgate run`: a gateway's sockets bound, its reload triggers, timers and signals
//! started, and its listeners served through the pipeline until shutdown.

use crate::config;
use crate::gateway::Gateway;
use crate::http::body::GateBody;
use crate::http::request::{ClientRequest, Peer};
pub use crate::http::server::BindError;
use crate::http::server::{self, Service, Sockets};
use crate::pipeline;
use http::Response;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

/// The gateway serves its listeners' requests through the pipeline.
impl Service for Gateway {
    fn settings(&self) -> config::ServerSettings {
        self.live().server.clone()
    }

    fn max_body(&self) -> u64 {
        self.live_here().max_body
    }

    fn handle(
        &self,
        listener: usize,
        peer: Peer,
        req: ClientRequest,
    ) -> impl Future<Output = Response<GateBody>> + Send {
        pipeline::handle(self, listener, peer, req)
    }

    /// stdio upstreams' processes are closed (stdin, SIGTERM, SIGKILL) and reaped while
    /// the workers that read their pipes still run.
    fn drained(&self) -> impl Future<Output = ()> + Send {
        self.close_stdio()
    }
}

/// Binds the gateway's listeners and admin address, and starts the worker threads.
pub async fn bind(gw: &Gateway) -> Result<Sockets, BindError> {
    let live = gw.live();
    server::bind(&live.listeners, &gw.certs, live.admin).await
}

/// Serves the admin endpoints and the listeners until `shutdown` completes, then drains
/// (`/readyz` says so at once) and returns.
pub async fn serve(gw: Arc<Gateway>, mut sockets: Sockets, shutdown: impl Future<Output = ()>) {
    let admin = sockets.admin.take().map(|(addr, socket)| {
        tracing::info!(listener = "admin", addr = %addr, "listening");
        tokio::spawn(crate::observe::admin::serve(gw.clone(), socket))
    });
    let draining = {
        let gw = gw.clone();
        async move {
            shutdown.await;
            gw.start_draining();
        }
    };
    server::serve(gw, sockets, draining).await;
    if let Some(a) = admin {
        a.abort();
    }
}

/// Loads the configuration at `path` into a gateway, binds its sockets, starts the reload
/// triggers and serves until SIGTERM/SIGINT, then drains. What `mcpgate run` does.
pub async fn run(gw: Arc<Gateway>, shutdown: impl Future<Output = ()>) -> Result<(), BindError> {
    // The watcher starts before the sockets are bound (and `listening` is logged): an
    // edit made as soon as the gateway says it listens is seen.
    if let Err(e) = config::watch::spawn(gw.clone()) {
        tracing::warn!("{e}; reload with POST /reload instead");
    }
    let sockets = bind(&gw).await?;
    // Rate-limit state of keys that went quiet is dropped, so memory follows live keys.
    let pruner = {
        let gw = gw.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(30));
            loop {
                tick.tick().await;
                gw.live().limiter.prune();
            }
        })
    };
    // logrotate's convention (as nginx's): SIGUSR1 reopens the audit file.
    #[cfg(unix)]
    let reopener = gw.audit.clone().and_then(|audit| {
        let mut usr1 =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::user_defined1()).ok()?;
        Some(tokio::spawn(async move {
            while usr1.recv().await.is_some() {
                audit.reopen();
            }
        }))
    });
    serve(gw.clone(), sockets, shutdown).await;
    pruner.abort();
    #[cfg(unix)]
    if let Some(r) = reopener {
        r.abort();
    }
    gw.close_audit().await;
    Ok(())
}
