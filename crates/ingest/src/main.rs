//! The ingest Lambda binary: builds configuration, tracing and clients, then runs.

use aws_lambda_events::event::sqs::{SqsBatchResponse, SqsEvent};
use ingest::{Config, Ingest, Invocation};
use lambda_runtime::{Error, LambdaEvent, run, service_fn};
use store::dynamo::{DynamoShards, DynamoTable};

type Service = Ingest<DynamoTable, DynamoShards, ingest::SqsQueue>;

#[global_allocator]
static GLOBAL: ingest::Allocator = ingest::Allocator;

#[tokio::main]
async fn main() -> Result<(), Error> {
    init_tracing();
    let config = Config::from_env()?;
    let sdk = store::sdk::lambda_config().await;
    let dynamo = aws_sdk_dynamodb::Client::new(&sdk);
    let sqs = aws_sdk_sqs::Client::new(&sdk);
    let service = Ingest::from_clients(config, &dynamo, &sqs);
    let service = &service;
    run(service_fn(move |event: LambdaEvent<SqsEvent>| {
        handle(service, event)
    }))
    .await
}

/// Logs as the runtime's default subscriber does, by a level alone: the level from
/// `AWS_LAMBDA_LOG_LEVEL` (the template's `LogLevel`), else `RUST_LOG`, else INFO; JSON
/// lines when `AWS_LAMBDA_LOG_FORMAT` is JSON (the template's `LogFormat`). No
/// per-target directives, so no EnvFilter and its regex engine in the binary.
fn init_tracing() {
    use tracing_subscriber::filter::LevelFilter;
    let level = std::env::var("AWS_LAMBDA_LOG_LEVEL")
        .or_else(|_| std::env::var("RUST_LOG"))
        .ok()
        .and_then(|text| text.trim().parse::<LevelFilter>().ok())
        .unwrap_or(LevelFilter::INFO);
    let json = std::env::var("AWS_LAMBDA_LOG_FORMAT").is_ok_and(|f| f.eq_ignore_ascii_case("json"));
    let logs = tracing_subscriber::fmt()
        .with_target(false)
        .without_time()
        .with_max_level(level);
    if json {
        logs.json().init();
    } else {
        logs.init();
    }
}

async fn handle(
    service: &Service,
    event: LambdaEvent<SqsEvent>,
) -> Result<SqsBatchResponse, Error> {
    // The clock is read once per invocation and passed down.
    let mut invocation = Invocation::under_deadline(event.context.deadline)?;
    // Boxed: the handler's future is deep, and the runtime's own nesting on top of it
    // would exceed the compiler's layout depth limit.
    let handled = Box::pin(service.handle(
        &event.payload,
        invocation.now,
        invocation.deadline,
        &mut invocation.rng,
    ));
    Ok(handled.await?)
}
