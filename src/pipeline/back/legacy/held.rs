//! A 2026-07-28 client's call that a legacy server answers with a request of its own
//! (elicitation, sampling, roots): the client's answer ends with `input_required`, the call
//! is held (`runtime::held`) for at most `[transport] input_timeout`, and the client's retry
//! hands the server its answer and gets the rest of the call. A call whose client left, or
//! whose time is up, is cancelled upstream.

use super::*;

/// A call at the server, answered on an event stream that may ask the client something.
/// Dropped before its answer (the client left, or its retry did not come in time), it is
/// cancelled upstream.
pub(super) struct Call {
    pub(super) live: Arc<Live>,
    pub(super) profile: Arc<Profile>,
    pub(super) fields: Fields,
    pub(super) forwarded_for: HeaderValue,
    pub(super) key: Key,
    pub(super) session: Session,
    /// The call's id at the server, as JSON text.
    pub(super) up_id: Box<str>,
    /// The call as it was sent, which its retries must repeat.
    pub(super) request: Bytes,
    /// The server's answer, until it is read to the call's end.
    pub(super) body: Option<GateBody>,
    pub(super) decoder: sse::Decoder,
    /// What the request (or its latest retry) said of its client: what it can be asked,
    /// and the log level it wants.
    pub(super) client: ClientMeta,
}

/// A call held for its retry, and the server's request the retry answers.
pub(super) struct Holding {
    call: Call,
    /// The server's request; what the client was shown of it is gone.
    asked: ServerRequest,
    /// What a retry must be (`to_legacy::call_digest`).
    digest: [u8; 16],
}

/// How far a call got.
pub(super) enum Step {
    /// Its answer (JSON text, with the server's id).
    Answered(String),
    /// The server asks the client something.
    Asks(ServerRequest),
    /// The first message for the client (`Pass::Peek`): the call goes on.
    Passing(Bytes),
}

/// Where a call's messages before its answer (progress, logs) go.
pub(super) enum Pass<'a> {
    /// Nowhere: the client takes JSON.
    Drop,
    /// Onto the client's event stream.
    To(&'a tokio::sync::mpsc::Sender<Bytes>),
    /// The first one ends the step, as `Step::Passing`.
    Peek,
}

impl Call {
    /// Reads the server's stream until the call's answer or a request for the client,
    /// passing what comes before (progress, logs) to `tx`. The server's `ping` is answered
    /// here; a request the bridge does not carry gets an error.
    async fn step(&mut self, pass: Pass<'_>) -> Result<Step, GateError> {
        loop {
            while let Some(ev) = self.decoder.next_event() {
                let Some(data) = ev.data else { continue };
                if crate::mcp::transport::relay::response_ids(&data).contains(&&*self.up_id) {
                    self.body = None;
                    return Ok(Step::Answered(data));
                }
                if let Some(asked) = msg::server_request(&data) {
                    match asked.method.as_str() {
                        m @ ("elicitation/create" | "sampling/createMessage" | "roots/list") => {
                            let capability = crate::mcp::bridge::capability_of(m);
                            if !self.client.declares(capability) {
                                let refusal = format!(
                                    r#"{{"jsonrpc":"2.0","id":{},"error":{{"code":-32601,"message":"the client did not declare {capability}"}}}}"#,
                                    asked.id
                                );
                                self.tell(&refusal).await?;
                                return Err(GateError::MissingClientCapability(capability));
                            }
                            return Ok(Step::Asks(asked));
                        }
                        "ping" => self.tell(&msg::answer_to_server(&asked.id, "{}")).await?,
                        _ => {
                            let refusal = format!(
                                r#"{{"jsonrpc":"2.0","id":{},"error":{{"code":-32601,"message":"mcpgate does not carry this request to a 2026-07-28 client"}}}}"#,
                                asked.id
                            );
                            self.tell(&refusal).await?;
                        }
                    }
                    continue;
                }
                // A priming event (an id, no message) is for resuming the legacy stream,
                // which a 2026-07-28 client cannot do; log messages go by its level.
                if data.trim().is_empty() || !LogFloor(self.client.level).passes(&data) {
                    continue;
                }
                match pass {
                    Pass::Drop => {}
                    // The client may have left; the call ends when its body is dropped.
                    Pass::To(tx) => {
                        let _ = tx.send(ev.raw).await;
                    }
                    Pass::Peek => return Ok(Step::Passing(ev.raw)),
                }
            }
            let body = self.body.as_mut().ok_or_else(broke)?;
            match body.frame().await {
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        self.decoder.feed(&data);
                    }
                    if self.decoder.pending() > crate::mcp::tools_list::MAX_REWRITE_BYTES {
                        return Err(GateError::UpstreamBadResponse("SSE event too large".into()));
                    }
                }
                Some(Err(e)) if e.is::<crate::http::body::DeadlineExceeded>() => {
                    return Err(GateError::UpstreamTimeout);
                }
                _ => return Err(broke()),
            }
        }
    }

    /// Sends the server `json` (an answer to its request) in the call's session.
    async fn tell(&mut self, json: &str) -> Result<(), GateError> {
        // Borrowed field by field: the body is not `Sync`, and this future is sent.
        tell(
            &self.live,
            &self.profile.upstream,
            &self.fields,
            &self.forwarded_for,
            &self.session,
            json,
        )
        .await
    }
}

pub(super) async fn tell(
    live: &Live,
    upstream: &Upstream,
    fields: &Fields,
    forwarded_for: &HeaderValue,
    session: &Session,
    json: &str,
) -> Result<(), GateError> {
    let mut out = own_request(
        live,
        fields,
        forwarded_for,
        session.to(),
        Method::POST,
        Bytes::from(json.to_string()),
    );
    let answer = forward::send(live, upstream, &mut out).await?;
    let status = answer.response.status();
    drain(answer).await;
    if !status.is_success() {
        return Err(GateError::UpstreamBadResponse(format!(
            "the server answered {status} to the client's input"
        )));
    }
    Ok(())
}

pub(super) fn broke() -> GateError {
    GateError::UpstreamBadResponse("the stream broke off before the answer".into())
}

impl Drop for Call {
    fn drop(&mut self) {
        if self.body.is_none() {
            return;
        }
        // Unanswered: the server is told the call is no longer wanted.
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let (live, profile) = (self.live.clone(), self.profile.clone());
        let (fields, forwarded_for) =
            (std::mem::take(&mut self.fields), self.forwarded_for.clone());
        let session = self.session.clone();
        let cancel = Bytes::from(msg::cancelled(
            &self.up_id,
            "the 2026-07-28 client left, or did not retry in time",
        ));
        rt.spawn(async move {
            let mut out = own_request(
                &live,
                &fields,
                &forwarded_for,
                session.to(),
                Method::POST,
                cancel,
            );
            if let Ok(answer) = forward::send(&live, &profile.upstream, &mut out).await {
                drain(answer).await;
            }
        });
    }
}

/// A retry of a held call: the client's answer goes to the server, and the rest of the
/// call is this request's answer.
pub(super) async fn resume(
    gw: &Gateway,
    b: ToLegacy,
    s: Sending<'_>,
    retry: msg::Retry,
    ctx: &mut Ctx<'_>,
) -> Result<Response<GateBody>, GateError> {
    let (held, token) = gw.held.take(retry.held).ok_or(GateError::BadRequestState)?;
    let holding = match held.downcast::<Holding>() {
        Ok(h) => h,
        Err(other) => {
            gw.held.give_back(retry.held, other, token);
            return Err(GateError::BadRequestState);
        }
    };
    let refuse = |holding: Box<Holding>, why: &str| {
        gw.held.give_back(retry.held, holding, token);
        Err(GateError::InvalidRequest(why.into()))
    };
    if holding.call.key != b.key {
        gw.held.give_back(retry.held, holding, token);
        return Err(GateError::BadRequestState);
    }
    let digest = msg::call_digest(&s.body).map_err(GateError::InvalidRequest)?;
    if digest != retry.digest || digest != holding.digest {
        return refuse(
            holding,
            "the retry is not the call that was asked: its method or arguments differ",
        );
    }
    let Some((_, response)) = retry.responses.iter().find(|(k, _)| k == INPUT) else {
        return refuse(holding, "the retry's inputResponses has no \"input\"");
    };
    let Holding {
        mut call, asked, ..
    } = *holding;
    call.client = b.meta;
    call.tell(&msg::answer_to_server(&asked.id, response))
        .await?;
    drive(gw, call, b.id, s, &ctx.request_id).await
}

/// Plays `call` to its client as the answer to request `id`: as an event stream as it
/// comes (an SSE client), or once its answer is in (JSON).
pub(super) async fn drive(
    gw: &Gateway,
    call: Call,
    id: Box<str>,
    s: Sending<'_>,
    request_id: &str,
) -> Result<Response<GateBody>, GateError> {
    let list = s.shaping.list.clone();
    let life = s.live.config.input_timeout;
    let held = gw.held.clone();
    // Held for its caller: a reload that removes the token, or its expiry, ends it.
    let caller = crate::runtime::held::Caller {
        token: s.shaping.token.filter(|t| t.configured).map(|t| t.key),
        not_after: s.shaping.token.and_then(|t| t.not_after),
    };
    let rid = request_id.to_string();
    let finish = move |call: Call, step: Result<Step, GateError>| -> String {
        let text = match step {
            Ok(Step::Answered(answer)) => {
                let answer = match *call.up_id == *id {
                    true => Ok(answer),
                    false => msg::renumbered(&answer, &id),
                };
                answer.map_err(GateError::UpstreamBadResponse)
            }
            Ok(Step::Asks(mut asked)) => {
                // Read only now that a retry must match it: most calls ask nothing.
                msg::call_digest(&call.request)
                    .map_err(GateError::InvalidRequest)
                    .map(|digest| {
                        let shown = std::mem::take(&mut asked.request);
                        let n = held.hold(
                            Box::new(Holding {
                                call,
                                asked,
                                digest,
                            }),
                            life,
                            caller,
                        );
                        msg::input_required(&id, INPUT, &shown, &msg::held_state(n, &digest))
                    })
            }
            // Only a peek ends a step there.
            Ok(Step::Passing(_)) => Err(GateError::UpstreamBadResponse(
                "the call's stream was left mid-way".into(),
            )),
            Err(e) => Err(e),
        };
        let text = text.and_then(|t| match &list {
            Some(l) => l
                .apply(&t)
                .map(|o| o.unwrap_or(t))
                .map_err(GateError::UpstreamBadResponse),
            None => Ok(t),
        });
        text.unwrap_or_else(|e| {
            let rpc = serde_json::value::RawValue::from_string(id.to_string()).ok();
            String::from_utf8(crate::error::envelope(&e, rpc.as_deref(), &rid))
                .expect("serde_json writes UTF-8")
        })
    };
    // A call that fails for want of a capability the client did not declare, before
    // anything of it reached the client, is refused with a status of its own (400), as a
    // 2026-07-28 server refuses it.
    let mut call = call;
    if s.shaping.want == Want::Json {
        let step = call.step(Pass::Drop).await;
        if let Err(e @ GateError::MissingClientCapability(_)) = step {
            return Err(e);
        }
        return Ok(respond::own(finish(call, step), Want::Json, request_id));
    }
    let first = call.step(Pass::Peek).await;
    if let Err(e @ GateError::MissingClientCapability(_)) = first {
        return Err(e);
    }
    let (tx, rx) = tokio::sync::mpsc::channel(16);
    let task = async move {
        let step = match first {
            Ok(Step::Passing(message)) => {
                // The client may have left; the call ends when its body is dropped.
                let _ = tx.send(message).await;
                call.step(Pass::To(&tx)).await
            }
            other => other,
        };
        let text = finish(call, step);
        let _ = tx.send(sse::encode_json(&text, None)).await;
    };
    Ok(respond::written(Box::pin(task), rx, request_id))
}
