//! The API Gateway (HTTP API, payload 2.0) edge of the service.

use std::convert::Infallible;
use std::time::Instant;

use lambda_http::request::RequestContext;
use lambda_http::{Body, Request, RequestExt, Response};
use store::clock::{time_left, wall_clock};
use store::directory::ShardReader;
use store::read::ReadingSource;

use crate::error::ApiError;
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
    let response = service
        .handle_parts_by(
            request.method().as_str(),
            path,
            request.uri().query(),
            now,
            deadline,
        )
        .await;
    Ok(response.map(Body::from))
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
