//! Tests of the JSON-RPC reading: envelopes, batches, repeated keys refused, and the
//! one-pass reader against serde_json.

/// A message moved with a name's splice reads as the new text read whole, wherever
/// the name sits among the other fields, whatever their lengths.
#[test]
fn a_moved_message_is_the_new_text_read_again() {
    // Every order of the fields, at the top and in `params`, and a few hand-made ones.
    fn orders(items: &[String]) -> Vec<Vec<String>> {
        if items.len() <= 1 {
            return vec![items.to_vec()];
        }
        (0..items.len())
            .flat_map(|i| {
                let mut rest = items.to_vec();
                let first = rest.remove(i);
                orders(&rest).into_iter().map(move |mut o| {
                    o.insert(0, first.clone());
                    o
                })
            })
            .collect()
    }
    let params: Vec<String> = [
        r#""name":"a__x""#,
        r#""arguments":{"name":"a__x","n":[1,2.5,null]}"#,
        r#""_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}"#,
        r#""requestState":"c3RhdGU""#,
    ]
    .map(String::from)
    .to_vec();
    let mut generated = Vec::new();
    for p in orders(&params) {
        let top = [
            r#""jsonrpc":"2.0""#.to_string(),
            r#""id":"req-1""#.to_string(),
            r#""method":"tools/call""#.to_string(),
            format!(r#""params":{{{}}}"#, p.join(",")),
        ];
        for t in orders(&top) {
            generated.push(format!("{{{}}}", t.join(",")));
        }
    }
    let hand = [
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a__x","arguments":{"q":"é"}}}"#,
        r#"{"params":{"arguments":{"n":[1,2]},"_meta":{"k":"v"},"name":"a__x","requestState":"st"},"method":"tools/call","id":"req-7","jsonrpc":"2.0"}"#,
        r#"{ "jsonrpc" : "2.0" , "id" : 3 , "method" : "prompts/get" , "params" : { "name" : "a__x" , "arguments" : { } } }"#,
        r#"{"jsonrpc":"2.0","id":4,"method":"tools\/call","params":{"name":"a__x"}}"#,
        r#"{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"},"name":"a__x"}}"#,
    ];
    for body in generated.iter().map(String::as_str).chain(hand) {
        for own in ["x", "a_much_longer_name_than_before", "ünï", ""] {
            let old = body.as_bytes();
            let Payload::Single(m) = parse(old).unwrap() else {
                panic!("one message")
            };
            // params.name's string, not the argument of the same name.
            let (start, _) = body
                .match_indices("\"a__x\"")
                .find(|(at, _)| !body[..*at].ends_with(r#""arguments":{"name":"#))
                .unwrap();
            let quoted = serde_json::to_string(own).unwrap();
            let new = [&old[..start], quoted.as_bytes(), &old[start + 6..]].concat();
            let splice = Splice {
                cut: start..start + 6,
                put: quoted.len(),
            };
            let moved = m.moved(old, &new, &splice).expect("moves");
            let Payload::Single(again) = parse(&new).unwrap() else {
                panic!("one message")
            };
            assert_eq!(
                format!("{moved:?}"),
                format!("{again:?}"),
                "{body} as {own}"
            );
        }
    }
    // A cut that is not the name's whole string: read again.
    let body = br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a__x"}}"#;
    let Payload::Single(m) = parse(body).unwrap() else {
        panic!("one message")
    };
    let splice = Splice {
        cut: 20..40,
        put: 4,
    };
    let new = [&body[..20], b"\"x\"".as_slice(), &body[40..]].concat();
    assert!(m.moved(body, &new, &splice).is_none());
}

use super::*;

fn single(s: &str) -> Message<'_> {
    match parse(s.as_bytes()).unwrap() {
        Payload::Single(m) => m,
        Payload::Batch(_) => panic!("batch"),
    }
}

fn code(s: &str) -> i64 {
    parse(s.as_bytes()).unwrap_err().rpc_code()
}

#[test]
fn kinds() {
    let m = single(r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#);
    assert_eq!(
        (m.kind, m.id_text(), m.method()),
        (MessageKind::Request, Some("1"), Some("tools/list"))
    );
    assert_eq!(
        single(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#).kind,
        MessageKind::Notification
    );
    assert_eq!(
        single(r#"{"jsonrpc":"2.0","id":"a","result":{}}"#).kind,
        MessageKind::Response
    );
    assert_eq!(
        single(r#"{"jsonrpc":"2.0","id":"a","error":{"code":1,"message":"x"}}"#).kind,
        MessageKind::Response
    );
}

/// prompts/get names its prompt by `params.name`, resources/read by `params.uri`: the
/// other field never stands in for it.
#[test]
fn targets_come_from_the_field_the_server_reads() {
    fn t(body: &str) -> Option<ToolName<'_>> {
        single(body).target
    }
    assert_eq!(
        t(
            r#"{"jsonrpc":"2.0","id":1,"method":"resources/read","params":{"name":"kb://docs/a","uri":"kb://private/b"}}"#
        ),
        Some(ToolName::Name("kb://private/b".into()))
    );
    assert_eq!(
        t(
            r#"{"jsonrpc":"2.0","id":1,"method":"prompts/get","params":{"uri":"ok","name":"n\u0061sty"}}"#
        ),
        Some(ToolName::Name("nasty".into()))
    );
    assert_eq!(
        t(r#"{"jsonrpc":"2.0","id":1,"method":"resources/read","params":{"uri":7}}"#),
        Some(ToolName::NotString)
    );
    assert_eq!(
        t(r#"{"jsonrpc":"2.0","id":1,"method":"resources/unsubscribe"}"#),
        Some(ToolName::Missing)
    );
    assert_eq!(
        t(r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a"}}"#),
        None
    );
    // A repeated uri is refused before any policy looks.
    assert!(parse(br#"{"jsonrpc":"2.0","id":1,"method":"resources/read","params":{"uri":"kb://docs/a","uri":"kb://private/b"}}"#).is_err());
}

#[test]
fn escaped_names_are_decoded() {
    let m = single(
        r#"{"jsonrpc":"2.0","id":1,"m\u0065thod":"tools/call","params":{"n\u0061me":"move_\u0064ocument"}}"#,
    );
    assert_eq!(m.method(), Some("tools/call"));
    assert_eq!(m.tool, Some(ToolName::Name("move_document".into())));
}

#[test]
fn tool_name_shapes() {
    fn t(p: &str) -> ToolName<'static> {
        let body = format!(r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call"{p}}}"#);
        match single(&body).tool.unwrap() {
            ToolName::Name(n) => ToolName::Name(n.into_owned().into()),
            ToolName::Missing => ToolName::Missing,
            ToolName::NotString => ToolName::NotString,
        }
    }
    assert_eq!(t(""), ToolName::Missing);
    assert_eq!(t(r#","params":{}"#), ToolName::Missing);
    assert_eq!(t(r#","params":[1]"#), ToolName::Missing);
    assert_eq!(t(r#","params":{"name":7}"#), ToolName::NotString);
    assert_eq!(t(r#","params":{"name":null}"#), ToolName::NotString);
    assert_eq!(
        t(r#","params":{"name":"x","arguments":{"name":"y"}}"#),
        ToolName::Name("x".into())
    );
}

#[test]
fn duplicate_keys_are_refused() {
    assert_eq!(
        code(r#"{"jsonrpc":"2.0","id":1,"method":"ping","method":"tools/call"}"#),
        -32600
    );
    assert_eq!(
        code(r#"{"jsonrpc":"2.0","id":1,"method":"x","x":1,"x":2}"#),
        -32600
    );
    // Same key once plain and once escaped is still a repeat.
    assert_eq!(
        code(
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a","n\u0061me":"b"}}"#
        ),
        -32600
    );
    // Nested objects may repeat keys of the envelope.
    single(
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a","arguments":{"id":1,"name":2}}}"#,
    );
}

#[test]
fn malformed_and_invalid() {
    assert_eq!(code("{"), -32700);
    assert_eq!(code("{\"jsonrpc\":\"2.0\",}"), -32700);
    assert_eq!(code("nope"), -32700);
    assert_eq!(
        code(r#"{"jsonrpc":"2.0","id":1,"method":"ping"} trailing"#),
        -32700
    );
    assert_eq!(code("\u{feff}"), -32700);
    assert_eq!(code("42"), -32600);
    assert_eq!(code("[]"), -32600);
    assert_eq!(code("[1]"), -32600);
    assert_eq!(code(r#"{"id":1,"method":"ping"}"#), -32600);
    assert_eq!(code(r#"{"jsonrpc":"1.0","id":1,"method":"ping"}"#), -32600);
    assert_eq!(code(r#"{"jsonrpc":"2.0","id":{},"method":"ping"}"#), -32600);
    assert_eq!(code(r#"{"jsonrpc":"2.0","id":1,"method":5}"#), -32600);
    assert_eq!(code(r#"{"jsonrpc":"2.0","id":1}"#), -32600);
    assert_eq!(parse(b"\xff\xfe").unwrap_err().rpc_code(), -32700);
}

#[test]
fn batches() {
    let p = parse(br#"[{"jsonrpc":"2.0","id":1,"method":"tools/list"},{"jsonrpc":"2.0","method":"n"},{"jsonrpc":"2.0","id":"x","method":"tools/list"}]"#).unwrap();
    assert!(p.is_batch());
    assert_eq!(
        p.list_ids()
            .into_iter()
            .map(|(id, _)| id)
            .collect::<Vec<_>>(),
        vec!["1".into(), "\"x\"".into()] as Vec<Box<str>>
    );
    assert!(p.has_requests());
}

/// Envelopes as clients send them, and the shapes around them.
const SEEDS: &[&str] = &[
    r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"tool_001","arguments":{"id":"welcome"}}}"#,
    r#"{"jsonrpc":"2.0","id":"a-1","method":"tools/list","params":{"cursor":"x"}}"#,
    r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
    r#"{"jsonrpc":"2.0","id":null,"method":"ping","params":[1,2]}"#,
    r#"{"jsonrpc":"2.0","id":-1.5e3,"result":{"content":[{"type":"text","text":"a\nb"}]}}"#,
    r#"{"jsonrpc":"2.0","id":"x","error":{"code":-32000,"message":"m"}}"#,
    r#"{"jsonrpc":"2.0","id":2,"method":"resources/read","params":{"uri":"file:///a","name":7}}"#,
    r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":null,"uri":"u","arguments":{"deep":[[{"a":true}],false]}}}"#,
    r#" { "jsonrpc" : "2.0" , "id" : 0 , "method" : "tools/call" , "params" : { } } "#,
    r#"{"id":4,"jsonrpc":"2.0","method":"tools/call","params":{"arguments":{},"name":"é日本"}}"#,
    r#"{"jsonrpc":"2.0","id":5,"method":"x","params":{"name":"a"},"extra":{"k":"\u00e9"}}"#,
    r#"{"jsonrpc":"2.0","id":6,"method":"prompts/get","params":{"name":"summarize","uri":"kb://x"}}"#,
    r#"{"jsonrpc":"2.0","id":7,"method":"resources/subscribe","params":{"name":"kb://docs/a","uri":["kb://x"]}}"#,
    r#"{"jsonrpc":"2.0","id":8,"method":"prompts/get"}"#,
];

/// The one-pass reader either steps aside or reads exactly what serde_json reads: on
/// the seeds and on many thousands of random edits of them (characters that matter to
/// JSON put in, taken out or swapped), never a message serde_json would refuse or
/// read differently.
#[test]
fn fast_and_serde_agree() {
    for seed in SEEDS {
        let fast = read_message(seed).unwrap_or_else(|| panic!("stepped aside on {seed}"));
        let slow = message_by_serde(seed).unwrap();
        assert_eq!(format!("{fast:?}"), format!("{slow:?}"), "{seed}");
    }
    // Besides the JSON pieces every edit may use: what an envelope hangs on.
    const BITS: &[&str] = &[
        "+",
        "a",
        "\\u0061",
        "\\u12",
        "\u{1}",
        "é",
        "\"name\"",
        "\"id\"",
        "\"method\"",
        "\"params\"",
        "\"2.0\"",
        "\"result\"",
    ];
    let (mut read, mut agreed_err) = (0, 0);
    for text in wire::json::read::edits(SEEDS, BITS, 0x9e37_79b9_7f4a_7c15, 40_000) {
        let slow = message_by_serde(&text);
        match read_message(&text) {
            Some(fast) => {
                read += 1;
                let slow = slow.unwrap_or_else(|e| panic!("{text}: read, but serde: {e}"));
                assert_eq!(format!("{fast:?}"), format!("{slow:?}"), "{text}");
            }
            None => agreed_err += usize::from(slow.is_err()),
        }
    }
    // The edits reach both sides: many still read, many are refused.
    assert!(read > 2_000 && agreed_err > 10_000, "{read} {agreed_err}");
}

#[test]
fn mcp_name_mirrors_name_or_uri() {
    assert_eq!(
        single(
            r#"{"jsonrpc":"2.0","id":1,"method":"resources/read","params":{"uri":"file:///a"}}"#
        )
        .mcp_name
        .as_deref(),
        Some("file:///a")
    );
    assert_eq!(
        single(r#"{"jsonrpc":"2.0","id":1,"method":"prompts/get","params":{"name":"p"}}"#)
            .mcp_name
            .as_deref(),
        Some("p")
    );
}
