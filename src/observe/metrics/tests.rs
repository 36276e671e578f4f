//! The registry and the shards: labels bounded, series summed over threads, status rows
//! and their quantiles, both text formats.

use super::*;

#[test]
fn the_older_text_format_names_counters_by_their_samples() {
    let om = "# HELP mcpgate_refusals Requests refused.\n# TYPE mcpgate_refusals counter\nmcpgate_refusals_total{reason=\"policy\"} 1\n# HELP mcpgate_open_streams Streams.\n# TYPE mcpgate_open_streams gauge\nmcpgate_open_streams 0\n# EOF\n";
    assert_eq!(
        to_text_format(om),
        "# HELP mcpgate_refusals_total Requests refused.\n# TYPE mcpgate_refusals_total counter\nmcpgate_refusals_total{reason=\"policy\"} 1\n# HELP mcpgate_open_streams Streams.\n# TYPE mcpgate_open_streams gauge\nmcpgate_open_streams 0\n"
    );
}

#[test]
fn tool_labels_are_bounded() {
    let m = Metrics::new();
    for i in 0..MAX_TOOL_LABELS {
        assert_eq!(
            m.tool_label(&format!("t{i}")),
            Label::from(&*format!("t{i}"))
        );
    }
    assert_eq!(m.tool_label("one-more"), Label::from("(other)"));
    assert_eq!(m.tool_label("t0"), Label::from("t0"));
}

fn decision(outcome: &'static str) -> Decision {
    Decision {
        at: std::time::SystemTime::now(),
        request_id: Arc::from("r"),
        caller: "chatgpt-app".into(),
        client: std::net::Ipv4Addr::LOCALHOST.into(),
        profile: "gpt".into(),
        tool: Arc::from("get_document"),
        outcome,
        reason: "-",
        status: 200,
    }
}

/// Rows from several threads add up; quantiles are their bucket's bound, within 19%
/// of the true value; each thread keeps its latest decisions.
#[test]
fn status_rows_are_summed_and_their_quantiles_near() {
    let m = Metrics::new();
    let key = |method| RequestKey {
        route: "/mcp",
        profile: "gpt",
        method,
        status: 200,
    };
    std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| {
                for ms in 1..=100u64 {
                    let ending = if ms % 10 == 0 {
                        Ending::Refused("rate_limited")
                    } else {
                        Ending::Answered
                    };
                    let took = Duration::from_millis(ms);
                    let note = RowNote {
                        tool: Some("get_document"),
                        ending,
                    };
                    m.count_request(&key("tools/call"), took, Some(&note));
                    m.count_tool_call("gpt", "get_document", decision("forwarded"));
                }
            });
        }
    });
    let note = RowNote {
        tool: None,
        ending: Ending::UpstreamError,
    };
    m.count_request(&key("tools/list"), Duration::ZERO, Some(&note));
    let (rows, recent) = m.status_rows();
    assert_eq!(rows.len(), 2);
    let (labels, row) = &rows[0];
    assert_eq!(
        (&*labels.tool.0, labels.method),
        ("get_document", "tools/call")
    );
    assert_eq!(row.requests, 200);
    assert_eq!(row.refusals, vec![("rate_limited", 20)]);
    let p50 = row.quantile(0.5).unwrap();
    let p99 = row.quantile(0.99).unwrap();
    assert!((0.050..=0.050 * 1.19).contains(&p50), "{p50}");
    assert!((0.099..=0.099 * 1.19).contains(&p99), "{p99}");
    assert_eq!(rows[1].1.upstream_errors, 1);
    assert_eq!(rows[1].1.quantile(0.5), Some(row_bound(0)));
    assert_eq!(recent.len(), RECENT);
    assert!(recent.windows(2).all(|w| w[0].at >= w[1].at));
}

/// Counts made on several threads add up, and the histograms read exactly as
/// prometheus_client's own would for the same observations.
#[test]
fn per_request_series_from_every_thread_are_summed() {
    use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
    let m = Metrics::new();
    let key = RequestKey {
        route: "/mcp/{token}",
        profile: "gpt",
        method: "tools/call",
        status: 200,
    };
    let upstream: Arc<str> = Arc::from("docs");
    let times = [0.0004, 0.003, 0.003, 2.5, 40.0];
    std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| {
                for t in times {
                    m.count_request(&key, Duration::from_secs_f64(t), None);
                    m.count_tool_call("gpt", "get_document", decision("forwarded"));
                    m.observe_upstream(&upstream, Duration::from_secs_f64(t));
                }
            });
        }
    });
    m.count_request(&key, Duration::from_secs_f64(0.003), None);
    let text = m.render();
    assert!(
        text.contains("mcpgate_requests_total{route=\"/mcp/{token}\",profile=\"gpt\",method=\"tools/call\",status=\"200\"} 11\n"),
        "{text}"
    );
    assert!(
        text.contains("mcpgate_tool_calls_total{profile=\"gpt\",tool=\"get_document\",outcome=\"forwarded\"} 10\n"),
        "{text}"
    );

    let mut reference = Registry::with_prefix("mcpgate");
    let route: Family<RouteLabels, Histogram, fn() -> Histogram> =
        Family::new_with_constructor(|| Histogram::new(exponential_buckets(0.001, 2.0, 15)));
    let up: Family<UpstreamLabels, Histogram, fn() -> Histogram> =
        Family::new_with_constructor(|| Histogram::new(exponential_buckets(0.001, 2.0, 15)));
    reference.register(
        "request_duration_seconds",
        "Time from request to the answer's head (streams go on after it)",
        route.clone(),
    );
    reference.register(
        "upstream_duration_seconds",
        "Time the upstream took to send its answer's head",
        up.clone(),
    );
    for t in times.iter().chain(&times).chain(&[0.003]) {
        route
            .get_or_create(&RouteLabels {
                route: Label::from("/mcp/{token}"),
            })
            .observe(*t);
    }
    for t in times.iter().chain(&times) {
        up.get_or_create(&UpstreamLabels {
            upstream: Label::from("docs"),
        })
        .observe(*t);
    }
    let mut expected = String::new();
    encode(&mut expected, &reference).unwrap();
    let expected = expected.trim_end_matches("# EOF\n");
    assert!(
        text.contains(expected),
        "{text}\n--- expected ---\n{expected}"
    );
}

#[test]
fn renders_prometheus_text() {
    let mut m = Metrics::new();
    // A component's family, registered as the gateway registers them.
    let reloads = prometheus_client::metrics::counter::Counter::<u64>::default();
    m.registry()
        .register("config_reload", "Reloads", reloads.clone());
    reloads.inc();
    m.count_refusal("tool_denied");
    let text = m.render();
    assert!(
        text.contains("mcpgate_refusals_total{reason=\"tool_denied\"} 1"),
        "{text}"
    );
    assert!(text.contains("mcpgate_config_reload_total 1"), "{text}");
    assert!(text.ends_with("# EOF\n"));
}
