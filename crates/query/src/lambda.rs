//! The API Gateway (HTTP API, payload 2.0) edge of the service.

use std::convert::Infallible;
use std::time::Instant;

use lambda_http::request::RequestContext;
use lambda_http::{Body, Request, RequestExt, Response};
use store::directory::ShardReader;
use store::read::ReadingSource;

use crate::service::QueryService;

/// Answers one API Gateway request. A named stage's prefix (`/prod/...`) is removed
/// before routing, so routes match under any stage. The reads stop by the invocation's
/// deadline less the configured margin, so the function answers before its timeout.
pub async fn handle_apigw<S: ReadingSource, D: ShardReader>(
    service: &QueryService<S, D>,
    request: Request,
) -> Result<Response<Body>, Infallible> {
    let stage = match request.request_context_ref() {
        Some(RequestContext::ApiGatewayV2(ctx)) => ctx.stage.clone(),
        _ => None,
    };
    let path = strip_stage(request.uri().path(), stage.as_deref());
    // A context without a deadline (an event replayed outside the runtime) sets none.
    let deadline = request
        .lambda_context_ref()
        .filter(|ctx| ctx.deadline > 0)
        .map(|ctx| {
            // The time left, read once against the wall clock the deadline is given in
            // (`cargo lambda watch` gives its timeout instead: `store::clock::time_left`).
            // An unreadable wall clock leaves no time: the read stops at once.
            let left = store::clock::time_left_now(ctx.deadline).unwrap_or_default();
            service.config().budget.deadline_from(left, Instant::now())
        });
    let response = service
        .handle_parts_by(
            request.method().as_str(),
            path,
            request.uri().query(),
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
