//! The legacy front's part in approvals (docs/approvals.md): a legacy client is asked about
//! its call on the call's own event stream (an `elicitation/create` request), and the call
//! is held there with what the stages granted it (`resume`); the client's answer, POSTed
//! in its session, reaches the waiting call ([`answer`]); approved, the call goes on from
//! where it was held, its answer relayed on the same stream. Only sessions whose client
//! declared elicitation when it initialized can be asked ([`notes_elicitation`]).

use super::resume::Later;
use crate::config::Profile;
use crate::config::compile::{ApprovalRule, Approver};
use crate::error::GateError;
use crate::gateway::Gateway;
use crate::http::body::GateBody;
use crate::mcp::approvals::{self as msg, Answer};
use crate::mcp::jsonrpc::{MessageKind, Payload};
use crate::mcp::transport::accept::Want;
use crate::mcp::transport::sse;
use crate::observe::audit;
use crate::pipeline::approvals::{Left, QUESTION, Question, REVOKED, note, record, write};
use crate::pipeline::{Ctx, Exchange, Granted};
use bytes::Bytes;
use http::Response;
use http_body_util::BodyExt;
use sha2::{Digest, Sha256};
use std::sync::Arc;
use wire::fields::{FieldKind, Fields};

/// Asks a legacy client on its call's event stream (`Asking`), where the call is held
/// with its `rest`: refused when it cannot be asked there (it accepts only JSON, the call
/// came outside a session, or its session did not declare elicitation).
pub(in crate::pipeline) async fn ask(
    x: Exchange<'_, '_>,
    bytes: &Bytes,
    want: Want,
    ctx: &mut Ctx<'_>,
    q: Question,
    rest: Granted,
) -> Result<Response<GateBody>, GateError> {
    let (gw, live, profile, req) = (x.gw, x.live, &**x.profile, x.req);
    let Question {
        rule,
        text: question,
        id,
        ..
    } = q;
    let session = req.fields.get(FieldKind::McpSessionId);
    let owner = session.map(|s| session_key(ctx, s));
    let why = if want == Want::Json {
        Some(
            "this call needs a person's approval, asked on the call's event stream, and the client accepts only JSON (Accept)",
        )
    } else if session.is_none() {
        Some(
            "this call needs a person's approval, and it was sent outside a session, where the client cannot be asked",
        )
    } else if !owner.is_some_and(|o| gw.approvals.elicits(&o)) {
        Some(
            "this call needs a person's approval, and this session's client did not declare elicitation when it initialized (here: a session begun on another replica is not known)",
        )
    } else {
        None
    };
    if let Some(why) = why {
        note(gw, profile, ctx, &rule, "refused", None, Some(why)).await?;
        return Err(GateError::NotAskable(why.into()));
    }
    let Some(gw_arc) = gw.arc() else {
        return Err(GateError::NotAskable("the gateway is stopping".into()));
    };
    note(gw, profile, ctx, &rule, "asked", None, None).await?;
    let call = ctx.calls.first().cloned();
    let base = crate::pipeline::audit::base(ctx, "tools/call");
    let revoked = crate::pipeline::auth::Credential::hold(ctx.token, gw);
    // The call's own records are written when it goes on: the request ends with none.
    let later = Later::hold(gw_arc.clone(), x, bytes, want, ctx, rest);
    let asking = Asking {
        gw: gw_arc,
        later,
        rule,
        keepalive: live.config.sse_keepalive,
        question,
        owner: owner.expect("checked above"),
        id,
        request_id: ctx.request_id.to_string(),
        profile: profile.name.clone(),
        base,
        call,
        revoked,
    };
    Ok(asking.stream())
}

/// What tells apart the legacy sessions a question may be answered in: the caller and the
/// session id it holds.
fn session_key(ctx: &Ctx<'_>, session: &[u8]) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(b"approval session\0");
    h.update(crate::pipeline::rounds::caller(ctx));
    h.update(session);
    h.finalize().into()
}

/// A legacy client's answer (a JSON-RPC response it POSTed) to a question mcpgate asked
/// it: handed to the waiting call, answered 202. `None`: not such an answer.
pub(in crate::pipeline) fn answer(
    gw: &Gateway,
    payload: &Payload<'_>,
    bytes: &Bytes,
    fields: &Fields,
    ctx: &Ctx<'_>,
) -> Result<Option<Response<GateBody>>, GateError> {
    let Payload::Single(m) = payload else {
        return Ok(None);
    };
    let Some(id) = m.id_text().filter(|id| id.starts_with(QUESTION)) else {
        return Ok(None);
    };
    if m.kind != MessageKind::Response {
        return Ok(None);
    }
    let owner = fields
        .get(FieldKind::McpSessionId)
        .map(|s| session_key(ctx, s))
        .unwrap_or_default();
    gw.waits.answer(id, &owner, bytes.clone()).map_err(|why| {
        tracing::info!(
            ?why,
            "an answer no approval question of this session waits for"
        );
        GateError::InvalidRequest(format!(
            "no approval question of this session waits for an answer with id {id}"
        ))
    })?;
    Ok(Some(crate::pipeline::respond::empty(
        http::StatusCode::ACCEPTED,
        &ctx.request_id,
    )))
}

/// Whether a legacy `initialize` on `profile` must be remembered: the profile has rules a
/// client answers, and the client declares elicitation.
pub(in crate::pipeline) fn notes_elicitation(
    profile: &Profile,
    payload: &Payload<'_>,
    bytes: &Bytes,
) -> bool {
    let Payload::Single(m) = payload else {
        return false;
    };
    if m.method() != Some("initialize")
        || !profile
            .approvals
            .iter()
            .any(|r| r.approver == Approver::Client)
    {
        return false;
    }
    serde_json::from_slice::<serde_json::Value>(bytes).is_ok_and(|v| {
        v.pointer("/params/capabilities/elicitation")
            .is_some_and(serde_json::Value::is_object)
    })
}

/// Remembers the session an `initialize` that declared elicitation was answered with.
pub(in crate::pipeline) fn note_session(
    gw: &Gateway,
    response: &Response<GateBody>,
    ctx: &Ctx<'_>,
) {
    if let Some(s) = response.headers().get("mcp-session-id") {
        gw.approvals.note_elicits(session_key(ctx, s.as_bytes()));
    }
}

/// A legacy client's call asked about on its event stream: owned, as the answer's body
/// outlives the request's stages. Approved, the call goes on as it was judged before the
/// question, and its answer follows the question on the stream.
struct Asking {
    gw: Arc<Gateway>,
    /// The call, held with what it has been granted.
    later: Later,
    rule: Arc<ApprovalRule>,
    /// How often the stream says it is alive while the client is asked.
    keepalive: std::time::Duration,
    question: String,
    owner: [u8; 32],
    /// The call's JSON-RPC id, as JSON text.
    id: String,
    request_id: String,
    profile: Arc<str>,
    base: Arc<audit::Base>,
    call: Option<Arc<audit::Call>>,
    /// Ready when the caller's token is revoked or expires: the question is withdrawn.
    revoked: Option<crate::runtime::streams::StreamWatch>,
}

impl Asking {
    /// The call's answer: an event stream that asks the question first.
    fn stream(self) -> Response<GateBody> {
        let request_id = self.request_id.clone();
        let (tx, rx) = tokio::sync::mpsc::channel(16);
        crate::pipeline::respond::written(Box::pin(self.run(tx)), rx, &request_id)
    }

    async fn run(mut self, tx: tokio::sync::mpsc::Sender<Bytes>) {
        let qid = format!("{QUESTION}{}\"", self.gw.waits.next());
        let mut waiter = self.gw.waits.ask(&qid, self.owner);
        let asked = msg::elicitation_request(&qid, &self.question);
        if tx.send(sse::encode_json(&asked, None)).await.is_err() {
            return;
        }
        // While the person reads, the stream says it is alive (as relayed streams do), so
        // that no idle timeout between here and the client cuts it.
        // A client that leaves ends this task where it waits: the step is recorded then.
        let mut gone = Left {
            gw: &self.gw,
            profile: self.profile.clone(),
            record: Some(record(
                self.base.clone(),
                self.call.clone(),
                &self.rule,
                "cancelled",
                None,
                Some("the client left before answering"),
            )),
        };
        let mut alive =
            tokio::time::interval_at(tokio::time::Instant::now() + self.keepalive, self.keepalive);
        let limit = tokio::time::sleep(self.rule.timeout);
        tokio::pin!(limit);
        let mut revoked = self.revoked.take();
        let answer = loop {
            tokio::select! {
                a = &mut waiter.answer => break a.ok(),
                () = &mut limit => break None,
                () = crate::runtime::streams::until_revoked(&mut revoked) => {
                    gone.record = None;
                    drop(waiter);
                    self.note("revoked", None, Some(REVOKED)).await;
                    self.fail(&tx, &GateError::Revoked).await;
                    return;
                }
                _ = alive.tick() => {
                    if tx.send(Bytes::from_static(b": keepalive\n\n")).await.is_err() {
                        return;
                    }
                }
                () = tx.closed() => return,
            }
        };
        gone.record = None;
        drop(waiter);
        let outcome = match answer.as_deref().map(msg::legacy_answer) {
            None => Err(("expired", GateError::CallDeclined("expired"))),
            Some(Ok(Answer::Approved)) => Ok(()),
            Some(Ok(other)) => Err((other.reason(), GateError::CallDeclined(other.reason()))),
            Some(Err(e)) => Err(("refused", GateError::BadApproval(e))),
        };
        match outcome {
            Ok(()) => {
                if !self.note("approved", Some("client"), None).await {
                    self.fail(&tx, &GateError::AuditUnavailable).await;
                    return;
                }
                relay(self.later.go_on("client").await, &tx).await;
            }
            Err((decision, e)) => {
                let why = match &e {
                    GateError::BadApproval(why) => Some(why.clone()),
                    _ => None,
                };
                let by = (decision != "expired" && decision != "refused").then_some("client");
                self.note(decision, by, why.as_deref()).await;
                self.fail(&tx, &e).await;
            }
        }
    }

    async fn fail(&self, tx: &tokio::sync::mpsc::Sender<Bytes>, e: &GateError) {
        let id = serde_json::value::RawValue::from_string(self.id.clone()).ok();
        let json = crate::error::envelope(e, id.as_deref(), &self.request_id);
        let text = String::from_utf8_lossy(&json);
        let _ = tx.send(sse::encode_json(&text, None)).await;
    }

    /// Records and counts a step; `false` when a durable record could not be written.
    async fn note(&self, decision: &'static str, by: Option<&str>, reason: Option<&str>) -> bool {
        self.gw.approvals.count(&self.profile, decision);
        tracing::info!(decision, rule = self.rule.number, by, "approval");
        let Some(a) = &self.gw.audit else {
            return true;
        };
        let r = record(
            self.base.clone(),
            self.call.clone(),
            &self.rule,
            decision,
            by,
            reason,
        );
        write(a, r).await.is_ok()
    }
}

/// The approved call's answer, on the stream after its question: its events as they come,
/// or the JSON answer as one event.
async fn relay(answer: Response<GateBody>, tx: &tokio::sync::mpsc::Sender<Bytes>) {
    let sse = wire::headval::body_format(answer.headers()) == wire::headval::BodyFormat::Sse;
    let mut body = answer.into_body();
    if sse {
        while let Some(frame) = body.frame().await {
            let Ok(Some(data)) = frame.map(|f| f.into_data().ok()) else {
                break;
            };
            if tx.send(data).await.is_err() {
                return;
            }
        }
        return;
    }
    let Ok(whole) = body.collect().await.map(|c| c.to_bytes()) else {
        return;
    };
    let text = String::from_utf8_lossy(&whole);
    let _ = tx.send(sse::encode_json(&text, None)).await;
}
