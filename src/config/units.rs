//! The small value languages of the config file: durations (`250ms`, `30s`, `5m`), sizes
//! (`512KiB`, `1MiB`), timestamps (RFC 3339) and secret references (`${env:NAME}`,
//! `${file:/path}`).

use std::time::{Duration, SystemTime};

/// A duration as docs/configuration.md states the grammar: a whole number and one unit,
/// with nothing between or around them: `ms`, `s`, `m`, `h` or `d`. Anything else
/// (`"60 seconds"`, `"2 months"`, `"1ms 2s"`, `"1.5s"`, `"1h30m"`) is refused with the
/// forms that are right.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let wrong = || {
        format!(
            "bad duration {s:?}: write a whole number and a unit, nothing between them: \"250ms\", \"30s\", \"5m\", \"1h\", \"2d\""
        )
    };
    let split = s.find(|c: char| !c.is_ascii_digit()).ok_or_else(wrong)?;
    let (number, unit) = s.split_at(split);
    let n: u64 = number.parse().map_err(|_| wrong())?;
    let seconds = |k: u64| n.checked_mul(k).map(Duration::from_secs);
    let d = match unit {
        "ms" => Some(Duration::from_millis(n)),
        "s" => seconds(1),
        "m" => seconds(60),
        "h" => seconds(3600),
        "d" => seconds(86_400),
        _ => None,
    }
    .ok_or_else(wrong)?;
    if d.is_zero() {
        return Err(format!("duration {s:?} must be greater than zero"));
    }
    Ok(d)
}

pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let mult: u64 = match unit.trim() {
        "" | "B" => 1,
        "KiB" => 1 << 10,
        "MiB" => 1 << 20,
        "GiB" => 1 << 30,
        "KB" | "kB" => 1000,
        "MB" => 1_000_000,
        "GB" => 1_000_000_000,
        _ => return Err(format!("bad size {s:?}; write e.g. \"512KiB\", \"1MiB\"")),
    };
    let n: u64 = num
        .parse()
        .map_err(|_| format!("bad size {s:?}; write e.g. \"512KiB\", \"1MiB\""))?;
    n.checked_mul(mult)
        .filter(|v| *v > 0)
        .ok_or_else(|| format!("size {s:?} must be greater than zero and fit in 64 bits"))
}

pub fn parse_time(s: &str) -> Result<SystemTime, String> {
    humantime::parse_rfc3339_weak(s.trim())
        .map_err(|_| format!("bad timestamp {s:?}; write RFC 3339, e.g. \"2026-12-31T00:00:00Z\""))
}

/// Replaces every `${env:NAME}` and `${file:PATH}` in `s` by its value. Files lose one
/// trailing newline (what `echo secret > file` adds). Any other `${` is an error, so a typo
/// never goes upstream as a literal.
pub fn resolve_secrets(s: &str) -> Result<String, String> {
    resolve_secrets_noting(s, &mut Vec::new())
}

/// `resolve_secrets`, adding every file it read to `files` (the reload watcher's list).
pub fn resolve_secrets_noting(
    s: &str,
    files: &mut Vec<std::path::PathBuf>,
) -> Result<String, String> {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let end = after
            .find('}')
            .ok_or_else(|| "unterminated \"${\"; write ${env:NAME} or ${file:/path}".to_string())?;
        let reference = &after[..end];
        let value = if let Some(name) = reference.strip_prefix("env:") {
            std::env::var(name).map_err(|_| {
                format!("secret ${{env:{name}}}: environment variable {name} is not set")
            })?
        } else if let Some(path) = reference.strip_prefix("file:") {
            files.push(path.into());
            let mut v = std::fs::read_to_string(path)
                .map_err(|e| format!("secret ${{file:{path}}}: cannot read {path}: {e}"))?;
            if v.ends_with('\n') {
                v.pop();
                if v.ends_with('\r') {
                    v.pop();
                }
            }
            v
        } else {
            return Err(format!(
                "unknown reference ${{{reference}}}; write ${{env:NAME}} or ${{file:/path}}"
            ));
        };
        out.push_str(&value);
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("1MiB").unwrap(), 1 << 20);
        assert_eq!(parse_size("512KiB").unwrap(), 512 << 10);
        assert_eq!(parse_size("100").unwrap(), 100);
        assert!(parse_size("0").is_err());
        assert!(parse_size("1 parsec").is_err());
        assert!(parse_size("99999999999999GiB").is_err());
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("250ms").unwrap(), Duration::from_millis(250));
        assert_eq!(parse_duration("5m").unwrap(), Duration::from_secs(300));
        assert_eq!(parse_duration("1h").unwrap(), Duration::from_secs(3600));
        assert_eq!(parse_duration("2d").unwrap(), Duration::from_secs(172_800));
        assert_eq!(parse_duration("30s").unwrap(), Duration::from_secs(30));
        assert!(parse_duration("0s").is_err());
        for wrong in [
            "soon",
            "60 seconds",
            "2 months",
            "1ms 2s",
            "1h30m",
            "1.5s",
            " 5s",
            "5s ",
            "5 s",
            "5",
            "-5s",
            "5S",
            "5sec",
            "99999999999999999999d",
            "",
        ] {
            let e = parse_duration(wrong).unwrap_err();
            assert!(e.contains("\"30s\""), "{wrong:?}: {e}");
        }
    }

    #[test]
    fn secrets() {
        // Reading PATH exercises the env branch without changing the environment.
        let path = std::env::var("PATH").unwrap();
        assert_eq!(resolve_secrets("${env:PATH}").unwrap(), path);
        let missing = resolve_secrets("${env:MCPGATE_TEST_SURELY_UNSET}").unwrap_err();
        assert!(missing.contains("MCPGATE_TEST_SURELY_UNSET"));
        assert!(resolve_secrets("${vault:x}").is_err());
        assert!(resolve_secrets("abc ${env:X").is_err());
        assert_eq!(resolve_secrets("plain").unwrap(), "plain");
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("s");
        std::fs::write(&p, "hunter2\n").unwrap();
        let v = resolve_secrets(&format!("Bearer ${{file:{}}}", p.display())).unwrap();
        assert_eq!(v, "Bearer hunter2");
    }
}
