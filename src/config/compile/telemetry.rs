//! `[telemetry]`: where spans go (an OTLP/HTTP collector), the sampled share, the service
//! name and the export queue's bound.

use super::{Fail, TelemetrySettings, at, fail};
use crate::config::raw::{self, S};

/// `[telemetry]`: `None` without an `otlp` address (nothing else does anything then).
pub(super) fn telemetry(
    t: Option<&S<raw::RawTelemetry>>,
) -> Result<Option<TelemetrySettings>, Fail> {
    let Some(t) = t else {
        return Ok(None);
    };
    let t = t.get_ref();
    let Some(otlp) = &t.otlp else {
        return Ok(None);
    };
    let url = at(otlp, otlp_url(otlp.get_ref()))?;
    let sampling = match &t.sampling {
        Some(v) if !(0.0..=1.0).contains(v.get_ref()) => {
            return fail(v.span(), "sampling is a share of traces: from 0 to 1");
        }
        Some(v) => *v.get_ref(),
        None => 1.0,
    };
    let service_name = match &t.service_name {
        Some(v) if v.get_ref().trim().is_empty() => return fail(v.span(), "empty service_name"),
        Some(v) => v.get_ref().clone(),
        None => "mcpgate".to_string(),
    };
    let queue = match &t.queue {
        Some(v) => at(
            v,
            usize::try_from(*v.get_ref())
                .ok()
                .filter(|n| (1..=1_000_000).contains(n))
                .ok_or_else(|| "queue is a number of spans, from 1 to 1000000".to_string()),
        )?,
        None => 16384,
    };
    Ok(Some(TelemetrySettings {
        otlp: url,
        sampling,
        service_name,
        queue,
    }))
}

/// The traces URL of an OTLP/HTTP collector: `http://host:port` gets OTLP's `/v1/traces`;
/// a URL with a path is taken as it is.
fn otlp_url(text: &str) -> Result<String, String> {
    let uri: http::Uri = text
        .parse()
        .map_err(|e| format!("otlp is not a URL: {e}"))?;
    if uri.scheme_str() != Some("http") {
        return Err(
            "otlp must be an http:// URL (a collector on the host or in the pod; https is not supported)"
                .into(),
        );
    }
    let Some(authority) = uri.authority() else {
        return Err("otlp has no host".into());
    };
    if authority.as_str().contains('@') {
        return Err("otlp must not carry credentials".into());
    }
    if uri.query().is_some() {
        return Err("otlp must not have a query".into());
    }
    match uri.path() {
        "" | "/" => Ok(format!("http://{authority}/v1/traces")),
        _ => Ok(text.to_string()),
    }
}
