//! A 2026-07-28 client's `subscriptions/listen` to a legacy server: the session's GET
//! stream, with `resources/subscribe` for each resource it names.

use super::*;
use crate::mcp::transport::events::{Carry, Input};

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
    let ack = sse::encode_json(&listen.acknowledged(), None);
    let input = match inner {
        Some(body) => Input::body(body),
        None => Input::nothing(),
    };
    Ok(respond::event_stream(
        gw,
        input.first(ack).carried(Listened(listen)),
        s.shaping,
        &ctx.request_id,
    ))
}

/// What a listen carries of a session's GET stream: the messages its client opted in to.
struct Listened(Listen);

impl Carry for Listened {
    fn carry(&mut self, _: usize, ev: sse::Event) -> Option<sse::Event> {
        ev.data
            .as_deref()
            .and_then(|d| self.0.carry(d))
            .map(sse::Event::json)
    }
}
