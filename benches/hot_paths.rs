//! Microbenchmarks of the per-request hot paths: Accept negotiation, JSON-RPC
//! classification, the tools/list splice, SSE decoding and encoding, token lookup.
//! Run: `cargo bench --bench hot_paths`.

use mcpgate::config::load_str;
use mcpgate::mcp::jsonrpc::{self, ListKind};
use mcpgate::mcp::tools_list::{ToolFilter, rewrite};
use mcpgate::mcp::transport::{accept, sse};
use std::sync::Arc;

fn main() {
    divan::main();
}

const CALL: &[u8] = br#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"get_document","arguments":{"id":"welcome","content":"some text of a realistic size for a small call"}}}"#;

#[divan::bench]
fn accept_sdk_header() -> Result<accept::Want, accept::NotAcceptable> {
    accept::negotiate(divan::black_box(Some(
        b"application/json, text/event-stream",
    )))
}

#[divan::bench]
fn accept_with_q_values() -> Result<accept::Want, accept::NotAcceptable> {
    accept::negotiate(divan::black_box(Some(
        b"text/*;q=0.5, application/json;q=0.9, */*;q=0.1",
    )))
}

#[divan::bench]
fn classify_tools_call() -> usize {
    let payload = jsonrpc::parse(divan::black_box(CALL)).unwrap();
    payload.messages().len()
}

fn filter_and_list(tools: usize) -> (ToolFilter, String, Vec<(Box<str>, ListKind)>) {
    let text = "[upstreams.u]\nurl = \"http://127.0.0.1:9/mcp\"\n[tools]\nhidden = [\"tool_099\"]\n[profiles.p]\nupstream = \"u\"\nallow = [\"tool_0*\"]\n";
    let snapshot = Arc::new(load_str(text, "bench.toml").unwrap());
    let profile = snapshot.profiles["p"].clone();
    let list: Vec<String> = (0..tools)
        .map(|i| format!(r#"{{"name":"tool_{i:03}","description":"A generated tool.","inputSchema":{{"type":"object"}}}}"#))
        .collect();
    let body = format!(
        r#"{{"jsonrpc":"2.0","id":1,"result":{{"tools":[{}],"nextCursor":"c"}}}}"#,
        list.join(",")
    );
    (
        ToolFilter::new(snapshot, profile),
        body,
        vec![("1".into(), ListKind::Tools)],
    )
}

#[divan::bench(args = [10, 500])]
fn tools_list_splice(bencher: divan::Bencher, tools: usize) {
    let (filter, body, ids) = filter_and_list(tools);
    bencher.bench_local(|| rewrite(divan::black_box(&body), &ids, &filter).unwrap());
}

#[divan::bench]
fn sse_decode_event(bencher: divan::Bencher) {
    let event = b"event: message\nid: 42\ndata: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"content\":[],\"isError\":false}}\n\n";
    bencher.bench_local(|| {
        let mut d = sse::Decoder::new();
        d.feed(divan::black_box(event));
        d.next_event().unwrap()
    });
}

#[divan::bench]
fn sse_encode_json() -> bytes::Bytes {
    sse::encode_json(
        divan::black_box(r#"{"jsonrpc":"2.0","id":1,"result":{"content":[],"isError":false}}"#),
        None,
    )
}

#[divan::bench(args = [10, 10_000])]
fn token_lookup(bencher: divan::Bencher, tokens: usize) {
    use mcpgate::config::token::{Secret, to_hex};
    let mut text = String::from(
        "[upstreams.u]\nurl = \"http://127.0.0.1:9/mcp\"\n[profiles.p]\nupstream = \"u\"\nallow = [\"*\"]\n",
    );
    for i in 0..tokens {
        text.push_str(&format!(
            "[[tokens]]\nid = \"t{i}\"\nsha256 = \"{}\"\nprofiles = [\"p\"]\n",
            to_hex(&Secret(&format!("token-{i}")).hash())
        ));
    }
    let snapshot = load_str(&text, "bench.toml").unwrap();
    let probe = format!("token-{}", tokens / 2);
    // What auth does per request: hash the presented token, look the hash up.
    bencher.bench_local(|| {
        snapshot
            .tokens
            .contains_key(&Secret(divan::black_box(&probe)).hash())
    });
}
