//! A legacy client's call that a 2026-07-28 server answers `input_required`: the server's
//! questions played to the client on the call's event stream, its answers (its POSTs,
//! handed over by `runtime::waits`) read, and the call retried with them, round after
//! round, as a body driven as it is polled (nothing outlives the client).

use super::*;

/// A call that may ask for input, answered: passed on as it is unless it asks, and then
/// played to the client (an event stream it accepts) or refused (JSON only).
pub(super) async fn asked(
    gw: &Gateway,
    bridge: Bridge,
    s: Sending<'_>,
    (method, body, name): (Box<str>, Bytes, Option<String>),
    answer: Answer,
    ctx: &mut Ctx<'_>,
) -> Result<Response<GateBody>, GateError> {
    let want = s.shaping.want;
    let upstream = &s.profile.upstream;
    gw.metrics.observe_upstream(&upstream.name, answer.took);
    ctx.upstream_ms = Some(answer.took.as_secs_f64() * 1000.0);
    let id = bridge.id.clone().unwrap_or_else(|| "null".into());
    let format = wire::headval::body_format(answer.response.headers());
    let status = answer.response.status();
    if status != StatusCode::OK || format == wire::headval::BodyFormat::Other {
        return respond::upstream(gw, answer, s.shaping, &ctx.request_id).await;
    }
    let sse_client = matches!(want, Want::Sse | Want::Either);
    let first = if format == wire::headval::BodyFormat::Json || !sse_client {
        let text = one_message(answer, &id).await?;
        match bridge::asks(&text, &id).map_err(GateError::UpstreamBadResponse)? {
            None => return Ok(respond::own(text, want, &ctx.request_id)),
            Some(_) if !sse_client => {
                return Err(GateError::InputNotBridged(
                    "the server needs input from the client, which can only be asked on an event stream (Accept: text/event-stream)".into(),
                ));
            }
            Some(asks) => Round::Asks(asks),
        }
    } else {
        let (_, body) = answer.response.into_parts();
        Round::Stream(GateBody::Upstream {
            body,
            deadline: answer.deadline,
        })
    };
    let owner = bridge.owner(s.fields);
    let replay = Replay {
        parts: Parts::of(&s, &ctx.request_id, bridge.session),
        waits: gw.waits.clone(),
        method,
        name,
        body,
        client_id: id.clone(),
        id,
        owner,
        revoked: crate::pipeline::auth::Credential::hold(ctx.token, gw),
    };
    let (tx, rx) = tokio::sync::mpsc::channel(16);
    let task = Box::pin(replay.run(first, tx));
    Ok(respond::written(task, rx, &ctx.request_id))
}

/// A round of a call: the upstream's stream still to read, its whole answer (JSON) to
/// send on, or what it asked.
pub(super) enum Round {
    Stream(GateBody),
    Answer(String),
    Asks(Asks),
}

/// A call being played to its client between rounds: owned, as the answer's body outlives
/// the request's stages.
pub(super) struct Replay {
    parts: Parts,
    waits: Arc<Waits>,
    method: Box<str>,
    name: Option<String>,
    /// The 2026-07-28 request, as last sent.
    body: Bytes,
    /// The call's id as the upstream knows it this round, as JSON text: the client's in
    /// the first round, a new one in each retry (a retry is a new request, and its id must
    /// differ from the first's: docs/protocol.md).
    id: Box<str>,
    /// The client's id of the call, which its answer and errors carry.
    client_id: Box<str>,
    owner: Owner,
    /// Ready when the caller's token is revoked or expires: the call ends where it is.
    revoked: Option<crate::runtime::streams::StreamWatch>,
}

/// How a round ended for the client.
pub(super) enum Ending {
    /// The call's answer, sent.
    Answered,
    /// The client left.
    Gone,
    /// The call failed: this error goes to the client as the call's answer.
    Failed(i64, String),
}

impl Replay {
    async fn run(mut self, round: Round, tx: tokio::sync::mpsc::Sender<Bytes>) {
        let mut revoked = self.revoked.take();
        let ending = tokio::select! {
            e = self.rounds(round, &tx) => e,
            () = crate::runtime::streams::until_revoked(&mut revoked) => {
                tracing::info!("a bridged call ended: its caller's token was revoked or expired");
                Ending::Failed(code::UNAUTHORIZED, GateError::Revoked.to_string())
            }
        };
        if let Ending::Failed(code, message) = ending {
            let id = RawValue::from_string(self.client_id.to_string()).ok();
            let json = error_json(id.as_deref(), code, &message, &self.parts.request_id);
            let _ = tx.send(sse::encode_json(&json, None)).await;
        }
    }

    /// The call's rounds until it ends: its answer, its client gone, or a failure.
    async fn rounds(&mut self, mut round: Round, tx: &tokio::sync::mpsc::Sender<Bytes>) -> Ending {
        let mut rounds = 0;
        loop {
            let asks = match round {
                Round::Asks(asks) => asks,
                Round::Answer(text) => {
                    let text = match self.to_client(&text) {
                        Ok(t) => t,
                        Err(e) => break e,
                    };
                    let _ = tx.send(sse::encode_json(&text, None)).await;
                    break Ending::Answered;
                }
                Round::Stream(body) => match self.relay(body, tx).await {
                    Ok(Some(asks)) => asks,
                    Ok(None) => break Ending::Answered,
                    Err(e) => break e,
                },
            };
            rounds += 1;
            if rounds > MAX_ROUNDS {
                break Ending::Failed(
                    code::UPSTREAM,
                    format!(
                        "Upstream error: the server asked for input more than {MAX_ROUNDS} times"
                    ),
                );
            }
            let answers = match self.ask(&asks, tx).await {
                Ok(a) => a,
                Err(e) => break e,
            };
            let retry = match bridge::retry(
                std::str::from_utf8(&self.body).unwrap_or(""),
                &answers,
                asks.state.as_deref(),
            ) {
                Ok(r) => r,
                Err(e) => {
                    break Ending::Failed(code::INVALID_REQUEST, format!("Invalid request: {e}"));
                }
            };
            // A new request, with an id of its own.
            self.id = format!("\"mcpgate-retry-{}\"", self.waits.next()).into();
            let retry = match crate::mcp::to_legacy::renumbered(&retry, &self.id) {
                Ok(r) => r,
                Err(e) => {
                    break Ending::Failed(code::INVALID_REQUEST, format!("Invalid request: {e}"));
                }
            };
            self.body = Bytes::from(retry);
            round = match self.send().await {
                Ok(r) => r,
                Err(e) => break e,
            };
        }
    }

    /// The call's answer `text` (the upstream's) with the client's id.
    fn to_client(&self, text: &str) -> Result<String, Ending> {
        if *self.id == *self.client_id {
            return Ok(text.to_string());
        }
        crate::mcp::to_legacy::renumbered(text, &self.client_id)
            .map_err(|e| Ending::Failed(code::UPSTREAM, format!("Upstream error: {e}")))
    }

    /// Sends the call's retry upstream: the next round.
    async fn send(&self) -> Result<Round, Ending> {
        let failed = |e: GateError| Ending::Failed(e.rpc_code(), e.to_string());
        let answer = self
            .parts
            .send(&self.method, self.body.clone(), self.name.clone(), false)
            .await
            .map_err(failed)?;
        let format = wire::headval::body_format(answer.response.headers());
        if answer.response.status() != StatusCode::OK {
            return Err(Ending::Failed(
                code::UPSTREAM,
                format!(
                    "Upstream error: status {} to a retry",
                    answer.response.status()
                ),
            ));
        }
        if format == wire::headval::BodyFormat::Sse {
            let (_, body) = answer.response.into_parts();
            return Ok(Round::Stream(GateBody::Upstream {
                body,
                deadline: answer.deadline,
            }));
        }
        let text = one_message(answer, &self.id).await.map_err(failed)?;
        match bridge::asks(&text, &self.id) {
            Ok(Some(asks)) => Ok(Round::Asks(asks)),
            Ok(None) => Ok(Round::Answer(text)),
            Err(e) => Err(Ending::Failed(
                code::UPSTREAM,
                format!("Upstream error: {e}"),
            )),
        }
    }

    /// Passes the upstream's events to the client until the call's answer: `Some` when
    /// that asks for input (it is kept), `None` when it was sent on.
    async fn relay(
        &self,
        mut body: GateBody,
        tx: &tokio::sync::mpsc::Sender<Bytes>,
    ) -> Result<Option<Asks>, Ending> {
        use http_body_util::BodyExt;
        let mut decoder = sse::Decoder::new();
        let broke = || {
            Ending::Failed(
                code::UPSTREAM,
                "Upstream error: the stream broke off before the answer".into(),
            )
        };
        loop {
            let Some(frame) = body.frame().await else {
                return Err(broke());
            };
            let data = match frame {
                Ok(f) => match f.into_data() {
                    Ok(d) => d,
                    Err(_) => continue,
                },
                Err(e) if e.is::<crate::http::body::DeadlineExceeded>() => {
                    return Err(Ending::Failed(
                        code::UPSTREAM_TIMEOUT,
                        GateError::UpstreamTimeout.to_string(),
                    ));
                }
                Err(_) => return Err(broke()),
            };
            decoder.feed(&data);
            if decoder.pending() > crate::mcp::tools_list::MAX_REWRITE_BYTES {
                return Err(Ending::Failed(
                    code::UPSTREAM,
                    "Upstream error: SSE event too large".into(),
                ));
            }
            while let Some(ev) = decoder.next_event() {
                let (Some(data), raw) = (ev.data, ev.raw) else {
                    continue;
                };
                let answers_call = relay::response_ids(&data).contains(&&*self.id);
                if answers_call {
                    match bridge::asks(&data, &self.id) {
                        Ok(Some(asks)) => return Ok(Some(asks)),
                        Ok(None) => {
                            // A retry's answer goes to the client under its own id.
                            let raw = match *self.id == *self.client_id {
                                true => raw,
                                false => sse::encode_json(&self.to_client(&data)?, None),
                            };
                            tx.send(raw).await.map_err(|_| Ending::Gone)?;
                            return Ok(None);
                        }
                        Err(e) => {
                            return Err(Ending::Failed(
                                code::UPSTREAM,
                                format!("Upstream error: {e}"),
                            ));
                        }
                    }
                }
                tx.send(raw).await.map_err(|_| Ending::Gone)?;
            }
        }
    }

    /// Asks the client each of `asks`' questions on the stream and waits for all its
    /// answers (at most `[transport] input_timeout`): each key with the client's result.
    async fn ask(
        &self,
        asks: &Asks,
        tx: &tokio::sync::mpsc::Sender<Bytes>,
    ) -> Result<Vec<(String, Box<RawValue>)>, Ending> {
        let mut waiting = Vec::with_capacity(asks.requests.len());
        for (key, method, request) in &asks.requests {
            let capability = bridge::capability_of(method);
            if !self.parts.session.declares(capability) {
                return Err(Ending::Failed(
                    code::INVALID_REQUEST,
                    format!(
                        "Input required: the server asks for `{method}`, and the client did not declare `{capability}`"
                    ),
                ));
            }
            let qid = format!("\"mcpgate-{}\"", self.waits.next());
            let waiter = self.waits.ask(&qid, self.owner);
            let json = bridge::client_request(&qid, request);
            tx.send(sse::encode_json(&json, None))
                .await
                .map_err(|_| Ending::Gone)?;
            waiting.push((key.clone(), method.as_str(), waiter));
        }
        let limit = tokio::time::sleep(self.parts.live.config.input_timeout);
        tokio::pin!(limit);
        let mut answers = Vec::with_capacity(waiting.len());
        for (key, method, mut waiter) in waiting {
            let answer = tokio::select! {
                a = &mut waiter.answer => a.map_err(|_| Ending::Gone)?,
                _ = &mut limit => return Err(Ending::Failed(
                    code::UPSTREAM_TIMEOUT,
                    format!("Input required: the client did not answer the server's `{method}` in time"),
                )),
                _ = tx.closed() => return Err(Ending::Gone),
            };
            answers.push((key, result_of(&answer, method)?));
        }
        Ok(answers)
    }
}

/// The result of the client's answer (a JSON-RPC response it POSTed) to a question of
/// `method`; its error fails the call.
pub(super) fn result_of(answer: &[u8], method: &str) -> Result<Box<RawValue>, Ending> {
    #[derive(serde::Deserialize)]
    struct Response {
        result: Option<Box<RawValue>>,
        error: Option<ErrorBody>,
    }
    #[derive(serde::Deserialize)]
    struct ErrorBody {
        #[serde(default)]
        message: String,
    }
    match serde_json::from_slice::<Response>(answer) {
        Ok(Response {
            result: Some(r), ..
        }) if r.get().trim_start().starts_with('{') => Ok(r),
        Ok(Response { error: Some(e), .. }) => Err(Ending::Failed(
            code::INVALID_REQUEST,
            format!(
                "Input required: the client refused the server's `{method}`: {}",
                e.message
            ),
        )),
        _ => Err(Ending::Failed(
            code::INVALID_REQUEST,
            format!("Input required: the client's answer to `{method}` holds no result object"),
        )),
    }
}
