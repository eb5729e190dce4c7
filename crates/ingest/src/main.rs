//! The ingest Lambda binary: builds configuration, tracing and clients, then runs.

use aws_lambda_events::event::sqs::{SqsBatchResponse, SqsEvent};
use ingest::{Config, Ingest, Invocation};
use lambda_runtime::{Error, LambdaEvent, run, service_fn};
use store::dynamo::{DynamoShards, DynamoTable};
use store::rollup::dynamo::DynamoRollups;

type Service = Ingest<DynamoTable, DynamoShards, ingest::SqsQueue, DynamoRollups>;

#[global_allocator]
static GLOBAL: ingest::Allocator = ingest::Allocator;

#[tokio::main]
async fn main() -> Result<(), Error> {
    store::sdk::init_logs();
    let mut config = Config::from_env()?;
    let sdk = store::sdk::lambda_config().await;
    // The front door's sealing keys, when they are a secret's: read once, at init.
    config
        .resolve_key(&aws_sdk_secretsmanager::Client::new(&sdk))
        .await?;
    let dynamo = aws_sdk_dynamodb::Client::new(&sdk);
    let sqs = aws_sdk_sqs::Client::new(&sdk);
    let service = Ingest::from_clients(config, &dynamo, &sqs);
    let service = &service;
    run(service_fn(move |event: LambdaEvent<SqsEvent>| {
        handle(service, event)
    }))
    .await
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
