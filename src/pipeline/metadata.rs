//! The protected resource metadata (RFC 9728) of a listener with `auth = "oauth"` routes:
//! `GET /.well-known/oauth-protected-resource`, and the same followed by each oauth
//! route's path, answer the document the `[oauth]` table describes. It is public: no
//! token, Host or Origin rule applies, and browsers may read it from any origin (MCP
//! clients that run in a page discover the issuer this way).

use super::respond::set_request_id;
use crate::config::Listener;
use crate::config::compile::OAuthSettings;
use crate::http::body::GateBody;
use http::{HeaderValue, Method, Response, StatusCode, header};

/// The answer for a request at `path`, if it is one of `listener`'s metadata paths.
pub(super) fn serve(
    oauth: Option<&OAuthSettings>,
    listener: &Listener,
    method: &Method,
    path: &str,
    request_id: &str,
) -> Option<Response<GateBody>> {
    let oauth = oauth?;
    if !listener.metadata_paths.iter().any(|p| **p == *path) {
        return None;
    }
    let mut r = match *method {
        Method::GET | Method::HEAD => {
            let mut r = Response::new(if *method == Method::GET {
                GateBody::full(oauth.metadata.clone())
            } else {
                GateBody::Empty
            });
            let h = r.headers_mut();
            h.insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            );
            h.insert(
                header::CACHE_CONTROL,
                HeaderValue::from_static("public, max-age=300"),
            );
            r
        }
        // A page's fetch with MCP headers asks first.
        Method::OPTIONS => {
            let mut r = Response::new(GateBody::Empty);
            *r.status_mut() = StatusCode::NO_CONTENT;
            let h = r.headers_mut();
            h.insert(
                header::ACCESS_CONTROL_ALLOW_METHODS,
                HeaderValue::from_static("GET, HEAD, OPTIONS"),
            );
            h.insert(
                header::ACCESS_CONTROL_ALLOW_HEADERS,
                HeaderValue::from_static("*"),
            );
            h.insert(
                header::ACCESS_CONTROL_MAX_AGE,
                HeaderValue::from_static("86400"),
            );
            r
        }
        _ => {
            let mut r = Response::new(GateBody::Empty);
            *r.status_mut() = StatusCode::METHOD_NOT_ALLOWED;
            r.headers_mut().insert(
                header::ALLOW,
                HeaderValue::from_static("GET, HEAD, OPTIONS"),
            );
            r
        }
    };
    r.headers_mut().insert(
        header::ACCESS_CONTROL_ALLOW_ORIGIN,
        HeaderValue::from_static("*"),
    );
    set_request_id(&mut r, request_id);
    Some(r)
}
