//! The API Gateway (HTTP API, payload 2.0) edge of the service.

use parking_lot::Mutex;
use std::convert::Infallible;
use std::future::Future;
use std::time::{Duration, Instant};

use lambda_http::request::RequestContext;
use lambda_http::{Body, Request, RequestExt, Response};
use store::clock::{time_left, wall_clock};
use store::directory::ShardReader;
use store::read::ReadingSource;

use crate::cursor::{CursorKeys, sealer_id};
use crate::error::ApiError;
use crate::params::percent_decode;
use crate::scope::ReadScope;
use crate::service::{QueryService, error_response};

/// Answers one API Gateway request. A named stage's prefix (`/prod/...`) is removed
/// before routing, so routes match under any stage. The wall clock is read once, here:
/// it is the request's `now`, and the reads stop by the invocation's deadline less the
/// configured margin, so the function answers before its timeout.
pub async fn handle_apigw<S: ReadingSource, D: ShardReader>(
    service: &QueryService<S, D>,
    request: Request,
) -> Result<Response<Body>, Infallible> {
    let stage = match request.request_context_ref() {
        Some(RequestContext::ApiGatewayV2(ctx)) => ctx.stage.clone(),
        _ => None,
    };
    let path = strip_stage(request.uri().path(), stage.as_deref());
    let scope = read_scope(service.config().scope_claim.as_deref(), &request);
    let now = match wall_clock() {
        Ok(now) => now,
        Err(e) => {
            tracing::error!(error = %e, "no usable clock");
            let failed = ApiError::internal("the read failed");
            return Ok(error_response(&failed).map(Body::from));
        }
    };
    // A context without a deadline (an event replayed outside the runtime) sets none.
    let deadline = request
        .lambda_context_ref()
        .filter(|ctx| ctx.deadline > 0)
        .map(|ctx| {
            // The time left by the wall clock the deadline is given in (`cargo lambda
            // watch` gives its timeout instead: `store::clock::time_left`). A clock
            // read as a Timestamp is after 1970.
            let now_ms = u64::try_from(now.as_millis()).unwrap_or(0);
            let left = time_left(ctx.deadline, now_ms);
            service.config().budget.deadline_from(left, Instant::now())
        });
    let parts = crate::service::Request {
        method: request.method().as_str(),
        path,
        query: request.uri().query(),
    };
    let response = service
        .handle_as(scope.as_ref(), parts, now, deadline)
        .await;
    Ok(response.map(Body::from))
}

/// What the caller of `request` may read: every device when no device claim is
/// configured (`claim` is `None`: IAM auth), else what the JWT authorizer's claims of
/// the request grant under `claim`, or the 403 that says why they grant nothing.
pub fn read_scope(claim: Option<&str>, request: &Request) -> Result<ReadScope, ApiError> {
    let Some(claim) = claim else {
        return Ok(ReadScope::Every);
    };
    let claims = match request.request_context_ref() {
        Some(RequestContext::ApiGatewayV2(ctx)) => ctx
            .authorizer
            .as_ref()
            .and_then(|a| a.jwt.as_ref())
            .map(|jwt| &jwt.claims),
        _ => None,
    };
    let lookup = claims.map(|c| |name: &str| c.get(name).map(String::as_str));
    ReadScope::from_claims(claim, lookup).map_err(ApiError::from)
}

/// How often at most a function reads its cursor keys again.
pub const KEY_REFRESH_EVERY: Duration = Duration::from_secs(60);

/// Reads the cursor keys again, with `read`, when `request`'s cursor names a key the
/// service does not hold: another instance, started after the secret was rotated,
/// sealed it with the new key. At most once per [`KEY_REFRESH_EVERY`] per function
/// (`last` is when it last did), so a cursor naming an unknown key cannot make every
/// request read the secret; a read that fails keeps the keys held.
pub async fn refresh_cursor_keys<S: ReadingSource, D: ShardReader, F, Fut, E>(
    service: &QueryService<S, D>,
    request: &Request,
    last: &Mutex<Option<Instant>>,
    read: F,
) where
    F: FnOnce() -> Fut,
    Fut: Future<Output = Result<CursorKeys, E>>,
    E: std::fmt::Display,
{
    let Some(id) = request
        .uri()
        .query()
        .and_then(cursor_of)
        .and_then(|raw| sealer_id(&raw))
    else {
        return;
    };
    let ring = &service.config().cursor_keys;
    if ring.get().holds(&id) {
        return;
    }
    {
        let mut last = last.lock();
        if last.is_some_and(|at| at.elapsed() < KEY_REFRESH_EVERY) {
            return;
        }
        *last = Some(Instant::now());
    }
    match read().await {
        Ok(keys) => {
            tracing::info!(key = %id, current = keys.current.id(), "cursor keys read again");
            ring.replace(keys);
        }
        Err(e) => tracing::warn!(error = %e, "cursor keys could not be read again"),
    }
}

/// The `cursor` parameter of a raw query string, decoded.
fn cursor_of(query: &str) -> Option<String> {
    query
        .split('&')
        .find_map(|pair| pair.strip_prefix("cursor="))
        .and_then(percent_decode)
}

/// `/prod/devices/d1/shards` under stage `prod` -> `/devices/d1/shards`.
pub fn strip_stage<'a>(path: &'a str, stage: Option<&str>) -> &'a str {
    match stage {
        Some(stage) if stage != "$default" => path
            .strip_prefix('/')
            .and_then(|p| p.strip_prefix(stage))
            .filter(|rest| rest.starts_with('/'))
            .unwrap_or(path),
        _ => path,
    }
}
