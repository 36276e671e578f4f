//! Tests of the messages of the bridge to a 2026-07-28 server.

use super::*;

const CALLER: CallerKey = [7; 16];

fn session() -> Session {
    Session::of_initialize(
        Some(
            r#"{"protocolVersion":"2025-06-18","capabilities":{ "elicitation": {} },"clientInfo":{"name":"c","version":"1"}}"#,
        ),
        CALLER,
    )
    .unwrap()
}

#[test]
fn a_session_survives_its_seal_text() {
    let s = session();
    assert_eq!(s.version, "2025-06-18");
    assert_eq!(
        s.meta,
        r#""io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{"elicitation":{}},"io.modelcontextprotocol/clientInfo":{"name":"c","version":"1"}"#
    );
    let inner = s.inner();
    assert_ne!(inner, s.inner(), "two sessions alike get ids of their own");
    assert_eq!(Session::from_inner(&inner), Some(s));
    assert_eq!(Session::from_inner(&inner[..20]), None);
    assert!(session().declares("elicitation"));
    assert!(!session().declares("sampling"));
}

#[test]
fn unknown_revisions_get_the_newest_legacy_one() {
    let s = Session::of_initialize(
        Some(r#"{"protocolVersion":"2099-01-01","capabilities":{}}"#),
        CALLER,
    )
    .unwrap();
    assert_eq!(s.version, "2025-11-25");
    assert!(Session::of_initialize(Some(r#"{"capabilities":[]}"#), CALLER).is_err());
    assert!(Session::of_initialize(None, CALLER).is_err());
}

#[test]
fn meta_goes_where_the_request_has_room() {
    let m = r#""k":1"#;
    assert_eq!(
        modernize(r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#, m).unwrap(),
        r#"{"jsonrpc":"2.0","id":1,"method":"ping","params":{"_meta":{"k":1}}}"#
    );
    assert_eq!(
        modernize(r#"{"id":1,"params":{}}"#, m).unwrap(),
        r#"{"id":1,"params":{"_meta":{"k":1}}}"#
    );
    assert_eq!(
        modernize(r#"{"id":1,"params":{"name":"x"}}"#, m).unwrap(),
        r#"{"id":1,"params":{"_meta":{"k":1},"name":"x"}}"#
    );
    assert_eq!(
        modernize(r#"{"params":{"_meta":{"progressToken":3}},"id":1}"#, m).unwrap(),
        r#"{"params":{"_meta":{"k":1,"progressToken":3}},"id":1}"#
    );
    assert_eq!(
        modernize(r#"{"params":{"_meta":{ }}}"#, m).unwrap(),
        r#"{"params":{"_meta":{"k":1 }}}"#
    );
    let own = modernize(
        r#"{"params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"x"}}}"#,
        r#""io.modelcontextprotocol/protocolVersion":"2026-07-28""#,
    )
    .unwrap();
    assert_eq!(
        own,
        r#"{"params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}"#
    );
    assert_eq!(modernize(r#"{"params":[1]}"#, m), None);
    assert_eq!(modernize(r#"[{"id":1}]"#, m), None);
    assert_eq!(modernize(r#"{"params":{"_meta":1}}"#, m), None);
    // Every output is JSON.
    for body in [
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a","arguments":{"x":[1,{"_meta":2}]}}}"#,
        r#"{ }"#,
    ] {
        let out = modernize(body, m).unwrap();
        serde_json::from_str::<serde_json::Value>(&out).unwrap();
    }
}

#[test]
fn input_requests_are_read_from_their_answer_only() {
    let text = r#"{"jsonrpc":"2.0","id":4,"result":{"resultType":"input_required","inputRequests":{"ok":{"method":"elicitation/create","params":{"message":"Sure?"}}},"requestState":"s1"}}"#;
    let asks = asks(text, "4").unwrap().unwrap();
    assert_eq!(asks.requests.len(), 1);
    assert_eq!(asks.requests[0].0, "ok");
    assert_eq!(asks.requests[0].1, "elicitation/create");
    assert_eq!(asks.state.as_deref().map(RawValue::get), Some("\"s1\""));
    assert!(super::asks(text, "5").unwrap().is_none());
    let done = r#"{"jsonrpc":"2.0","id":4,"result":{"resultType":"complete","content":[]}}"#;
    assert!(super::asks(done, "4").unwrap().is_none());
    let odd = r#"{"jsonrpc":"2.0","id":4,"result":{"resultType":"input_required","inputRequests":{"x":{"method":"tools/call"}}}}"#;
    assert!(super::asks(odd, "4").is_err());
    let nothing = r#"{"jsonrpc":"2.0","id":4,"result":{"resultType":"input_required"}}"#;
    assert!(super::asks(nothing, "4").is_err());
    let request = RawValue::from_string(r#"{"method":"roots/list"}"#.into()).unwrap();
    assert_eq!(
        client_request("\"g-1\"", &request),
        r#"{"jsonrpc":"2.0","id":"g-1","method":"roots/list"}"#
    );
    let empty = RawValue::from_string("{}".into()).unwrap();
    assert_eq!(client_request("1", &empty), r#"{"jsonrpc":"2.0","id":1}"#);
}

#[test]
fn a_retry_carries_the_answers_and_the_state() {
    let body = r#"{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"d","requestState":"old"}}"#;
    let answer = RawValue::from_string(r#"{"action":"accept"}"#.into()).unwrap();
    let state = RawValue::from_string("\"s1\"".into()).unwrap();
    let out: serde_json::Value =
        serde_json::from_str(&retry(body, &[("ok".into(), answer.clone())], Some(&state)).unwrap())
            .unwrap();
    assert_eq!(out["params"]["inputResponses"]["ok"]["action"], "accept");
    assert_eq!(out["params"]["requestState"], "s1");
    let out: serde_json::Value =
        serde_json::from_str(&retry(body, &[("ok".into(), answer)], None).unwrap()).unwrap();
    assert!(out["params"].get("requestState").is_none());
}

#[test]
fn initialize_is_answered_from_discover() {
    let discover = r#"{"jsonrpc":"2.0","id":"mcpgate-initialize","result":{"resultType":"complete","supportedVersions":["2026-07-28"],"capabilities":{"tools":{"listChanged":true},"extensions":{"x":{}}},"_meta":{"io.modelcontextprotocol/serverInfo":{"name":"s","version":"2"}},"instructions":"Be kind.","ttlMs":5}}"#;
    let out = initialize_answer("9", &session(), discover).unwrap();
    assert_eq!(
        out,
        r#"{"jsonrpc":"2.0","id":9,"result":{"protocolVersion":"2025-06-18","capabilities":{"tools":{"listChanged":true}},"serverInfo":{"name":"s","version":"2"},"instructions":"Be kind."}}"#
    );
    let failed =
        r#"{"jsonrpc":"2.0","id":"mcpgate-initialize","error":{"code":-32603,"message":"no"}}"#;
    assert_eq!(
        initialize_answer("9", &session(), failed).unwrap(),
        r#"{"jsonrpc":"2.0","id":9,"error":{"code":-32603,"message":"no"}}"#
    );
}

#[test]
fn a_modern_server_refusing_a_legacy_revision_is_told_apart() {
    let refusal = br#"{"jsonrpc":"2.0","error":{"code":-32022,"message":"no","data":{"supported":["2026-07-28"],"requested":"2025-11-25"}},"id":0}"#;
    assert!(refuses_legacy(refusal));
    let old_only = br#"{"jsonrpc":"2.0","error":{"code":-32022,"message":"no","data":{"supported":["2025-06-18"]}},"id":0}"#;
    assert!(!refuses_legacy(old_only));
    let other = br#"{"jsonrpc":"2.0","error":{"code":-32600,"message":"no"},"id":0}"#;
    assert!(!refuses_legacy(other));
    assert!(!refuses_legacy(b"not json"));
}

#[test]
fn a_bridged_stream_drops_what_answers_the_listen() {
    assert!(!for_legacy_stream(
        r#"{"jsonrpc":"2.0","method":"notifications/subscriptions/acknowledged","params":{}}"#
    ));
    assert!(!for_legacy_stream(
        r#"{"jsonrpc":"2.0","id":"mcpgate-get","result":{}}"#
    ));
    assert!(for_legacy_stream(
        r#"{"jsonrpc":"2.0","method":"notifications/tools/list_changed"}"#
    ));
}
