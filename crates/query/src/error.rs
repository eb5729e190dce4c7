//! The HTTP edge's error type: every failure a request can meet, mapped to a status
//! and a stable machine-readable code in one place.

use http::StatusCode;
use serde_json::json;

/// A failure answered to the client as `{"error": {"code", "message"}}`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{status} {code}: {message}")]
pub struct ApiError {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
    /// Seconds for a `Retry-After` header (503 only).
    pub retry_after: Option<u32>,
}

impl ApiError {
    fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            code,
            message: message.into(),
            retry_after: None,
        }
    }

    /// 400 with a specific code; the message names the offending parameter.
    pub fn bad_request(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, code, message)
    }

    pub fn bad_range(message: impl Into<String>) -> Self {
        Self::bad_request(codes::BAD_RANGE, message)
    }

    pub fn bad_cursor(message: impl Into<String>) -> Self {
        Self::bad_request(codes::BAD_CURSOR, message)
    }

    /// 403: the caller's token does not grant what it asks for (`crate::scope`).
    pub fn forbidden(message: impl Into<String>) -> Self {
        Self::new(StatusCode::FORBIDDEN, codes::FORBIDDEN, message)
    }

    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, codes::NOT_FOUND, message)
    }

    pub fn method_not_allowed(method: &str) -> Self {
        Self::new(
            StatusCode::METHOD_NOT_ALLOWED,
            codes::METHOD_NOT_ALLOWED,
            format!("method {method} is not allowed; use GET"),
        )
    }

    /// 503: DynamoDB throttled the read; the client should come back later.
    pub fn throttled(retry_after: u32) -> Self {
        Self {
            retry_after: Some(retry_after),
            ..Self::new(
                StatusCode::SERVICE_UNAVAILABLE,
                codes::THROTTLED,
                "the table is busy; retry later",
            )
        }
    }

    /// 500 for failures that no input can cause (service errors, corrupt stored data).
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, codes::INTERNAL, message)
    }

    /// 501 `not_supported`: the route needs something this deployment lacks (the
    /// message names the setting).
    pub fn not_implemented(message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_IMPLEMENTED, codes::NOT_SUPPORTED, message)
    }

    /// 502/503-class failure of a dependency that is not a throttle.
    pub fn unavailable(message: impl Into<String>) -> Self {
        Self::new(StatusCode::SERVICE_UNAVAILABLE, codes::UNAVAILABLE, message)
    }

    pub fn body(&self) -> String {
        json!({"error": {"code": self.code, "message": self.message}}).to_string()
    }

    pub fn is_client_error(&self) -> bool {
        self.status.is_client_error()
    }
}

/// The stable error codes of the API.
pub mod codes {
    pub const BAD_RANGE: &str = "bad_range";
    pub const RANGE_TOO_LARGE: &str = "range_too_large";
    pub const BAD_LIMIT: &str = "bad_limit";
    pub const BAD_ORDER: &str = "bad_order";
    pub const BAD_ID: &str = "bad_id";
    pub const BAD_PARAMETER: &str = "bad_parameter";
    pub const MISSING_PARAMETER: &str = "missing_parameter";
    pub const DUPLICATE_PARAMETER: &str = "duplicate_parameter";
    pub const UNKNOWN_PARAMETER: &str = "unknown_parameter";
    pub const BAD_CURSOR: &str = "bad_cursor";
    pub const BAD_INTERVAL: &str = "bad_interval";
    pub const NOT_SUPPORTED: &str = "not_supported";
    pub const BUDGET_EXCEEDED: &str = "budget_exceeded";
    pub const FORBIDDEN: &str = "forbidden";
    pub const NOT_FOUND: &str = "not_found";
    pub const METHOD_NOT_ALLOWED: &str = "method_not_allowed";
    pub const THROTTLED: &str = "throttled";
    pub const UNAVAILABLE: &str = "unavailable";
    pub const INTERNAL: &str = "internal";
}
