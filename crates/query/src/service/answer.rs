//! How a route's answer becomes the HTTP response, logged with what it cost, and how
//! failures of the layers below (the store, the merged read) become API errors.

use http::{HeaderValue, Response, StatusCode, header};
use store::error::StoreError;
use store::item::ReadingItem;

use super::{Answer, ReadStats};
use crate::error::{ApiError, codes};
use crate::exec::ExecError;
use crate::model::{ReadingOut, format_ts};

/// Room a readings page keeps for everything but its items: the brackets, the
/// `next_cursor` field and the cursor itself.
pub(super) const PAGE_OVERHEAD_BYTES: usize = 1024;

/// The response to a request's answer, logged: a 200 with what the read cost, an
/// error at `warn` when the service is to blame and at `info` when the request is.
pub(super) fn respond(method: &str, path: &str, answer: Answer) -> Response<String> {
    match answer {
        Ok((body, stats)) => {
            tracing::info!(
                method,
                path,
                status = 200,
                items_read = stats.items_read,
                items_returned = stats.items_returned,
                calls = stats.calls,
                plan_queries = stats.plan_queries,
                duplicates = stats.duplicates,
                over_read = over_read(&stats),
                "query answered"
            );
            json_response(StatusCode::OK, body, None)
        }
        Err(e) => {
            if e.status.is_server_error() {
                tracing::warn!(method, path, status = e.status.as_u16(), code = e.code, message = %e.message, "query failed");
            } else {
                tracing::info!(method, path, status = e.status.as_u16(), code = e.code, message = %e.message, "query refused");
            }
            error_response(&e)
        }
    }
}

/// `value` as a response body.
pub(super) fn json_body<T: serde::Serialize>(value: &T) -> Result<String, ApiError> {
    serde_json::to_string(value).map_err(|e| ApiError::internal(e.to_string()))
}

/// The JSON response of an error, with its `Retry-After` (and `Allow` on a 405).
pub fn error_response(e: &ApiError) -> Response<String> {
    json_response(e.status, e.body(), e.retry_after)
}

fn json_response(status: StatusCode, body: String, retry_after: Option<u32>) -> Response<String> {
    let mut resp = Response::new(body);
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    if let Some(secs) = retry_after {
        resp.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(secs));
    }
    if status == StatusCode::METHOD_NOT_ALLOWED {
        resp.headers_mut()
            .insert(header::ALLOW, HeaderValue::from_static("GET"));
    }
    resp
}

/// Items read per item returned (per item read when none was returned).
fn over_read(s: &ReadStats) -> f64 {
    if s.items_returned == 0 {
        s.items_read as f64
    } else {
        s.items_read as f64 / s.items_returned as f64
    }
}

/// A stored reading as the API returns it.
pub(super) fn reading_out(item: ReadingItem) -> Result<ReadingOut, ApiError> {
    let ts = format_ts(item.ts_ms)
        .ok_or_else(|| ApiError::internal(format!("stored ts_ms {} out of range", item.ts_ms)))?;
    Ok(ReadingOut {
        device_id: item.device_id,
        event_id: item.event_id,
        ts,
        metrics: item.metrics,
        tags: item.tags,
    })
}

/// The one place store failures meet HTTP: throttles and transient failures are
/// 503 (come back later); anything else is the deployment's fault, never the input's.
pub fn store_error(e: StoreError) -> ApiError {
    match &e {
        StoreError::Throttled { .. } => ApiError::throttled(1),
        StoreError::Transient(_) | StoreError::Deadline => {
            let mut a = ApiError::unavailable("the table could not be read; retry later");
            a.retry_after = Some(1);
            a
        }
        _ => {
            tracing::error!(error = %e, "read failed");
            ApiError::internal("the read failed")
        }
    }
}

/// A merged read's failure: the store's, or more readings to sort than memory allows.
pub(super) fn exec_error(e: ExecError) -> ApiError {
    match e {
        ExecError::Store(e) => store_error(e),
        e @ ExecError::TooMuchToSort { .. } => {
            ApiError::bad_request(codes::RANGE_TOO_LARGE, e.to_string())
        }
    }
}
