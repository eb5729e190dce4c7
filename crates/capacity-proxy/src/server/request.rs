//! Reading a request: its DynamoDB operation (`X-Amz-Target`) and body, which operations
//! are data-plane calls and which of them read, and the table a body names.

use bytes::Bytes;
use http::{HeaderMap, Method, Request, Uri};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use serde_json::Value;

use crate::error::ProxyError;

/// The prefix of `X-Amz-Target` before the operation's name.
pub(super) const TARGET_PREFIX: &str = "DynamoDB_20120810.";

/// The request as received, kept for forwarding.
pub(super) struct Call {
    pub(super) method: Method,
    pub(super) uri: Uri,
    pub(super) headers: HeaderMap,
    pub(super) body: Bytes,
    /// The DynamoDB operation; `None` without a DynamoDB target.
    pub(super) op: Option<String>,
}

impl Call {
    /// Reads the whole request: its operation from `X-Amz-Target` and its body.
    pub(super) async fn read(req: Request<Incoming>) -> Result<Self, ProxyError> {
        let op = req
            .headers()
            .get("x-amz-target")
            .and_then(|v| v.to_str().ok())
            .and_then(|t| t.strip_prefix(TARGET_PREFIX))
            .map(str::to_owned);
        let (parts, body) = req.into_parts();
        let body = match body.collect().await {
            Ok(b) => b.to_bytes(),
            Err(e) => return Err(ProxyError::Upstream(format!("reading request body: {e}"))),
        };
        Ok(Self {
            method: parts.method,
            uri: parts.uri,
            headers: parts.headers,
            body,
            op,
        })
    }

    /// The operation's name, empty without a DynamoDB target.
    pub(super) fn op(&self) -> &str {
        self.op.as_deref().unwrap_or_default()
    }
}

/// Whether `op` is a data-plane call, the kind faults are injected into.
pub(super) fn is_data_plane(op: &str) -> bool {
    matches!(
        op,
        "BatchWriteItem"
            | "PutItem"
            | "UpdateItem"
            | "DeleteItem"
            | "GetItem"
            | "BatchGetItem"
            | "Query"
            | "Scan"
            | "TransactWriteItems"
            | "TransactGetItems"
    )
}

pub(super) fn is_read(op: &str) -> bool {
    matches!(
        op,
        "GetItem" | "BatchGetItem" | "Query" | "Scan" | "TransactGetItems"
    )
}

/// `TableName`, or the first table of `RequestItems`.
pub(super) fn table_of(json: &Value) -> Option<String> {
    json.get("TableName")
        .and_then(Value::as_str)
        .map(str::to_owned)
        .or_else(|| {
            json.get("RequestItems")
                .and_then(Value::as_object)
                .and_then(|m| m.keys().next().cloned())
        })
}
