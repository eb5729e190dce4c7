//! The query Lambda: builds configuration, tracing and clients, then serves.

use lambda_http::{Error, run, service_fn};
use parking_lot::Mutex;
use query::QueryService;

use query::config::{Config, resolve_cursor_keys};
use store::dynamo::DynamoShards;
use store::read::DynamoReadingSource;
use store::rollup::dynamo::DynamoRollups;

#[tokio::main]
async fn main() -> Result<(), Error> {
    store::sdk::init_logs();
    let config = Config::from_env()?;
    let aws = store::sdk::lambda_config().await;
    let dynamodb = aws_sdk_dynamodb::Client::new(&aws);
    let secrets = aws_sdk_secretsmanager::Client::new(&aws);
    let (current, previous) = resolve_cursor_keys(&config.cursor_key, &secrets).await?;
    let service = QueryService::new(
        DynamoReadingSource::new(dynamodb.clone(), &config.table_name),
        DynamoShards::new(&dynamodb, &config.shard_table_name),
        config.service.with_keys(current, previous),
    );
    let service = match &config.rollup_table {
        Some(table) => service.with_rollups(DynamoRollups::new(dynamodb.clone(), table)),
        None => service,
    };
    let service = &service;
    let (config, secrets) = (&config, &secrets);
    let last_refresh = &Mutex::new(None);
    run(service_fn(move |request| async move {
        let read = || async move {
            let (current, previous) = resolve_cursor_keys(&config.cursor_key, secrets).await?;
            Ok::<_, query::config::ConfigError>(config.service.cursor_keys(current, previous))
        };
        query::lambda::refresh_cursor_keys(service, &request, last_refresh, read).await;
        query::lambda::handle_apigw(service, request).await
    }))
    .await
}
