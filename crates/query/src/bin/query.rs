//! The query Lambda: builds configuration, tracing and clients, then serves.

use lambda_http::{Error, run, service_fn};
use query::config::{Config, CursorKeySource};
use query::{CursorKey, QueryService};
use store::dynamo::DynamoShards;
use store::read::DynamoReadingSource;

#[tokio::main]
async fn main() -> Result<(), Error> {
    lambda_http::tracing::init_default_subscriber();
    let config = Config::from_env()?;
    let aws = aws_config::load_from_env().await;
    let dynamodb = aws_sdk_dynamodb::Client::new(&aws);
    let key = match &config.cursor_key {
        CursorKeySource::Inline(bytes) => CursorKey::new(bytes.clone())?,
        CursorKeySource::SecretArn(arn) => {
            return Err(format!(
                "CURSOR_SECRET_ARN ({arn}) is not supported by this build; set CURSOR_KEY"
            )
            .into());
        }
    };
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
