//! A lane's connection to Redis: made within its timeout, kept (pinged, made anew in the
//! background after a failure), and the batches sent over it.

use super::*;

/// Lane `at`'s batching task: takes what queued, at most [`MOST_PER_BATCH`], sends it as
/// one script call and hands out the answers. One call is in flight at a time: while it
/// is, the queue fills the next batch, so batches grow with load. Before a call, the task
/// lets the thread read what its sockets hold (a yield, repeated while that adds to the
/// queue), so requests that arrived together share it. Ends when the store does.
///
/// Every request's answer is due its store timeout after it asked. The queue is in
/// arrival order and the timeout is the store's, so a batch's first request is due
/// first, and a call that waits no longer than that answers each request in time,
/// including those queued behind it. One timer per lane keeps that deadline: it is only
/// ever moved later while it runs, which costs the runtime no new registration (a timer
/// per request did, and woke the thread's own driver on most of them).
pub(super) async fn send_batches(
    store: Weak<RateStore>,
    at: usize,
    mut pending: mpsc::UnboundedReceiver<Pending>,
) {
    let mut batch = Vec::with_capacity(MOST_PER_BATCH);
    let mut timer = std::pin::pin!(tokio::time::sleep(Duration::ZERO));
    while let Some(first) = pending.recv().await {
        batch.push(first);
        for _ in 0..MOST_YIELDS {
            let queued = pending.len();
            tokio::task::yield_now().await;
            if pending.len() == queued {
                break;
            }
        }
        while batch.len() < MOST_PER_BATCH {
            match pending.try_recv() {
                Ok(p) => batch.push(p),
                Err(_) => break,
            }
        }
        // Those whose request already gave up are left out.
        batch.retain(|p: &Pending| !p.answer.is_closed());
        if batch.is_empty() {
            continue;
        }
        let Some(store) = store.upgrade() else { return };
        let answers = store.call(at, &batch, timer.as_mut()).await;
        drop(store);
        for (p, answer) in batch.drain(..).zip(answers) {
            let _ = p.answer.send(answer);
        }
    }
}

/// Makes one connection and loads the script on it, so requests need one round trip.
pub(super) async fn connect(
    client: &redis::Client,
    script: &redis::Script,
) -> Result<MultiplexedConnection, RedisError> {
    // No timeout per command: a script call is bounded by its lane's deadline, and
    // connecting and pings by their callers' timeouts, so the connection keeps no timer
    // of its own for each call.
    let config = AsyncConnectionConfig::new()
        .set_connection_timeout(Some(CONNECT_TIMEOUT))
        .set_response_timeout(None);
    let mut redis = client
        .get_multiplexed_async_connection_with_config(&config)
        .await?;
    script.prepare_invoke().load_async(&mut redis).await?;
    Ok(redis)
}

pub(crate) fn client(settings: &StoreSettings) -> Result<redis::Client, RedisError> {
    let info = settings.url.as_str().into_connection_info()?;
    let mut redis = info.redis_settings().clone();
    if let Some(u) = &settings.username {
        redis = redis.set_username(u);
    }
    if let Some(p) = &settings.password {
        redis = redis.set_password(p);
    }
    // A script call goes out the moment it is written, whatever else is unanswered on
    // the connection (a ping), as nginx's `tcp_nodelay` does for upstreams.
    let tcp = redis::io::tcp::TcpSettings::default().set_nodelay(true);
    redis::Client::open(info.set_redis_settings(redis).set_tcp_settings(tcp))
}

/// Keeps lane `at` connected while the store lives: makes its connection (waiting longer
/// after each failed attempt, up to [`RETRY_MOST`]) when it has none, and pings it every
/// [`PING_EVERY`]. Runs on the lane's thread, so the connection is driven there.
pub(super) async fn keep_connected(
    store: Weak<RateStore>,
    at: usize,
    client: redis::Client,
    broken: Arc<Notify>,
) {
    let mut retry = RETRY_FIRST;
    let mut was_up = false;
    loop {
        let Some(s) = store.upgrade() else { return };
        let lane = &s.lanes[at];
        if let Some(c) = lane.connection.load_full() {
            let mut redis = c.redis.clone();
            let ping = redis::cmd("PING");
            let answer = tokio::time::timeout(CONNECT_TIMEOUT, ping.query_async::<()>(&mut redis));
            if !matches!(answer.await, Ok(Ok(()))) {
                s.drop_connection(at, c.id);
            }
        }
        let mut missing = false;
        if lane.connection.load().is_none() {
            match tokio::time::timeout(CONNECT_TIMEOUT * 2, connect(&client, &s.script)).await {
                Ok(Ok(redis)) => {
                    let id = s.next_id.fetch_add(1, Ordering::Relaxed);
                    lane.connection
                        .store(Some(Arc::new(Connection { id, redis })));
                }
                Ok(Err(error)) => {
                    missing = true;
                    s.note_error(error.to_string());
                    if s.may_warn() {
                        tracing::warn!(store = %s.settings.url, %error, "cannot connect to the rate-limit store; retrying");
                    }
                }
                Err(_) => {
                    missing = true;
                    s.note_error("connecting timed out".into());
                    if s.may_warn() {
                        tracing::warn!(store = %s.settings.url, "connecting to the rate-limit store timed out; retrying");
                    }
                }
            }
            if !lane.tried.swap(true, Ordering::AcqRel) {
                lane.tried_once.notify_waiters();
            }
        }
        let up = lane.connection.load().is_some();
        if at == 0 {
            s.metrics.up.set(i64::from(up));
            if up != was_up {
                if up {
                    tracing::info!(store = %s.settings.url, "rate-limit store connected; rate rules are shared");
                    // Workers waiting to try again may try now.
                    for other in s.lanes.iter().skip(1) {
                        other.broken.notify_one();
                    }
                } else if s.may_warn() {
                    tracing::warn!(store = %s.settings.url, "rate-limit store lost; rate rules follow on_error");
                }
            }
        }
        was_up = up;
        drop(s);
        if missing {
            tokio::select! {
                _ = broken.notified() => {}
                _ = tokio::time::sleep(retry) => {}
            }
            retry = (retry * 2).min(RETRY_MOST);
            continue;
        }
        retry = RETRY_FIRST;
        tokio::select! {
            _ = broken.notified() => {}
            _ = tokio::time::sleep(PING_EVERY) => {}
        }
    }
}
