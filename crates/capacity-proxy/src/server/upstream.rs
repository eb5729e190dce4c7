//! Forward mode's upstream: sending a call on (its headers unchanged but `Host` and the
//! hop-by-hop ones), reading the reply whole, and passing calls through uncharged.

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Request, Response, StatusCode, Uri, header};
use http_body_util::{BodyExt, Full};
use serde_json::Value;

use super::request::{Call, TARGET_PREFIX};
use super::{Body, Inner};
use crate::config::Mode;
use crate::ddb;
use crate::error::ProxyError;

/// An upstream reply, fully read.
pub(super) struct Reply {
    pub(super) status: StatusCode,
    pub(super) headers: HeaderMap,
    pub(super) body: Bytes,
}

impl Reply {
    pub(super) fn into_response(self) -> Response<Body> {
        let mut resp = Response::new(Full::new(self.body));
        *resp.status_mut() = self.status;
        *resp.headers_mut() = self.headers;
        resp
    }

    pub(super) fn json(&self) -> Option<Value> {
        serde_json::from_slice(&self.body).ok()
    }
}

fn hop_by_hop(name: &header::HeaderName) -> bool {
    matches!(
        name.as_str(),
        "host"
            | "content-length"
            | "connection"
            | "transfer-encoding"
            | "keep-alive"
            | "proxy-connection"
            | "te"
            | "trailer"
            | "upgrade"
    )
}

impl Inner {
    /// Sends a request upstream; `body` replaces the received body when given, and
    /// `target` the operation.
    pub(super) async fn send(
        &self,
        call: &Call,
        body: Option<Bytes>,
        target: Option<&str>,
    ) -> Result<Reply, ProxyError> {
        let Mode::Forward { upstream } = &self.config.mode else {
            return Err(ProxyError::Upstream("sink mode has no upstream".into()));
        };
        let authority = upstream
            .authority()
            .ok_or_else(|| ProxyError::Config("upstream has no host".into()))?;
        let path = call.uri.path_and_query().map_or("/", |p| p.as_str());
        let uri = Uri::builder()
            .scheme("http")
            .authority(authority.clone())
            .path_and_query(path)
            .build()
            .map_err(|e| ProxyError::Upstream(e.to_string()))?;
        let mut req = Request::new(Full::new(body.unwrap_or_else(|| call.body.clone())));
        *req.method_mut() = call.method.clone();
        *req.uri_mut() = uri;
        let headers = req.headers_mut();
        for (k, v) in &call.headers {
            if !hop_by_hop(k) {
                headers.append(k.clone(), v.clone());
            }
        }
        if let Some(target) = target {
            let v = HeaderValue::from_str(&format!("{TARGET_PREFIX}{target}"))
                .map_err(|e| ProxyError::Upstream(e.to_string()))?;
            headers.insert("x-amz-target", v);
        }
        let host = HeaderValue::from_str(authority.as_str())
            .map_err(|e| ProxyError::Upstream(e.to_string()))?;
        headers.insert(header::HOST, host);
        let resp = self
            .client
            .request(req)
            .await
            .map_err(|e| ProxyError::Upstream(format!("{e:?}")))?;
        let (parts, body) = resp.into_parts();
        let body = body
            .collect()
            .await
            .map_err(|e| ProxyError::Upstream(e.to_string()))?
            .to_bytes();
        let mut headers = parts.headers;
        let names: Vec<_> = headers.keys().filter(|k| hop_by_hop(k)).cloned().collect();
        for name in names {
            headers.remove(name);
        }
        Ok(Reply {
            status: parts.status,
            headers,
            body,
        })
    }

    /// Sends `call` upstream (with `body` in place of its own when given); `Err` is the
    /// error to answer when the upstream could not be reached.
    pub(super) async fn forward(
        &self,
        call: &Call,
        body: Option<Bytes>,
    ) -> Result<Reply, Response<Body>> {
        self.send(call, body, None).await.map_err(|e| {
            tracing::warn!(op = %call.op(), "upstream failed: {e}");
            ddb::internal_error(&format!("capacity-proxy upstream failed: {e}"))
        })
    }

    /// Forwards `call` uncharged and answers with the upstream's reply (the sink refuses
    /// it).
    pub(super) async fn passthrough(&self, call: &Call) -> Response<Body> {
        if self.config.mode == Mode::Sink {
            return self.sink_unsupported(call.op());
        }
        match self.forward(call, None).await {
            Ok(reply) => reply.into_response(),
            Err(resp) => resp,
        }
    }

    /// A call lacking what its operation requires: the sink refuses it with `message`,
    /// forward mode passes it through for the upstream to answer.
    pub(super) async fn malformed(&self, call: &Call, message: &str) -> Response<Body> {
        match self.config.mode {
            Mode::Sink => ddb::validation_error(message),
            Mode::Forward { .. } => self.passthrough(call).await,
        }
    }
}
