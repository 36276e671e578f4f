//! A stdio upstream's sessions: found for a request (and its caller), the GET stream,
//! DELETE, the end of a session and of every one, and the idle sweep.

use super::*;

impl StdioUpstream {
    /// The session `id` names, if `caller` opened it (docs/oauth.md: the process of a session
    /// may have been told whom it serves). mcpgate's own requests name no caller.
    pub(super) fn session(
        &self,
        id: &[u8],
        caller: Option<CallerKey>,
    ) -> Result<Arc<Session>, GateError> {
        let id = std::str::from_utf8(id).map_err(|_| GateError::SessionNotFound)?;
        let mut sessions = self.sessions.lock().unwrap_or_else(|p| p.into_inner());
        let session = sessions
            .get(id)
            .filter(|s| opened_by(s, caller))
            .cloned()
            .ok_or(GateError::SessionNotFound)?;
        if session.child.is_gone() {
            // Its process died: so did the session.
            sessions.remove(id);
            return Err(GateError::SessionNotFound);
        }
        Ok(session)
    }

    pub(super) fn open_stream(
        &self,
        session: Option<&[u8]>,
        caller: Option<CallerKey>,
    ) -> Result<Response<UpstreamBody>, GateError> {
        let id = session.ok_or_else(|| {
            GateError::InvalidRequest("Mcp-Session-Id is required (initialize first)".into())
        })?;
        let session = self.session(id, caller)?;
        let mut stream = session.stream.lock().unwrap_or_else(|p| p.into_inner());
        if stream.as_ref().is_some_and(|s| !s.is_closed()) {
            return Err(GateError::StreamConflict);
        }
        let (tx, rx) = mpsc::channel(child::CALL_QUEUE);
        session.child.listen(tx.clone());
        *stream = Some(tx);
        let mut r = Response::new(UpstreamBody::Messages { first: None, rx });
        r.headers_mut().insert(http::header::CONTENT_TYPE, SSE);
        Ok(r)
    }

    pub(super) fn delete(
        &self,
        session: Option<&[u8]>,
        caller: Option<CallerKey>,
    ) -> Result<Response<UpstreamBody>, GateError> {
        let id = session.ok_or_else(|| {
            GateError::InvalidRequest("Mcp-Session-Id is required (initialize first)".into())
        })?;
        let id = std::str::from_utf8(id).map_err(|_| GateError::SessionNotFound)?;
        let mut sessions = self.sessions.lock().unwrap_or_else(|p| p.into_inner());
        if !sessions.get(id).is_some_and(|s| opened_by(s, caller)) {
            return Err(GateError::SessionNotFound);
        }
        let session = sessions.remove(id).ok_or(GateError::SessionNotFound)?;
        drop(sessions);
        self.end(session);
        Ok(empty(StatusCode::OK))
    }

    /// A session is over: its stream ends and (per_client) its process is closed.
    pub(super) fn end(&self, session: Arc<Session>) {
        let stream = session
            .stream
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        if let Some(tx) = stream {
            session.child.unlisten(&tx);
        }
        if self.command.sessions == Sharing::PerClient {
            background(async move { session.child.close().await });
        }
    }

    /// Ends every session and closes every process, and waits for them to exit: a reload
    /// that removed or changed the upstream, or shutdown.
    pub async fn close_all(&self) {
        let mut sessions: Vec<Arc<Session>> = self
            .sessions
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .drain()
            .map(|(_, s)| s)
            .collect();
        sessions.extend(
            self.callers
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .drain()
                .map(|(_, s)| s),
        );
        let mut children: Vec<Arc<Child>> = sessions.iter().map(|s| s.child.clone()).collect();
        if let Some((c, _)) = self.shared.lock().await.take() {
            children.push(c);
        }
        if let Some(c) = self.modern.lock().await.take() {
            children.push(c);
        }
        children.sort_by_key(|c| c.pid());
        children.dedup_by_key(|c| c.pid());
        drop(sessions);
        futures_util::future::join_all(children.iter().map(|c| c.close())).await;
    }

    pub(super) fn now_ms(&self) -> u64 {
        self.started.elapsed().as_millis() as u64
    }

    /// Ends the sessions and callers idle for `idle_timeout` and forgets calls whose
    /// clients left.
    pub(super) fn sweep_once(&self) {
        let limit = self.command.idle_timeout.as_millis() as u64;
        let now = self.now_ms();
        let idle = |s: &Arc<Session>| {
            now.saturating_sub(s.used.load(Ordering::Relaxed)) >= limit || s.child.is_gone()
        };
        let mut ended: Vec<Arc<Session>> = Vec::new();
        take_idle(
            &mut self.sessions.lock().unwrap_or_else(|p| p.into_inner()),
            idle,
            &mut ended,
        );
        let sessions = ended.len();
        take_idle(
            &mut self.callers.lock().unwrap_or_else(|p| p.into_inner()),
            idle,
            &mut ended,
        );
        for (i, s) in ended.into_iter().enumerate() {
            let what = if i < sessions {
                "session"
            } else {
                "modern caller"
            };
            tracing::info!(upstream = %self.name, pid = s.child.pid(), "stdio {what} ended: idle");
            self.end(s);
        }
        let sessions = self.sessions.lock().unwrap_or_else(|p| p.into_inner());
        let callers = self.callers.lock().unwrap_or_else(|p| p.into_inner());
        for s in sessions.values().chain(callers.values()) {
            s.child.sweep();
        }
    }

    /// Processes running now, and sessions open (for the status page).
    pub fn counts(&self) -> (usize, usize) {
        let sessions = self.sessions.lock().map_or(0, |s| s.len())
            + self.callers.lock().map_or(0, |s| s.len());
        (
            self.processes.load(std::sync::atomic::Ordering::Relaxed),
            sessions,
        )
    }
}

/// Moves the sessions `idle` says are over out of `map` into `ended`.
pub(super) fn take_idle<K>(
    map: &mut HashMap<K, Arc<Session>>,
    idle: impl Fn(&Arc<Session>) -> bool,
    ended: &mut Vec<Arc<Session>>,
) {
    map.retain(|_, s| {
        if idle(s) {
            ended.push(s.clone());
            return false;
        }
        true
    });
}

/// Sweeps every quarter of the idle timeout (1 s to 30 s), while the upstream lives.
pub(super) async fn sweep(up: Weak<StdioUpstream>) {
    let every = match up.upgrade() {
        Some(u) => {
            (u.command.idle_timeout / 4).clamp(Duration::from_secs(1), Duration::from_secs(30))
        }
        None => return,
    };
    loop {
        tokio::time::sleep(every).await;
        let Some(up) = up.upgrade() else { return };
        up.sweep_once();
    }
}

/// Whether a request of `caller` may use `session`: one of the caller that opened it, or
/// one of mcpgate's own (no caller).
pub(super) fn opened_by(session: &Session, caller: Option<CallerKey>) -> bool {
    match (session.opener, caller) {
        (Some(opener), Some(caller)) => opener == caller,
        _ => true,
    }
}
