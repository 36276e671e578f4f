//! A process's three pipes: stdin written from its bounded queue, stdout read line by line
//! and routed, stderr logged at a bounded rate.

use super::*;

pub(super) async fn write_stdin(
    mut stdin: tokio::net::unix::pipe::Sender,
    mut queue: mpsc::UnboundedReceiver<Queued>,
) {
    while let Some((line, room)) = queue.recv().await {
        if stdin.write_all(&line).await.is_err() {
            return;
        }
        drop(room);
    }
    // The queue's last sender went (`close`): the child sees the end of its input.
    let _ = stdin.shutdown().await;
}

pub(super) async fn read_stdout(child: Weak<Child>, stdout: tokio::net::unix::pipe::Receiver) {
    let mut lines = Lines::new(stdout, MAX_LINE);
    while let Some(line) = lines.next().await {
        let Some(child) = child.upgrade() else { return };
        let text = match line {
            Line::Text(t) if t.iter().all(u8::is_ascii_whitespace) => continue,
            Line::Text(t) => t,
            Line::TooLong(n) => {
                tracing::warn!(upstream = %child.upstream, pid = child.pid, bytes = n, max = MAX_LINE, "the stdio server wrote a line over the limit; dropped");
                continue;
            }
        };
        match serde_json::from_slice::<Value>(&text) {
            Ok(Value::Object(m)) if m.get("jsonrpc").is_some_and(|v| v == "2.0") => {
                child.route(Value::Object(m)).await;
            }
            Ok(Value::Array(items)) if !items.is_empty() => {
                for m in items {
                    if m.get("jsonrpc").is_some_and(|v| v == "2.0") {
                        child.route(m).await;
                    }
                }
            }
            _ => {
                let shown = String::from_utf8_lossy(&text[..text.len().min(200)]).into_owned();
                tracing::warn!(upstream = %child.upstream, pid = child.pid, line = %shown, "the stdio server wrote a line that is not JSON-RPC; dropped");
            }
        }
    }
}

pub(super) async fn read_stderr(
    upstream: Arc<str>,
    pid: u32,
    stderr: tokio::net::unix::pipe::Receiver,
) {
    let mut lines = Lines::new(stderr, MAX_STDERR_LINE);
    let mut second = tokio::time::Instant::now();
    let (mut logged, mut dropped) = (0u32, 0u64);
    let report = |dropped: u64| {
        if dropped > 0 {
            tracing::warn!(upstream = %upstream, pid, dropped, "stdio server stderr lines not logged (over {STDERR_LINES_PER_SECOND} a second)");
        }
    };
    loop {
        // With lines held back, the count is logged when the second is over, whether or
        // not more come.
        let line = if dropped > 0 {
            tokio::select! {
                line = lines.next() => line,
                _ = tokio::time::sleep_until(second + Duration::from_secs(1)) => {
                    report(std::mem::take(&mut dropped));
                    continue;
                }
            }
        } else {
            lines.next().await
        };
        let Some(line) = line else { break };
        if second.elapsed() >= Duration::from_secs(1) {
            report(std::mem::take(&mut dropped));
            second = tokio::time::Instant::now();
            logged = 0;
        }
        if logged >= STDERR_LINES_PER_SECOND {
            dropped += 1;
            continue;
        }
        logged += 1;
        match line {
            Line::Text(t) => {
                let text = String::from_utf8_lossy(&t);
                tracing::info!(upstream = %upstream, pid, stderr = %text, "stdio server stderr");
            }
            Line::TooLong(n) => {
                tracing::info!(upstream = %upstream, pid, bytes = n, "stdio server stderr: a line too long to log");
            }
        }
    }
    report(dropped);
}
