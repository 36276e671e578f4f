//! The scrape in Prometheus's older text format, for scrapers that do not ask for
//! OpenMetrics.

use std::collections::HashSet;

/// The OpenMetrics text of [`super::Metrics::render`] in Prometheus's older text format (0.0.4),
/// for scrapers that do not ask for OpenMetrics (and `promtool check metrics`): a
/// counter's `HELP` and `TYPE` name its `_total` samples, and there is no `# EOF`. The
/// samples themselves read the same in both.
pub fn to_text_format(openmetrics: &str) -> String {
    let counters: HashSet<&str> = openmetrics
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.strip_suffix(" counter"))
        .collect();
    let mut out = String::with_capacity(openmetrics.len() + 1024);
    for line in openmetrics.lines() {
        if line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        let meta = ["# HELP ", "# TYPE "]
            .into_iter()
            .find_map(|p| line.strip_prefix(p).map(|rest| (p, rest)));
        match meta {
            Some((prefix, rest)) => {
                let (name, tail) = rest.split_once(' ').unwrap_or((rest, ""));
                out.push_str(prefix);
                out.push_str(name);
                if counters.contains(name) {
                    out.push_str("_total");
                }
                out.push(' ');
                out.push_str(tail);
            }
            None => out.push_str(line),
        }
        out.push('\n');
    }
    out
}
