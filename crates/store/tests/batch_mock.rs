//! The DynamoDB adapter of the batch writer against `aws-smithy-mocks` sequences:
//! the SDK's own deserialization of UnprocessedItems and of error bodies.

use std::time::Duration;

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::operation::batch_write_item::BatchWriteItemOutput;
use aws_sdk_dynamodb::types::{PutRequest, WriteRequest};
use aws_smithy_mocks::{RuleMode, mock, mock_client};
use rand::SeedableRng;
use rand::rngs::StdRng;
use store::ThrottleKind;
use store::batch::{BatchWriter, Item, Outcome};
use store::dynamo::DynamoTable;
use tokio::time::Instant;

use crate::support::{BACKOFF, Batch, config};

const TABLE: &str = "readings";

fn unprocessed(items: &[Item]) -> BatchWriteItemOutput {
    let requests = items
        .iter()
        .map(|i| {
            WriteRequest::builder()
                .put_request(
                    PutRequest::builder()
                        .set_item(Some(i.clone()))
                        .build()
                        .expect("item set"),
                )
                .build()
        })
        .collect();
    BatchWriteItemOutput::builder()
        .unprocessed_items(TABLE, requests)
        .build()
}

fn error_body(kind: &str, reason: Option<&str>) -> String {
    // The model spells the member `throttlingReasons` on ThrottlingException and
    // `ThrottlingReasons` on the other two throttling errors.
    let member = if kind == "ThrottlingException" {
        "throttlingReasons"
    } else {
        "ThrottlingReasons"
    };
    let reasons = reason
        .map(|r| format!(r#","{member}":[{{"reason":"{r}","resource":"arn:aws:dynamodb:us-east-1:000000000000:table/readings"}}]"#))
        .unwrap_or_default();
    format!(
        r#"{{"__type":"com.amazonaws.dynamodb.v20120810#{kind}","message":"injected"{reasons}}}"#
    )
}

async fn write(client: &Client, input: &Batch) -> store::BatchReport {
    let writer = BatchWriter::new(DynamoTable::new(client, TABLE), config());
    writer
        .write(
            input.puts(),
            Instant::now() + Duration::from_secs(30),
            &mut StdRng::seed_from_u64(42),
            &input.items,
        )
        .await
}

#[tokio::test(start_paused = true)]
async fn s03_unprocessed_items_twice_then_success() {
    let input = Batch::of(&[("p", "a"), ("p", "b"), ("p", "c")]);
    let (first, second) = (input.items[1..].to_vec(), input.items[2..].to_vec());
    let rule = mock!(Client::batch_write_item)
        .sequence()
        .output(move || unprocessed(&first))
        .output(move || unprocessed(&second))
        .output(|| BatchWriteItemOutput::builder().build())
        .build();
    let client = mock_client!(aws_sdk_dynamodb, RuleMode::Sequential, [&rule]);
    let report = write(&client, &input).await;
    assert!(
        report.outcomes.iter().all(Outcome::is_written),
        "{:?}",
        report.outcomes
    );
    assert_eq!(rule.num_calls(), 3);
    assert_eq!(report.stats.calls, 3);
    assert_eq!(report.stats.retries, 2);
    assert_eq!(report.stats.unprocessed, 3);
}

async fn all_throttled(kind: &str, reason: Option<&str>) -> (store::BatchReport, usize) {
    let body = error_body(kind, reason);
    let rule = mock!(Client::batch_write_item)
        .sequence()
        .http_status(400, Some(body))
        .repeatedly()
        .build();
    let client = mock_client!(aws_sdk_dynamodb, RuleMode::Sequential, [&rule]);
    let report = write(&client, &Batch::of(&[("p", "a"), ("p", "b")])).await;
    (report, rule.num_calls())
}

#[tokio::test(start_paused = true)]
async fn s05_all_throttled_with_each_reason_is_classified() {
    let cases = [
        (
            "ProvisionedThroughputExceededException",
            Some("TableWriteKeyRangeThroughputExceeded"),
            ThrottleKind::KeyRange,
        ),
        (
            "ProvisionedThroughputExceededException",
            Some("IndexWriteKeyRangeThroughputExceeded"),
            ThrottleKind::KeyRange,
        ),
        (
            "ProvisionedThroughputExceededException",
            Some("TableWriteProvisionedThroughputExceeded"),
            ThrottleKind::Table,
        ),
        (
            "ThrottlingException",
            Some("TableWriteAccountLimitExceeded"),
            ThrottleKind::Table,
        ),
        (
            "ThrottlingException",
            Some("TableWriteMaxOnDemandThroughputExceeded"),
            ThrottleKind::Table,
        ),
        ("RequestLimitExceeded", None, ThrottleKind::Table),
        (
            "ProvisionedThroughputExceededException",
            None,
            ThrottleKind::Other,
        ),
    ];
    for (kind, reason, expected) in cases {
        let (report, calls) = all_throttled(kind, reason).await;
        assert_eq!(calls, BACKOFF.max_attempts as usize, "{kind} {reason:?}");
        for outcome in &report.outcomes {
            assert!(
                matches!(outcome, Outcome::FailedRetryable { throttle: Some(k), .. } if *k == expected),
                "{kind} {reason:?}: {outcome:?}"
            );
        }
        let counted = reason.unwrap_or(kind);
        assert_eq!(
            report.stats.throttles.get(counted),
            Some(&u64::from(BACKOFF.max_attempts)),
            "{kind} {reason:?}: {:?}",
            report.stats.throttles
        );
    }
}

#[tokio::test(start_paused = true)]
async fn s07_validation_exception_is_permanent_per_item() {
    let body = r#"{"__type":"com.amazon.coral.validate#ValidationException","message":"Item size has exceeded the maximum allowed size"}"#;
    let rule = mock!(Client::batch_write_item)
        .sequence()
        .http_status(400, Some(body.to_owned()))
        .repeatedly()
        .build();
    let client = mock_client!(aws_sdk_dynamodb, RuleMode::Sequential, [&rule]);
    let report = write(&client, &Batch::of(&[("p", "a"), ("p", "b")])).await;
    for outcome in &report.outcomes {
        assert!(
            matches!(outcome, Outcome::FailedPermanent { reason } if reason.contains("ValidationException")),
            "{outcome:?}"
        );
    }
    // The pair, then each half alone; never retried after a delay.
    assert_eq!(rule.num_calls(), 3);
    assert_eq!(report.stats.retries, 0);
}

/// A full item collection is a sign to spread, never a permanent refusal: the items are
/// retried as after a key-range throttle (which raises the entity's fan-out), and
/// written once the key takes them again.
#[tokio::test(start_paused = true)]
async fn a_full_item_collection_is_a_key_range_signal_not_a_permanent_refusal() {
    let body = r#"{"__type":"com.amazonaws.dynamodb.v20120810#ItemCollectionSizeLimitExceededException","message":"Collection size exceeded."}"#;
    let rule = mock!(Client::batch_write_item)
        .sequence()
        .http_status(400, Some(body.to_owned()))
        .times(2)
        .output(|| BatchWriteItemOutput::builder().build())
        .build();
    let client = mock_client!(aws_sdk_dynamodb, RuleMode::Sequential, [&rule]);
    let report = write(&client, &Batch::of(&[("p", "a"), ("p", "b")])).await;
    assert_eq!(report.outcomes, vec![Outcome::Written, Outcome::Written]);
    assert_eq!(
        report
            .stats
            .throttles
            .get("ItemCollectionSizeLimitExceeded"),
        Some(&2)
    );

    // Never taken: each item fails retryably as a key-range throttle, the signal that
    // raises its entity's fan-out.
    let rule = mock!(Client::batch_write_item)
        .sequence()
        .http_status(400, Some(body.to_owned()))
        .repeatedly()
        .build();
    let client = mock_client!(aws_sdk_dynamodb, RuleMode::Sequential, [&rule]);
    let report = write(&client, &Batch::of(&[("p", "a")])).await;
    assert!(
        matches!(
            report.outcomes[..],
            [Outcome::FailedRetryable {
                throttle: Some(ThrottleKind::KeyRange),
                ..
            }]
        ),
        "{:?}",
        report.outcomes
    );
}

#[tokio::test(start_paused = true)]
async fn transient_500s_are_retried_then_written() {
    let rule = mock!(Client::batch_write_item)
        .sequence()
        .http_status(500, Some(r#"{"__type":"com.amazonaws.dynamodb.v20120810#InternalServerError","message":"boom"}"#.to_owned()))
        .http_status(503, None)
        .output(|| BatchWriteItemOutput::builder().build())
        .build();
    let client = mock_client!(aws_sdk_dynamodb, RuleMode::Sequential, [&rule]);
    let report = write(&client, &Batch::of(&[("p", "a")])).await;
    assert_eq!(report.outcomes, vec![Outcome::Written]);
    assert_eq!(rule.num_calls(), 3);
    assert_eq!(report.stats.transient_errors, 2);
}

#[tokio::test(start_paused = true)]
async fn configuration_errors_are_not_retried_nor_permanent() {
    let body = r#"{"__type":"com.amazonaws.dynamodb.v20120810#ResourceNotFoundException","message":"Requested resource not found"}"#;
    let rule = mock!(Client::batch_write_item)
        .sequence()
        .http_status(400, Some(body.to_owned()))
        .repeatedly()
        .build();
    let client = mock_client!(aws_sdk_dynamodb, RuleMode::Sequential, [&rule]);
    let report = write(&client, &Batch::of(&[("p", "a")])).await;
    assert!(
        matches!(&report.outcomes[0], Outcome::FailedRetryable { reason, throttle: None } if reason.contains("ResourceNotFound"))
    );
    assert_eq!(rule.num_calls(), 1);
}
