//! DynamoDB JSON 1.0 response builders.

use bytes::Bytes;
use http::{HeaderValue, Response, StatusCode, header};
use http_body_util::Full;
use serde_json::{Value, json};

use crate::capacity::ThrottleReason;

/// Content type of the DynamoDB JSON 1.0 protocol.
pub const CONTENT_TYPE: &str = "application/x-amz-json-1.0";
/// Prefix of DynamoDB error type names.
pub const ERROR_PREFIX: &str = "com.amazonaws.dynamodb.v20120810#";

/// A response with a JSON body.
pub fn json_response(status: StatusCode, body: &Value) -> Response<Full<Bytes>> {
    bytes_response(status, Bytes::from(body.to_string()))
}

/// A response with a ready-made JSON body.
pub fn bytes_response(status: StatusCode, body: Bytes) -> Response<Full<Bytes>> {
    let mut resp = Response::new(Full::new(body));
    *resp.status_mut() = status;
    resp.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(CONTENT_TYPE));
    resp.headers_mut().insert(
        "x-amzn-requestid",
        HeaderValue::from_static("capacity-proxy"),
    );
    resp
}

/// A DynamoDB error response: `{"__type": "...#NAME", "message": ...}` plus `extra` fields.
pub fn error_response(
    status: StatusCode,
    name: &str,
    message: &str,
    extra: Option<(&str, Value)>,
) -> Response<Full<Bytes>> {
    let mut body = json!({ "__type": format!("{ERROR_PREFIX}{name}"), "message": message });
    if let (Some((k, v)), Some(obj)) = (extra, body.as_object_mut()) {
        obj.insert(k.to_owned(), v);
    }
    let mut resp = json_response(status, &body);
    if let Ok(v) = HeaderValue::from_str(name) {
        resp.headers_mut().insert("x-amzn-errortype", v);
    }
    resp
}

/// HTTP 400 `ProvisionedThroughputExceededException` with `ThrottlingReasons`, as DynamoDB
/// sends it (one entry per distinct reason, the table ARN as the resource).
pub fn throttle_response(reasons: &[ThrottleReason], table_arn: &str) -> Response<Full<Bytes>> {
    let list: Vec<Value> = reasons
        .iter()
        .map(|r| json!({ "reason": r.as_str(), "resource": table_arn }))
        .collect();
    error_response(
        StatusCode::BAD_REQUEST,
        "ProvisionedThroughputExceededException",
        throttle_message(reasons),
        Some(("ThrottlingReasons", Value::Array(list))),
    )
}

/// HTTP 400 `TransactionCanceledException` for a transaction throttled by the proxy, as
/// DynamoDB sends it: one cancellation reason per action in order, `ThrottlingError` for
/// each action `refused` names a reason for, `None` for the others.
pub fn transaction_throttled(refused: &[Option<ThrottleReason>]) -> Response<Full<Bytes>> {
    let reasons: Vec<Value> = refused
        .iter()
        .map(|reason| match reason {
            None => json!({ "Code": "None" }),
            Some(reason) => {
                json!({ "Code": "ThrottlingError", "Message": throttle_message(&[*reason]) })
            }
        })
        .collect();
    let codes: Vec<&str> = refused
        .iter()
        .map(|r| {
            if r.is_some() {
                "ThrottlingError"
            } else {
                "None"
            }
        })
        .collect();
    error_response(
        StatusCode::BAD_REQUEST,
        "TransactionCanceledException",
        &format!(
            "Transaction cancelled, please refer cancellation reasons for specific reasons [{}]",
            codes.join(", ")
        ),
        Some(("CancellationReasons", Value::Array(reasons))),
    )
}

/// The error name of a DynamoDB error body (`__type` after its last `#`), if it is one.
pub fn error_name(body: &Value) -> Option<&str> {
    let ty = body.get("__type")?.as_str()?;
    Some(ty.rsplit('#').next().unwrap_or(ty))
}

/// What a throttle for `reasons` says.
fn throttle_message(reasons: &[ThrottleReason]) -> &'static str {
    if reasons.iter().all(|r| r.is_key_range()) {
        "Throughput exceeds the current capacity for one or more partition keys of your table \
         (capacity-proxy key-range limit)."
    } else {
        "The level of configured provisioned throughput for the table was exceeded \
         (capacity-proxy table limit)."
    }
}

/// HTTP 500 `InternalServerError`.
pub fn internal_error(message: &str) -> Response<Full<Bytes>> {
    error_response(
        StatusCode::INTERNAL_SERVER_ERROR,
        "InternalServerError",
        message,
        None,
    )
}

/// HTTP 400 `ValidationException`.
pub fn validation_error(message: &str) -> Response<Full<Bytes>> {
    error_response(
        StatusCode::BAD_REQUEST,
        "ValidationException",
        message,
        None,
    )
}
