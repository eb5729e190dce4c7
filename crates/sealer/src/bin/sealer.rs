//! The sealer Lambda: builds configuration, logs and clients, then runs on each
//! scheduled event.

#![recursion_limit = "256"]

use lambda_runtime::{Error, LambdaEvent, run, service_fn};
use sealer::{Config, Invocation, Sealer};
use store::dynamo::DynamoShards;
use store::read::DynamoReadingSource;
use store::rollup::dynamo::DynamoRollups;

/// Taken off the invocation's deadline: no hour is started after it.
const DEADLINE_MARGIN_SECS: u64 = 20;

#[tokio::main]
async fn main() -> Result<(), Error> {
    store::sdk::init_logs();
    let config = Config::from_env()?;
    let aws = store::sdk::lambda_config().await;
    let dynamodb = aws_sdk_dynamodb::Client::new(&aws);
    let sealer = Sealer::new(
        DynamoReadingSource::new(dynamodb.clone(), &config.table_name),
        DynamoShards::new(&dynamodb, &config.shard_table_name),
        DynamoRollups::new(dynamodb.clone(), &config.rollup_table),
        config.settings,
    );
    let sealer = &sealer;
    run(service_fn(
        move |event: LambdaEvent<serde_json::Value>| async move {
            let deadline_ms = event.context.deadline;
            let left = store::clock::time_left_now(deadline_ms)?
                .saturating_sub(std::time::Duration::from_secs(DEADLINE_MARGIN_SECS));
            let now = store::clock::wall_clock()?;
            let deadline = Some(std::time::Instant::now() + left);
            // A scheduled event is a run; `{"reseal": ..}` a rebuild, or refused.
            let asked = Invocation::of(event.payload)?;
            let report = match asked.reseal {
                Some(reseal) => {
                    let (from, to) = reseal.range()?;
                    let mut report = sealer.reseal(from, to, now, deadline).await?;
                    // The hours rebuilt, as `shardline seal` leaves them: a lost table
                    // gets its watermark, an existing one's first hour moves back.
                    let rebuilt_to = report.resume_ms.unwrap_or(to);
                    if rebuilt_to > from {
                        let mark = sealer.extend_watermark(from, rebuilt_to, now).await?;
                        report.watermark_ms = mark.map(|m| m.end_ms);
                    }
                    report
                }
                None => sealer.run(now, deadline).await.inspect_err(|e| {
                    if let sealer::SealError::Layout(_) = e {
                        println!("{}", sealer::layout::metrics_line(now));
                    }
                })?,
            };
            println!("{}", sealer::metrics_line(&report, now));
            Ok::<_, Error>(serde_json::to_value(&report)?)
        },
    ))
    .await
}
