//! A legacy client's GET stream to a 2026-07-28 server: the session's
//! `subscriptions/listen`, opened anew when the client subscribes or unsubscribes.

use super::*;
use crate::mcp::transport::events::Input;

/// A bridged GET: the session's `subscriptions/listen` (to every list change and the
/// resources its client subscribed to), whose acknowledgement and closing answer the
/// legacy client does not get. When the client subscribes or unsubscribes, a listen with
/// the new set is opened, and the old one closed once the new one answers: a notification
/// may come twice across the change, none is lost.
pub(in crate::pipeline) async fn stream(
    gw: &Gateway,
    bridge: Bridge,
    mut s: Sending<'_>,
    ctx: &mut Ctx<'_>,
) -> Result<Response<GateBody>, GateError> {
    s.shaping.legacy_stream = true;
    let upstream = &s.profile.upstream;
    let owner = bridge.owner(s.fields);
    let sessionless = owner == [0; 32];
    let mut subscribed = (!sessionless).then(|| gw.legacy_sessions.watch(&owner));
    let wanted = subscribed
        .as_mut()
        .map(|w| w.borrow_and_update().clone())
        .unwrap_or_default();
    let level = gw.legacy_sessions.level(&owner);
    let body = Bytes::from(bridge::listen_request(
        &with_level(&bridge.session, level),
        &wanted.uris,
    ));
    let answer = forward::send(
        s.live,
        upstream,
        &mut s.out(bridge.session.caller, "subscriptions/listen", body, None),
    )
    .await?;
    let listening = answer.response.status() == StatusCode::OK
        && wire::headval::body_format(answer.response.headers()) == wire::headval::BodyFormat::Sse;
    let Some(subscribed) = subscribed.filter(|_| listening) else {
        return respond::answer(gw, answer, s.shaping, upstream, ctx).await;
    };
    gw.metrics.observe_upstream(&upstream.name, answer.took);
    ctx.upstream_ms = Some(answer.took.as_secs_f64() * 1000.0);
    gw.legacy_sessions.followed(&owner, wanted.version);
    let (_, first) = answer.response.into_parts();
    let relisten = Relisten {
        parts: Parts::of(&s, &ctx.request_id, bridge.session),
        sessions: gw.legacy_sessions.clone(),
        owner,
        subscribed,
    };
    let (tx, rx) = tokio::sync::mpsc::channel(16);
    let first = GateBody::Upstream {
        body: first,
        deadline: None,
    };
    let input = Input::task(Box::pin(relisten.run(first, tx)), rx);
    Ok(respond::event_stream(gw, input, s.shaping, &ctx.request_id))
}

/// A bridged GET stream that follows its session's subscriptions: owned, as the answer's
/// body outlives the request's stages.
pub(super) struct Relisten {
    parts: Parts,
    sessions: Arc<crate::runtime::legacy_sessions::LegacySessions>,
    owner: Owner,
    subscribed: crate::runtime::legacy_sessions::Subscribed,
}

impl Relisten {
    /// Passes the listen stream's whole events on (a switch to a new listen never cuts
    /// one), until the upstream ends it, the client leaves or the session ends.
    async fn run(mut self, mut current: GateBody, tx: tokio::sync::mpsc::Sender<Bytes>) {
        use http_body_util::BodyExt;
        let mut decoder = sse::Decoder::new();
        loop {
            tokio::select! {
                frame = current.frame() => {
                    let Some(Ok(frame)) = frame else { return };
                    let Ok(data) = frame.into_data() else { continue };
                    if !pass_events(&mut decoder, &data, &tx).await {
                        return;
                    }
                }
                changed = self.subscribed.changed() => {
                    if changed.is_err() {
                        return;
                    }
                    let wanted = self.subscribed.borrow_and_update().clone();
                    match self.listen(&wanted.uris).await {
                        Ok((next, next_decoder, early)) => {
                            // What the old stream had already sent goes on before it closes.
                            while let Some(Some(Ok(frame))) =
                                futures_util::FutureExt::now_or_never(current.frame())
                            {
                                if let Ok(data) = frame.into_data()
                                    && !pass_events(&mut decoder, &data, &tx).await
                                {
                                    return;
                                }
                            }
                            current = next;
                            decoder = next_decoder;
                            self.sessions.followed(&self.owner, wanted.version);
                            for ev in early {
                                if tx.send(ev).await.is_err() {
                                    return;
                                }
                            }
                        }
                        Err(e) => {
                            tracing::warn!(error = %e, "a bridged GET stream could not follow its subscriptions; the previous ones stay");
                        }
                    }
                }
                _ = tx.closed() => return,
            }
        }
    }

    /// A new listen stream for `uris`, read up to the server's acknowledgement (at most the
    /// upstream's timeout): from then on it sends what they name. With it, the decoder
    /// that read it and the events before the acknowledgement.
    async fn listen(
        &self,
        uris: &[Box<str>],
    ) -> Result<(GateBody, sse::Decoder, Vec<Bytes>), GateError> {
        let body = bridge::listen_request(
            &with_level(&self.parts.session, self.sessions.level(&self.owner)),
            uris,
        );
        let answer = self
            .parts
            .send("subscriptions/listen", Bytes::from(body), None, true)
            .await?;
        let format = wire::headval::body_format(answer.response.headers());
        if answer.response.status() != StatusCode::OK || format != wire::headval::BodyFormat::Sse {
            return Err(GateError::UpstreamBadResponse(format!(
                "the upstream answered {} to a subscriptions/listen",
                answer.response.status()
            )));
        }
        let (_, body) = answer.response.into_parts();
        let mut body = GateBody::Upstream {
            body,
            deadline: None,
        };
        let mut decoder = sse::Decoder::new();
        let mut early = Vec::new();
        let acknowledged = async {
            use http_body_util::BodyExt;
            loop {
                let Some(Ok(frame)) = body.frame().await else {
                    return false;
                };
                let Ok(data) = frame.into_data() else {
                    continue;
                };
                decoder.feed(&data);
                while let Some(ev) = decoder.next_event() {
                    if ev.data.as_deref().is_some_and(bridge::is_acknowledgement) {
                        return true;
                    }
                    early.push(ev.raw);
                }
            }
        };
        match tokio::time::timeout(self.parts.timeout, acknowledged).await {
            Ok(true) => Ok((body, decoder, early)),
            Ok(false) => Err(GateError::UpstreamBadResponse(
                "the listen stream ended before its acknowledgement".into(),
            )),
            Err(_) => Err(GateError::UpstreamTimeout),
        }
    }
}

/// Sends each whole event `data` completes; `false` when the client has left.
pub(super) async fn pass_events(
    decoder: &mut sse::Decoder,
    data: &[u8],
    tx: &tokio::sync::mpsc::Sender<Bytes>,
) -> bool {
    decoder.feed(data);
    while let Some(ev) = decoder.next_event() {
        if tx.send(ev.raw).await.is_err() {
            return false;
        }
    }
    true
}
