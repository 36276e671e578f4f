//! Tests of the messages of the bridge to a legacy server.

use super::*;

#[test]
fn client_meta_is_read_from_the_request() {
    let meta = r#"{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{"elicitation":{"form":{}}},"io.modelcontextprotocol/clientInfo":{"name":"c","version":"1"}}"#;
    let m = ClientMeta::of(Some(meta));
    assert_eq!(m.version.as_deref(), Some("2026-07-28"));
    assert_eq!(m.capabilities, r#"{"elicitation":{"form":{}}}"#);
    let bare = ClientMeta::of(None);
    assert_eq!(bare.capabilities, "{}");
    assert_ne!(m.digest(), bare.digest());
    let init: Value = serde_json::from_str(&initialize_request(&m)).unwrap();
    assert_eq!(init["params"]["protocolVersion"], LEGACY_VERSION);
    assert_eq!(init["params"]["clientInfo"]["name"], "c");
}

#[test]
fn discover_is_made_of_the_initialize_result() {
    let init = initialized(r#"{"jsonrpc":"2.0","id":"x","result":{"protocolVersion":"2025-06-18","capabilities":{"tools":{"listChanged":true},"logging":{}},"serverInfo":{"name":"old","version":"1"},"instructions":"be kind"}}"#).unwrap();
    assert_eq!(init.version, "2025-06-18");
    let d: Value = serde_json::from_str(&discover_answer("7", &init, 60_000).unwrap()).unwrap();
    let r = &d["result"];
    assert_eq!(d["id"], 7);
    assert_eq!(r["resultType"], "complete");
    assert_eq!(r["supportedVersions"][0], "2026-07-28");
    assert_eq!(r["capabilities"]["tools"]["listChanged"], true);
    assert_eq!(r["instructions"], "be kind");
    assert_eq!(
        r["_meta"]["io.modelcontextprotocol/serverInfo"]["name"],
        "old"
    );
    assert_eq!(r["ttlMs"], 60_000);
    assert!(
        initialized(r#"{"jsonrpc":"2.0","id":"x","error":{"code":-32600,"message":"no"}}"#)
            .is_err()
    );
    assert!(initialized(r#"{"jsonrpc":"2.0","id":"x","result":{"protocolVersion":"2026-07-28","capabilities":{}}}"#).is_err());
}

#[test]
fn results_are_completed_in_place() {
    let c = Completes {
        learn: None,
        id: "3".into(),
        ttl_ms: None,
    };
    assert_eq!(
        c.apply(r#"{"jsonrpc":"2.0","id":3,"result":{"content":[]}}"#)
            .unwrap()
            .unwrap(),
        r#"{"jsonrpc":"2.0","id":3,"result":{"resultType":"complete","content":[]}}"#
    );
    assert_eq!(
        c.apply(r#"{"jsonrpc":"2.0","id":3,"result":{ }}"#)
            .unwrap()
            .unwrap(),
        r#"{"jsonrpc":"2.0","id":3,"result":{"resultType":"complete" }}"#
    );
    // Another id, an error, a notification: untouched.
    assert!(
        c.apply(r#"{"jsonrpc":"2.0","id":4,"result":{}}"#)
            .unwrap()
            .is_none()
    );
    assert!(
        c.apply(r#"{"jsonrpc":"2.0","id":3,"error":{"code":1,"message":"m"}}"#)
            .unwrap()
            .is_none()
    );
    assert!(
        c.apply(r#"{"jsonrpc":"2.0","method":"notifications/progress","params":{}}"#)
            .unwrap()
            .is_none()
    );
    let list = Completes {
        learn: None,
        id: "\"a\"".into(),
        ttl_ms: Some(5000),
    };
    let out = list
        .apply(r#"{"id":"a","jsonrpc":"2.0","result":{"tools":[],"cacheScope":"public"}}"#)
        .unwrap()
        .unwrap();
    assert_eq!(
        out,
        r#"{"id":"a","jsonrpc":"2.0","result":{"resultType":"complete","ttlMs":5000,"tools":[],"cacheScope":"public"}}"#
    );
    // Nothing to add: nothing changed.
    assert!(list.apply(&out).unwrap().is_none());
}

#[test]
fn a_server_request_becomes_an_input_request() {
    let asked = server_request(
        r#"{"jsonrpc":"2.0","id":0,"method":"elicitation/create","params":{"message":"Sure?"}}"#,
    )
    .unwrap();
    assert_eq!(asked.id, "0");
    assert_eq!(asked.method, "elicitation/create");
    let state = held_state(42, &[0xab; 16]);
    let v: Value =
        serde_json::from_str(&input_required("\"c1\"", "k0", &asked.request, &state)).unwrap();
    assert_eq!(v["result"]["resultType"], "input_required");
    assert_eq!(
        v["result"]["inputRequests"]["k0"]["params"]["message"],
        "Sure?"
    );
    assert!(server_request(r#"{"jsonrpc":"2.0","method":"notifications/progress"}"#).is_none());
    assert!(server_request(r#"{"jsonrpc":"2.0","id":1,"result":{}}"#).is_none());
    let body = format!(
        r#"{{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{{"name":"t","requestState":"{state}","inputResponses":{{"k0":{{"action":"accept"}}}}}}}}"#
    );
    let r = retry(body.as_bytes()).unwrap().unwrap();
    assert_eq!((r.held, r.digest), (42, [0xab; 16]));
    assert_eq!(
        r.responses,
        vec![("k0".into(), r#"{"action":"accept"}"#.into())]
    );
    assert!(
        retry(br#"{"params":{"requestState":"upstream's own"}}"#)
            .unwrap()
            .is_none()
    );
    assert!(retry(br#"{"params":{"requestState":"mcpgate-held:x:y"}}"#).is_err());
    assert_eq!(
        answer_to_server("0", r#"{"action":"accept"}"#),
        r#"{"jsonrpc":"2.0","id":0,"result":{"action":"accept"}}"#
    );
    assert!(answer_to_server("0", "7").contains("error"));
    assert_eq!(
        renumbered(r#"{"jsonrpc":"2.0","id":1,"result":{}}"#, "\"r2\"").unwrap(),
        r#"{"id":"r2","jsonrpc":"2.0","result":{}}"#
    );
}

#[test]
fn the_digest_ignores_what_changes_between_rounds() {
    let a = br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"d","arguments":{"id":"n1","x":1}}}"#;
    let b = br#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"arguments":{"x":1,"id":"n1"},"name":"d","requestState":"s","inputResponses":{},"_meta":{"progressToken":3}}}"#;
    let c = br#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"d","arguments":{"id":"n2","x":1}}}"#;
    assert_eq!(call_digest(a).unwrap(), call_digest(b).unwrap());
    assert_ne!(call_digest(a).unwrap(), call_digest(c).unwrap());
}

#[test]
fn a_listen_stream_carries_what_it_asked_for() {
    let l = Listen::of(br#"{"jsonrpc":"2.0","id":"L","method":"subscriptions/listen","params":{"notifications":{"toolsListChanged":true,"resourceSubscriptions":["file:///a"]}}}"#).unwrap();
    let ack: Value = serde_json::from_str(&l.acknowledged()).unwrap();
    assert_eq!(
        ack["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
        "L"
    );
    assert_eq!(ack["params"]["notifications"]["toolsListChanged"], true);
    assert_eq!(
        ack["params"]["notifications"]["resourceSubscriptions"][0],
        "file:///a"
    );
    let tools: Value = serde_json::from_str(
        &l.carry(r#"{"jsonrpc":"2.0","method":"notifications/tools/list_changed"}"#)
            .unwrap(),
    )
    .unwrap();
    assert_eq!(
        tools["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
        "L"
    );
    assert!(
        l.carry(r#"{"jsonrpc":"2.0","method":"notifications/prompts/list_changed"}"#)
            .is_none()
    );
    assert!(l.carry(r#"{"jsonrpc":"2.0","method":"notifications/resources/updated","params":{"uri":"file:///a"}}"#).is_some());
    assert!(l.carry(r#"{"jsonrpc":"2.0","method":"notifications/resources/updated","params":{"uri":"file:///b"}}"#).is_none());
    assert!(
        l.carry(r#"{"jsonrpc":"2.0","id":5,"method":"roots/list"}"#)
            .is_none()
    );
    assert!(
        Listen::of(br#"{"id":1,"params":{"notifications":{"resourceSubscriptions":"x"}}}"#)
            .is_err()
    );
}

#[test]
fn what_a_client_declared_and_the_level_it_asked_for() {
    let m = ClientMeta::of(Some(
        r#"{"io.modelcontextprotocol/clientCapabilities":{"sampling":{},"roots":true},"io.modelcontextprotocol/logLevel":"warn\u0069ng"}"#,
    ));
    assert!(m.declares("sampling"));
    assert!(!m.declares("roots"), "a capability is an object");
    assert!(!m.declares("elicitation"));
    assert_eq!(m.level, Some(3));
    let loud = ClientMeta::of(Some(r#"{"io.modelcontextprotocol/logLevel":"shouting"}"#));
    assert_eq!(
        loud.level, None,
        "a level MCP does not have asks for nothing"
    );
}

#[test]
fn log_messages_pass_from_the_level_asked_up() {
    let log = |level: &str| {
        format!(
            r#"{{"jsonrpc":"2.0","method":"notifications/message","params":{{"level":"{level}","data":"x"}}}}"#
        )
    };
    let progress = r#"{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":1,"progress":1}}"#;
    let warning = LogFloor(Some(3));
    assert!(!warning.passes(&log("info")));
    assert!(warning.passes(&log("warning")));
    assert!(warning.passes(&log("emergency")));
    assert!(warning.passes(progress));
    let none = LogFloor(None);
    assert!(!none.passes(&log("emergency")));
    assert!(none.passes(progress));
    // A method name inside a log's data is not a log message.
    assert!(none.passes(r#"{"jsonrpc":"2.0","id":1,"result":{"text":"notifications/message"}}"#));
    assert!(declares_logging(r#"{"capabilities":{"logging":{}}}"#));
    assert!(!declares_logging(r#"{"capabilities":{}}"#));
}

#[test]
fn methods_2026_07_28_has_not() {
    for m in [
        "initialize",
        "ping",
        "logging/setLevel",
        "resources/subscribe",
    ] {
        assert!(removed(m) && !defined(m), "{m}");
    }
    for m in [
        "server/discover",
        "tools/call",
        "tasks/get",
        "completion/complete",
    ] {
        assert!(defined(m) && !removed(m), "{m}");
    }
    assert!(!defined("vendor/thing"));
    assert_eq!(
        method_not_found(r#"{"jsonrpc":"2.0","id":1,"error":{"code":-32601,"message":"no"}}"#)
            .as_deref(),
        Some("no")
    );
    assert_eq!(
        method_not_found(r#"{"jsonrpc":"2.0","id":1,"error":{"code":-32602,"message":"no"}}"#),
        None
    );
    assert_eq!(
        method_not_found(r#"{"jsonrpc":"2.0","id":1,"result":{}}"#),
        None
    );
}

#[test]
fn the_envelope_stays_at_the_bridge_the_rest_of_meta_goes_on() {
    let body = r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t","_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","progressToken":7,"io.modelcontextprotocol/clientCapabilities":{"x":{}},"traceparent":"00-ab"},"arguments":{"q":"io.modelcontextprotocol/clientInfo"}}}"#;
    let out = without_envelope(body);
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        v["params"]["_meta"],
        serde_json::json!({"progressToken": 7, "traceparent": "00-ab"})
    );
    assert_eq!(
        v["params"]["arguments"]["q"],
        "io.modelcontextprotocol/clientInfo"
    );
    assert_eq!(v["params"]["name"], "t");
    // Nothing to take out: the same text.
    let plain =
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta":{"progressToken":1}}}"#;
    assert!(matches!(
        without_envelope(plain),
        std::borrow::Cow::Borrowed(_)
    ));
    let only = r#"{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}"#;
    let v: Value = serde_json::from_str(&without_envelope(only)).unwrap();
    assert_eq!(v["params"]["_meta"], serde_json::json!({}));
    // Not an object this can read: left as it is.
    assert_eq!(
        without_envelope("[1, \"io.modelcontextprotocol/x\"]"),
        "[1, \"io.modelcontextprotocol/x\"]"
    );
}
