//! End to end against moto on loopback: the handler over the real adapters writes the
//! readings table and sends refused messages to the DLQ with their reason.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::Result;
use aws_sdk_dynamodb::types::AttributeValue;
use ingest::Ingest;
use rand::SeedableRng;
use rand::rngs::StdRng;
use stand_in::TestStack;
use tokio::time::Instant;

use crate::support::{config, event, ids, now};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn end_to_end_events_land_in_the_table_and_the_dlq() -> Result<()> {
    let stack = TestStack::start().await?;
    let sdk = stack.sdk_config().await;
    let dynamo = aws_sdk_dynamodb::Client::new(&sdk);
    let sqs = aws_sdk_sqs::Client::new(&sdk);
    let s = &stack.stack;
    let config = config(&[
        ("TABLE_NAME", &s.table_name),
        ("SHARD_TABLE_NAME", &s.shard_table_name),
        ("DLQ_URL", &s.dlq_url),
    ]);
    let service = Ingest::from_clients(config, &dynamo, &sqs);
    let mut rng = StdRng::seed_from_u64(7);
    for name in ["sqs-single.json", "sqs-batch.json", "sqs-hot-burst.json"] {
        let response = service
            .handle(
                &event(name),
                now(),
                Instant::now() + Duration::from_secs(30),
                &mut rng,
            )
            .await?;
        assert!(
            response.batch_item_failures.is_empty(),
            "{name}: {response:?}"
        );
    }
    let mixed = event("sqs-mixed-bad.json");
    let response = service
        .handle(
            &mixed,
            now(),
            Instant::now() + Duration::from_secs(30),
            &mut rng,
        )
        .await?;
    assert!(response.batch_item_failures.is_empty());

    // Redelivery of everything changes nothing (scenario 10, on the real adapter).
    let count = |dynamo: aws_sdk_dynamodb::Client, table: String| async move {
        anyhow::Ok(
            store::scan::scan_items(dynamo.scan().table_name(&table))
                .await?
                .len(),
        )
    };
    assert_eq!(
        count(dynamo.clone(), s.table_name.clone()).await?,
        1 + 11 + 100 + 9
    );
    service
        .handle(
            &event("sqs-batch.json"),
            now(),
            Instant::now() + Duration::from_secs(30),
            &mut rng,
        )
        .await?;
    assert_eq!(count(dynamo.clone(), s.table_name.clone()).await?, 121);

    // A stored item has the documented shape.
    let scanned = dynamo
        .scan()
        .table_name(&s.table_name)
        .filter_expression("event_id = :e")
        .expression_attribute_values(":e", AttributeValue::S("evt-0001".into()))
        .send()
        .await?;
    let item = scanned.items().first().expect("evt-0001 stored");
    let reading = store::ReadingItem::from_item(item.clone())?.into_reading()?;
    assert_eq!(reading.device_id, "dev-001");
    assert_eq!(reading.tags.get("site").map(String::as_str), Some("north"));

    // The layout item was seeded from the configuration.
    let shards = store::dynamo::DynamoShards::new(&dynamo, &s.shard_table_name);
    assert!(store::ShardReader::get_layout(&shards).await?.is_some());

    // Exactly one DLQ message: the malformed body, with its reason as attributes.
    let received = sqs
        .receive_message()
        .queue_url(&s.dlq_url)
        .max_number_of_messages(10)
        .message_attribute_names("All")
        .send()
        .await?;
    let messages = received.messages();
    assert_eq!(messages.len(), 1);
    let attributes: BTreeMap<&str, &str> = messages[0]
        .message_attributes()
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| Some((k.as_str(), v.string_value()?)))
                .collect()
        })
        .unwrap_or_default();
    assert_eq!(attributes.get("field"), Some(&"body"));
    assert_eq!(
        attributes.get("source_message_id"),
        Some(&ids(&mixed)[4].as_str())
    );
    assert!(
        attributes
            .get("reason")
            .is_some_and(|r| r.contains("valid JSON"))
    );
    assert_eq!(messages[0].body(), mixed.records[4].body.as_deref());
    Ok(())
}

/// The SQS adapter's visibility change, on moto: a delayed message stays invisible, one
/// delayed by 0 s comes back at once, and a stale receipt handle fails only its entry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delays_change_the_visibility_of_received_messages() -> Result<()> {
    use ingest::{Delay, Queue, SqsQueue};

    let stack = TestStack::start().await?;
    let sdk = stack.sdk_config().await;
    let sqs = aws_sdk_sqs::Client::new(&sdk);
    let s = &stack.stack;
    for body in ["later", "now"] {
        sqs.send_message()
            .queue_url(&s.queue_url)
            .message_body(body)
            .send()
            .await?;
    }
    let received = sqs
        .receive_message()
        .queue_url(&s.queue_url)
        .max_number_of_messages(10)
        .visibility_timeout(600)
        .send()
        .await?;
    let handle = |body: &str| {
        received
            .messages()
            .iter()
            .find(|m| m.body() == Some(body))
            .and_then(|m| m.receipt_handle())
            .map(str::to_owned)
            .expect("both messages received")
    };
    let queue = SqsQueue::new(&sqs, &s.dlq_url, Some(s.queue_url.clone()));
    let results = queue
        .delay(&[
            Delay {
                receipt_handle: handle("later"),
                visibility_secs: 300,
            },
            Delay {
                receipt_handle: handle("now"),
                visibility_secs: 0,
            },
            Delay {
                receipt_handle: "not-a-receipt-handle".to_owned(),
                visibility_secs: 30,
            },
        ])
        .await;
    assert!(results[0].is_ok() && results[1].is_ok(), "{results:?}");
    assert!(results[2].is_err(), "{results:?}");

    let again = sqs
        .receive_message()
        .queue_url(&s.queue_url)
        .max_number_of_messages(10)
        .send()
        .await?;
    let bodies: Vec<&str> = again.messages().iter().filter_map(|m| m.body()).collect();
    assert_eq!(bodies, ["now"]);

    let without_source = SqsQueue::new(&sqs, &s.dlq_url, None);
    let results = without_source
        .delay(&[Delay {
            receipt_handle: handle("later"),
            visibility_secs: 0,
        }])
        .await;
    assert!(results[0].is_err());
    Ok(())
}

/// The SQS adapter's requeue, on moto: the copy arrives with its body, the device's
/// attributes and Shardline's requeue count.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_requeued_copy_arrives_with_its_body_and_attributes() -> Result<()> {
    use ingest::{Queue, Requeue, SqsQueue};

    let stack = TestStack::start().await?;
    let sdk = stack.sdk_config().await;
    let sqs = aws_sdk_sqs::Client::new(&sdk);
    let s = &stack.stack;
    let queue = SqsQueue::new(&sqs, &s.dlq_url, Some(s.queue_url.clone()));
    let attributes = [
        ("gateway", ("String", "gw-7")),
        (ingest::handler::REQUEUES_ATTRIBUTE, ("Number", "2")),
    ]
    .into_iter()
    .map(|(k, (t, v))| (k.to_owned(), (t.to_owned(), v.to_owned())))
    .collect();
    let results = queue
        .requeue(&[Requeue {
            body: r#"{"device_id":"d"}"#.to_owned(),
            attributes,
            delay_secs: 0,
        }])
        .await;
    assert!(results[0].is_ok(), "{results:?}");
    let received = sqs
        .receive_message()
        .queue_url(&s.queue_url)
        .message_attribute_names("All")
        .send()
        .await?;
    let message = received.messages().first().expect("the copy");
    assert_eq!(message.body(), Some(r#"{"device_id":"d"}"#));
    let attribute = |name: &str| {
        message
            .message_attributes()
            .and_then(|a| a.get(name))
            .and_then(|v| v.string_value())
            .map(str::to_owned)
    };
    assert_eq!(attribute("gateway").as_deref(), Some("gw-7"));
    assert_eq!(
        attribute(ingest::handler::REQUEUES_ATTRIBUTE).as_deref(),
        Some("2")
    );
    Ok(())
}
