//! Where a process's messages go: an answer to the call that asked (its id back to the
//! caller's), a request or notification of a call to that call's stream, anything else to
//! the GET streams listening; a cancel renumbered to the process's own ids.

use super::*;

impl Child {
    /// Routes one message the child wrote.
    pub(super) async fn route(&self, mut message: Value) {
        if message.get("method").is_none() {
            return self.answer(message).await;
        }
        let target = {
            let mut routing = self.routing.lock().unwrap_or_else(|p| p.into_inner());
            let by_token = (message["method"] == "notifications/progress")
                .then(|| message["params"]["progressToken"].to_string())
                .and_then(|t| routing.progress.get(&t).cloned());
            let by_subscription = message
                .get("params")
                .and_then(subscription_of)
                .and_then(|n| routing.pending.get(&n))
                .map(|p| {
                    set_subscription(&mut message, "params", &p.id);
                    p.call.clone()
                });
            routing.calls.retain(|c| !c.tx.is_closed());
            match by_subscription
                .or(by_token)
                .or_else(|| routing.calls.last().cloned())
            {
                Some(call) => Target::Call(call.tx.clone()),
                None => {
                    routing.listeners.retain(|l| !l.is_closed());
                    Target::Listeners(routing.listeners.clone())
                }
            }
        };
        let event = event(&message);
        match target {
            Target::Call(tx) => {
                if tx.send(Ok(event)).await.is_err() {
                    tracing::debug!(upstream = %self.upstream, method = %message["method"], "a message of the stdio server's reached no client: its call's client left");
                }
            }
            Target::Listeners(listeners) => {
                // A request of the child's goes to one client; a notification to each.
                let one = message.get("id").is_some();
                let mut sent = false;
                for l in listeners {
                    if l.send(Ok(event.clone())).await.is_ok() {
                        sent = true;
                        if one {
                            break;
                        }
                    }
                }
                if !sent {
                    tracing::debug!(upstream = %self.upstream, method = %message["method"], "a message of the stdio server's reached no client");
                }
            }
        }
    }

    /// An answer: back to its call, with the client's id.
    pub(super) async fn answer(&self, mut message: Value) {
        let found = {
            let mut routing = self.routing.lock().unwrap_or_else(|p| p.into_inner());
            let found = message["id"]
                .as_u64()
                .and_then(|n| routing.pending.remove(&n));
            if let Some(p) = &found
                && p.call.left.fetch_sub(1, Ordering::Relaxed) == 1
            {
                // Its last answer: the call leaves the routing, so its stream ends once
                // this event is sent.
                routing.calls.retain(|c| !Arc::ptr_eq(c, &p.call));
                routing.progress.retain(|_, c| !Arc::ptr_eq(c, &p.call));
            }
            found
        };
        let Some(Pending {
            id,
            call,
            lists_tools,
        }) = found
        else {
            tracing::warn!(upstream = %self.upstream, id = %message["id"], "the stdio server answered an id nobody asked with; dropped");
            return;
        };
        if lists_tools {
            self.params.learn(&message["result"]);
        }
        if message.get("result").and_then(subscription_of).is_some() {
            set_subscription(&mut message, "result", &id);
        }
        message["id"] = serde_json::from_str(id.get()).expect("it was JSON");
        let _ = call.tx.send(Ok(event(&message))).await;
        if call.left.load(Ordering::Relaxed) == 0 {
            call.over.notify_one();
        }
    }
}

impl Routing {
    /// Puts the child's number for the request a client's `notifications/cancelled` names,
    /// among `owner`'s calls; false when it names none of them.
    pub(super) fn renumber_cancel(&self, cancel: &mut Value, owner: u64) -> bool {
        let Some(named) = cancel.pointer("/params/requestId") else {
            return false;
        };
        let named = named.to_string();
        let ours = self
            .pending
            .iter()
            .find(|(_, p)| p.call.owner == owner && p.id.get().trim() == named)
            .map(|(n, _)| *n);
        match ours {
            Some(n) => {
                cancel["params"]["requestId"] = Value::from(n);
                true
            }
            None => false,
        }
    }
}

/// The child's number in a `_meta` subscription id (of `params` or `result`).
pub(super) fn subscription_of(holder: &Value) -> Option<u64> {
    holder.get("_meta")?.get(SUBSCRIPTION_ID)?.as_u64()
}

/// Puts the client's id in `message[part]._meta`'s subscription id.
pub(super) fn set_subscription(message: &mut Value, part: &str, id: &RawValue) {
    if let Some(meta) = message
        .get_mut(part)
        .and_then(|p| p.get_mut("_meta"))
        .and_then(Value::as_object_mut)
    {
        meta.insert(
            SUBSCRIPTION_ID.to_string(),
            serde_json::from_str(id.get()).expect("it was JSON"),
        );
    }
}

pub(super) enum Target {
    Call(mpsc::Sender<Result<Bytes, BodyError>>),
    Listeners(Vec<mpsc::Sender<Result<Bytes, BodyError>>>),
}

/// A message as one SSE event.
pub fn event(message: &Value) -> Bytes {
    let mut out = b"event: message\ndata: ".to_vec();
    serde_json::to_writer(&mut out, message).expect("a JSON value");
    out.extend_from_slice(b"\n\n");
    Bytes::from(out)
}

/// A request: a method and an id.
pub fn is_request(m: &Value) -> bool {
    m.get("method").is_some() && m.get("id").is_some_and(|id| !id.is_null())
}

pub(super) fn progress_token(m: &Value) -> Option<String> {
    let token = m.get("params")?.get("_meta")?.get("progressToken")?;
    Some(token.to_string())
}
