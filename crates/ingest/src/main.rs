//! The ingest Lambda binary: builds configuration, tracing and clients, then runs.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use aws_lambda_events::event::sqs::{SqsBatchResponse, SqsEvent};
use ingest::{Config, Ingest};
use lambda_runtime::{Error, LambdaEvent, run, service_fn};
use rand::SeedableRng;
use rand::rngs::StdRng;
use sharding::time::Timestamp;
use store::dynamo::{DynamoShards, DynamoTable};

type Service = Ingest<DynamoTable, DynamoShards, ingest::SqsQueue>;

#[tokio::main]
async fn main() -> Result<(), Error> {
    lambda_runtime::tracing::init_default_subscriber();
    let config = Config::from_env()?;
    let sdk = aws_config::load_defaults(aws_config::BehaviorVersion::latest()).await;
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
    let wall = SystemTime::now().duration_since(UNIX_EPOCH)?;
    let now_ms = i64::try_from(wall.as_millis())?;
    let now = Timestamp::from_millis(now_ms)?;
    let remaining = remaining(event.context.deadline, u64::try_from(now_ms)?);
    let deadline = tokio::time::Instant::now() + remaining;
    let mut rng = StdRng::from_os_rng();
    // Boxed: the handler's future is deep, and the runtime's own nesting on top of it
    // would exceed the compiler's layout depth limit.
    let handled = Box::pin(service.handle(&event.payload, now, deadline, &mut rng));
    Ok(handled.await?)
}

/// The longest Lambda timeout; no deadline of a real invocation is this close to the epoch.
const MAX_TIMEOUT_MS: u64 = 15 * 60 * 1000;

/// Time left in this invocation. Lambda sends the deadline as epoch milliseconds;
/// `cargo lambda watch` sends its timeout (600000) instead, which read as an instant
/// lies in 1970 and would leave no time at all, so a value that small is a duration.
fn remaining(deadline_ms: u64, now_ms: u64) -> Duration {
    if deadline_ms <= MAX_TIMEOUT_MS {
        Duration::from_millis(deadline_ms)
    } else {
        Duration::from_millis(deadline_ms.saturating_sub(now_ms))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deadlines_are_instants_unless_they_can_only_be_durations() {
        let now = 1_795_336_302_524;
        assert_eq!(remaining(now + 30_000, now), Duration::from_secs(30));
        assert_eq!(remaining(now - 5, now), Duration::ZERO);
        assert_eq!(remaining(600_000, now), Duration::from_secs(600));
    }
}
