//! `[limits]` end to end: rate limits by token and by tool, the brute-force guard,
//! concurrency caps, per-tool deadlines. A refused call never reaches the upstream.

mod support;

use http::Method;
use mcpgate::cli::sample;
use std::time::Duration;
use support::*;

fn with_limits(up: &str, rules: &str) -> String {
    config(up, "10s").replace(
        "max_body = \"64KiB\"\n",
        &format!("max_body = \"64KiB\"\n{rules}\n"),
    )
}

fn assert_429(r: &Reply, id: serde_json::Value) -> u64 {
    assert_eq!(r.status, 429, "{}", r.body);
    let secs: u64 = r
        .header("retry-after")
        .parse()
        .expect("Retry-After in seconds");
    assert!(secs >= 1);
    let v = r.messages().into_iter().next().unwrap();
    assert_eq!(v["error"]["code"], -32005);
    assert_eq!(v["id"], id);
    let ms = v["error"]["data"]["retry_after_ms"]
        .as_u64()
        .expect("retry_after_ms");
    assert!(ms > 0 && ms <= secs * 1000, "{ms} ms vs Retry-After {secs}");
    assert_eq!(v["error"]["data"]["request_id"], r.header("x-request-id"));
    ms
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_past_a_tokens_rate_gets_429_and_other_tokens_do_not() {
    let up = json_upstream().await;
    let gw = Gateway::start(&with_limits(
        &up.url(),
        "rate = [ { key = \"token\", rate = \"3/m\", burst = 3 } ]",
    ));
    let gpt = gw.url(&format!("/gpt-mcp/{GPT}/mcp"));
    for i in 0..3 {
        assert_eq!(post(&gpt, &[], &call(i, "get_document")).await.status, 200);
    }
    let r = post(&gpt, &[], &call(7, "get_document")).await;
    let ms = assert_429(&r, 7.into());
    assert!(ms > 10_000, "3/m refills one call every 20 s: {ms}");
    // SSE-preferring clients get the same refusal as one frame.
    let r = send(
        Method::POST,
        &gpt,
        &[
            ("content-type", "application/json"),
            ("accept", "text/event-stream"),
        ],
        call(8, "get_document"),
    )
    .await;
    assert_eq!(r.header("content-type"), "text/event-stream");
    assert_429(&r, 8.into());
    // Another token is unaffected.
    let reader = bearer(READONLY);
    for i in 0..3 {
        assert_eq!(
            post(
                &gw.url("/mcp-readonly"),
                &[("authorization", &reader)],
                &call(10 + i, "get_document")
            )
            .await
            .status,
            200
        );
    }
    assert_eq!(
        up.called_tools().len(),
        6,
        "no refused call reached the upstream"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_per_tool_rule_limits_only_that_tool() {
    let up = json_upstream().await;
    let gw = Gateway::start(&with_limits(
        &up.url(),
        "rate = [ { key = \"token+tool\", tools = [\"delete_*\"], rate = \"1/m\" } ]",
    ));
    let gpt = gw.url(&format!("/gpt-mcp/{GPT}/mcp"));
    assert_eq!(
        post(&gpt, &[], &call(1, "delete_document")).await.json()["result"]["isError"],
        false
    );
    assert_429(
        &post(&gpt, &[], &call(2, "delete_document")).await,
        2.into(),
    );
    for i in 0..5 {
        assert_eq!(
            post(&gpt, &[], &call(3 + i, "get_document")).await.status,
            200,
            "other tools are not limited"
        );
    }
    // A batch holding the limited call is refused whole.
    let batch = format!(
        "[{},{}]",
        call(20, "get_document"),
        call(21, "delete_document")
    );
    assert_eq!(post(&gpt, &[], &batch).await.status, 429);
    let called = up.called_tools();
    assert_eq!(called.iter().filter(|t| *t == "delete_document").count(), 1);
    assert_eq!(called.len(), 6);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_max_in_flight_one_tool_gives_one_200_and_one_429() {
    let up = upstream(sample::Options {
        call_delay: Some(Duration::from_millis(800)),
        ..Default::default()
    })
    .await;
    let gw = Gateway::start(&with_limits(
        &up.url(),
        "concurrency = [ { tools = [\"upload_document\"], max_in_flight = 1 } ]",
    ));
    let url = gw.url("/mcp-gpt-full");
    let (u1, u2) = (url.clone(), url.clone());
    let a = tokio::spawn(async move { post(&u1, &[], &call(1, "upload_document")).await });
    tokio::time::sleep(Duration::from_millis(200)).await;
    let b = tokio::spawn(async move { post(&u2, &[], &call(2, "upload_document")).await });
    let (a, b) = (a.await.unwrap(), b.await.unwrap());
    assert_eq!(a.status, 200);
    assert_429(&b, 2.into());
    // Other tools are not capped meanwhile, and the cap frees when the call ends.
    assert_eq!(
        post(&url, &[], &call(3, "upload_document")).await.status,
        200
    );
    assert_eq!(up.called_tools(), ["upload_document", "upload_document"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_tool_past_its_deadline_gets_504_and_the_upstream_sees_it_end() {
    let up = upstream(sample::Options {
        call_delay: Some(Duration::from_secs(5)),
        ..Default::default()
    })
    .await;
    let gw = Gateway::start(&with_limits(
        &up.url(),
        "timeouts = { search_knowledge = \"400ms\" }",
    ));
    let url = gw.url("/mcp-gpt-full");
    let started = std::time::Instant::now();
    let r = post(&url, &[], &call(1, "search_knowledge")).await;
    assert_eq!(r.status, 504);
    assert_eq!(r.json()["error"]["code"], -32004);
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "the gateway did not wait for the upstream"
    );
    support::eventually(
        Duration::from_secs(5),
        "the upstream request was cancelled",
        || async { (up.cancelled() == 1).then_some(()) },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn repeated_bad_tokens_from_one_address_get_429() {
    let up = json_upstream().await;
    let gw = Gateway::start(&with_limits(
        &up.url(),
        "rate = [ { key = \"client_ip\", on = \"auth_failure\", rate = \"3/m\" } ]",
    ));
    let mut statuses = Vec::new();
    for i in 0..6 {
        let r = post(&gw.url(&format!("/gpt-mcp/guess-{i}/mcp")), &[], &list(1)).await;
        statuses.push(r.status.as_u16());
    }
    assert_eq!(
        &statuses[..3],
        &[404, 404, 404],
        "the first failures look like any wrong URL"
    );
    assert!(statuses[3..].iter().all(|s| *s == 429), "{statuses:?}");
    let r = post(&gw.url("/gpt-mcp/guess-again/mcp"), &[], &list(2)).await;
    assert_eq!(r.status, 429);
    assert!(r.header("retry-after").parse::<u64>().unwrap() >= 1);
    // The guard slows failing attempts only: the right token from the blocked address is
    // served (behind a proxy, that address is everybody's).
    let r = post(&gw.url(&format!("/gpt-mcp/{GPT}/mcp")), &[], &list(3)).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let r = post(
        &gw.url("/mcp-readonly"),
        &[("authorization", &bearer(READONLY))],
        &list(4),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let r = post(
        &gw.url("/mcp-readonly"),
        &[("authorization", "Bearer nope")],
        &list(5),
    )
    .await;
    assert_eq!(r.status, 429);
    assert_eq!(up.received().len(), 2);
    // Successful requests never count: a fresh gateway, many good calls, no block.
    let gw = Gateway::start(&with_limits(
        &up.url(),
        "rate = [ { key = \"client_ip\", on = \"auth_failure\", rate = \"3/m\" } ]",
    ));
    for i in 0..8 {
        assert_eq!(
            post(&gw.url(&format!("/gpt-mcp/{GPT}/mcp")), &[], &list(i))
                .await
                .status,
            200
        );
    }
    assert_eq!(up.received().len(), 10);
}

/// Behind a real nginx (as docs/nginx-migration.md sets it up), with nginx's address
/// trusted: the guard, the audit trail, the log and `/status` see the client nginx names,
/// so one broken client blocks itself, not everyone behind the proxy; the upstream gets
/// the chain. A forged hop left of the client changes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn behind_a_trusted_proxy_the_guard_blocks_the_client_it_names() {
    let up = json_upstream().await;
    let dir = tempfile::tempdir().unwrap();
    let trail = dir.path().join("audit.jsonl");
    let text = with_admin(with_limits(
        &up.url(),
        "rate = [ { key = \"client_ip\", on = \"auth_failure\", rate = \"3/m\" } ]",
    ))
    .replace(
        "[[listen]]",
        &format!(
            "[server]\ntrusted_proxies = [\"127.0.0.1/32\"]\n\n[audit]\npath = \"{}\"\n\n[[listen]]",
            trail.display()
        ),
    );
    let gw = Gateway::start(&text);
    let nginx = Nginx::start(gw.listeners["main"]);
    // Clients of a load balancer in front of nginx: nginx appends its own peer.
    let from = |ip: &'static str| [("x-forwarded-for", ip)];
    for i in 0..4 {
        let r = post(
            &nginx.url(&format!("/gpt-mcp/guess-{i}/mcp")),
            &from("203.0.113.7"),
            &list(i),
        )
        .await;
        assert_eq!(r.status, if i < 3 { 404 } else { 429 }, "{}", r.body);
    }
    // Another client behind the same nginx is not blocked, even with a wrong token.
    let r = post(
        &nginx.url("/gpt-mcp/wrong/mcp"),
        &from("198.51.100.9"),
        &list(9),
    )
    .await;
    assert_eq!(r.status, 404);
    // A hop the client forged left of itself does not make it someone else.
    let r = post(
        &nginx.url("/gpt-mcp/wrong/mcp"),
        &from("198.51.100.9, 203.0.113.7"),
        &list(10),
    )
    .await;
    assert_eq!(r.status, 429);
    // The blocked client's own valid token is served.
    let r = post(
        &nginx.url(&format!("/gpt-mcp/{GPT}/mcp")),
        &from("203.0.113.7"),
        &call(11, "get_document"),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let got = up.received();
    assert_eq!(got.len(), 1);
    assert_eq!(
        got[0].headers["x-forwarded-for"], "203.0.113.7, 127.0.0.1, 127.0.0.1",
        "the chain from the client on, nginx's peer and mcpgate's"
    );
    let records: Vec<serde_json::Value> = std::fs::read_to_string(&trail)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(
        records.iter().any(|r| r["client"] == "203.0.113.7"),
        "{records:?}"
    );
    // Each client's request line names it. The lines are written as requests end, by
    // either worker, so each is waited for (once in a run of the whole suite the second
    // was not written yet when the first was found).
    gw.log_with("\"client\":\"203.0.113.7\"", 1).await;
    gw.log_with("\"client\":\"198.51.100.9\"", 1).await;
    let status = send(Method::GET, &gw.admin_url("/status"), &[], "").await;
    assert!(
        status.json()["decisions"][0]["client"] == "203.0.113.7",
        "{}",
        status.body
    );
}

/// Without `trusted_proxies`, `X-Forwarded-For` is never believed: a client that forges
/// one is still blocked by its own address.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_trusted_proxies_a_forged_forwarded_for_changes_nothing() {
    let up = json_upstream().await;
    let gw = Gateway::start(&with_limits(
        &up.url(),
        "rate = [ { key = \"client_ip\", on = \"auth_failure\", rate = \"3/m\" } ]",
    ));
    let mut statuses = Vec::new();
    for i in 0..5u16 {
        let forged = format!("10.9.9.{i}");
        let r = post(
            &gw.url(&format!("/gpt-mcp/guess-{i}/mcp")),
            &[
                ("x-forwarded-for", forged.as_str()),
                ("forwarded", format!("for={forged}").as_str()),
            ],
            &list(i.into()),
        )
        .await;
        statuses.push(r.status.as_u16());
    }
    assert_eq!(statuses, [404, 404, 404, 429, 429]);
    let r = post(
        &gw.url(&format!("/gpt-mcp/{GPT}/mcp")),
        &[
            ("x-forwarded-for", "10.9.9.9"),
            ("forwarded", "for=10.9.9.9"),
        ],
        &list(7),
    )
    .await;
    assert_eq!(r.status, 200);
    let got = up.received();
    assert_eq!(got[0].headers["x-forwarded-for"], "127.0.0.1");
    assert!(got[0].headers.get("forwarded").is_none());
}
