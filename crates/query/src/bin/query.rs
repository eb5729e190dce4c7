//! The query Lambda: builds configuration, tracing and clients, then serves.

use lambda_http::{Error, run, service_fn};
use query::QueryService;
use query::config::{Config, resolve_cursor_key};
use store::dynamo::DynamoShards;
use store::read::DynamoReadingSource;

#[tokio::main]
async fn main() -> Result<(), Error> {
    lambda_http::tracing::init_default_subscriber();
    let config = Config::from_env()?;
    let aws = store::sdk::lambda_config().await;
    let dynamodb = aws_sdk_dynamodb::Client::new(&aws);
    let secrets = aws_sdk_secretsmanager::Client::new(&aws);
    let key = resolve_cursor_key(&config.cursor_key, &secrets).await?;
    let service = QueryService::new(
        DynamoReadingSource::new(dynamodb.clone(), &config.table_name),
        DynamoShards::new(&dynamodb, &config.shard_table_name),
        config.service.with_key(key),
    );
    let service = &service;
    run(service_fn(move |request| {
        query::lambda::handle_apigw(service, request)
    }))
    .await
}
