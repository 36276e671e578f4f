//! A 2026-07-28 client's `subscriptions/listen` to a legacy server: the session's GET
//! stream, with `resources/subscribe` for each resource it names.

use super::*;

/// `subscriptions/listen`: the resources it names subscribed to, then the session's GET
/// stream, of which the client gets what it opted in to.
pub(super) async fn listen(
    gw: &Gateway,
    b: ToLegacy,
    s: Sending<'_>,
    ctx: &mut Ctx<'_>,
) -> Result<Response<GateBody>, GateError> {
    let mut listen = Listen::of(&s.body).map_err(GateError::InvalidRequest)?;
    let mut kept = Vec::with_capacity(listen.uris.len());
    for (n, uri) in listen.uris.iter().enumerate() {
        let body = Bytes::from(msg::subscribe_request(uri, n));
        let (answer, _) = send(&s, &b, Method::POST, body).await?;
        let id = format!("\"mcpgate-subscribe-{n}\"");
        let text = one_message(answer, &id).await?;
        let accepted = serde_json::from_str::<serde_json::Value>(&text)
            .is_ok_and(|v| v.get("result").is_some_and(serde_json::Value::is_object));
        if accepted {
            kept.push(uri.clone());
        } else {
            tracing::info!(%uri, "the legacy server refused a resource subscription");
        }
    }
    listen.uris = kept;
    let (answer, _) = send(&s, &b, Method::GET, Bytes::new()).await?;
    let streams = answer.response.status() == StatusCode::OK
        && wire::headval::body_format(answer.response.headers()) == wire::headval::BodyFormat::Sse;
    let inner = match streams {
        true => {
            let deadline = answer.deadline;
            let (_, body) = answer.response.into_parts();
            Some(GateBody::Upstream { body, deadline })
        }
        // A server without a GET stream sends nothing about no call: the client's stream
        // carries only mcpgate's own notices.
        false => {
            drain(answer).await;
            None
        }
    };
    let body = ListenBody {
        ack: Some(sse::encode_json(&listen.acknowledged(), None)),
        inner,
        decoder: sse::Decoder::new(),
        listen,
    };
    Ok(respond::event_stream(
        gw,
        GateBody::Boxed(BodyExt::boxed_unsync(body)),
        s.shaping,
        &ctx.request_id,
    ))
}

/// A listen stream made of a session's GET stream.
pub(super) struct ListenBody {
    ack: Option<Bytes>,
    inner: Option<GateBody>,
    decoder: sse::Decoder,
    listen: Listen,
}

impl http_body::Body for ListenBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = &mut *self;
        if let Some(ack) = this.ack.take() {
            return Poll::Ready(Some(Ok(Frame::data(ack))));
        }
        loop {
            while let Some(ev) = this.decoder.next_event() {
                if let Some(carried) = ev.data.as_deref().and_then(|d| this.listen.carry(d)) {
                    return Poll::Ready(Some(Ok(Frame::data(sse::encode_json(&carried, None)))));
                }
            }
            let Some(inner) = this.inner.as_mut() else {
                return Poll::Pending;
            };
            match std::task::ready!(Pin::new(inner).poll_frame(cx)) {
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        this.decoder.feed(&data);
                    }
                }
                Some(Err(e)) => return Poll::Ready(Some(Err(e))),
                None => return Poll::Ready(None),
            }
        }
    }
}
