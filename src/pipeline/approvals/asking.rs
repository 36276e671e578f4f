//! A legacy client's call held for its approval (docs/approvals.md): the question on the call's
//! event stream, the wait for the client's answer, and the approved call going on from
//! where it was held (`pipeline::resume`), its answer relayed on the same stream.

use super::{QUESTION, record, write};
use crate::config::compile::ApprovalRule;
use crate::error::GateError;
use crate::gateway::Gateway;
use crate::http::body::GateBody;
use crate::mcp::approvals::{self as msg, Answer};
use crate::mcp::transport::sse;
use crate::observe::audit;
use crate::pipeline::resume::Later;
use bytes::Bytes;
use http::Response;
use http_body_util::BodyExt;
use std::sync::Arc;

/// A legacy client's call asked about on its event stream: owned, as the answer's body
/// outlives the request's stages. Approved, the call goes on as it was judged before the
/// question, and its answer follows the question on the stream.
pub(super) struct Asking {
    pub(super) gw: Arc<Gateway>,
    /// The call, held with what it has been granted.
    pub(super) later: Later,
    pub(super) rule: Arc<ApprovalRule>,
    /// How often the stream says it is alive while the client is asked.
    pub(super) keepalive: std::time::Duration,
    pub(super) question: String,
    pub(super) owner: [u8; 32],
    /// The call's JSON-RPC id, as JSON text.
    pub(super) id: String,
    pub(super) request_id: String,
    pub(super) profile: Arc<str>,
    pub(super) base: Arc<audit::Base>,
    pub(super) call: Option<Arc<audit::Call>>,
    /// Ready when the caller's token is revoked or expires: the question is withdrawn.
    pub(super) revoked: Option<crate::runtime::streams::StreamWatch>,
}

impl Asking {
    /// The call's answer: an event stream that asks the question first.
    pub(super) fn stream(self) -> Response<GateBody> {
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
        let mut gone = super::Left {
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
                    self.note("revoked", None, Some(super::REVOKED)).await;
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
