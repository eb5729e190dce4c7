//! The sealer Lambda: builds configuration, logs and clients, then runs on each
//! scheduled event.

#![recursion_limit = "256"]

use lambda_runtime::{Error, LambdaEvent, run, service_fn};
use sealer::{Config, DynamoSealer};

#[tokio::main]
async fn main() -> Result<(), Error> {
    store::sdk::init_logs();
    let config = Config::from_env()?;
    let aws = store::sdk::lambda_config().await;
    let sealer = DynamoSealer::on_dynamo(&aws_sdk_dynamodb::Client::new(&aws), &config);
    let sealer = &sealer;
    run(service_fn(
        move |event: LambdaEvent<serde_json::Value>| async move {
            let report = sealer::invoke(sealer, event.payload, event.context.deadline).await?;
            Ok::<_, Error>(serde_json::to_value(&report)?)
        },
    ))
    .await
}
