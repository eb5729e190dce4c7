//! The API Gateway (HTTP API, payload 2.0) edge of the service.

use std::convert::Infallible;

use lambda_http::request::RequestContext;
use lambda_http::{Body, Request, RequestExt, Response};
use store::directory::ShardReader;
use store::read::ReadingSource;

use crate::service::QueryService;

/// Answers one API Gateway request. A named stage's prefix (`/prod/...`) is removed
/// before routing, so routes match under any stage.
pub async fn handle_apigw<S: ReadingSource, D: ShardReader>(
    service: &QueryService<S, D>,
    request: Request,
) -> Result<Response<Body>, Infallible> {
    let stage = match request.request_context_ref() {
        Some(RequestContext::ApiGatewayV2(ctx)) => ctx.stage.clone(),
        _ => None,
    };
    let path = strip_stage(request.uri().path(), stage.as_deref());
    let response = service
        .handle_parts(request.method().as_str(), path, request.uri().query())
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
