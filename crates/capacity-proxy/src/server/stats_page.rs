//! `GET /__stats[?top=N]`: the counters as JSON, the busiest `N` keys (20 by default,
//! every key for 0).

use http::{HeaderValue, Method, Request, Response, StatusCode, Uri, header};
use serde_json::Value;

use super::{Body, Inner};
use crate::ddb;

/// Whether `req` asks for the stats page.
pub(super) fn is_stats_page<B>(req: &Request<B>) -> bool {
    req.method() == Method::GET && req.uri().path() == "/__stats"
}

impl Inner {
    /// The stats page for a request to `uri`.
    pub(super) fn stats_page(&self, uri: &Uri) -> Response<Body> {
        let top = uri
            .query()
            .and_then(|q| q.split('&').find_map(|kv| kv.strip_prefix("top=")))
            .and_then(|v| v.parse::<usize>().ok())
            .unwrap_or(20);
        let snap = self.snapshot(if top == 0 { None } else { Some(top) });
        let body = serde_json::to_value(&snap).unwrap_or(Value::Null);
        let mut resp = ddb::json_response(StatusCode::OK, &body);
        resp.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        resp
    }
}
