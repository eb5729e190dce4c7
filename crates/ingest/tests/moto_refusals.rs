//! Scenario 27 end to end on moto: messages sent to the source queue as a device sends
//! them, received with their system attributes, handled over the real SQS adapter.
//! moto enforces none of SQS's rules on attributes (character set, 10 per message,
//! 256 KiB with the body), so these show the path works on the wire; the in-memory
//! queue (`refusals.rs`) is what refuses what SQS refuses.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{Context as _, Result, ensure};
use aws_lambda_events::event::sqs::{SqsEvent, SqsMessage, SqsMessageAttribute};
use aws_sdk_sqs::types::{MessageAttributeValue, MessageSystemAttributeName};
use ingest::handler::REQUEUES_ATTRIBUTE;
use ingest::{Ingest, SqsQueue};
use rand::SeedableRng;
use rand::rngs::StdRng;
use stand_in::TestStack;
use store::memory::{MemoryRollups, MemoryShards, MemoryTable};
use tokio::time::Instant;

use crate::support::{config, event, now};

/// Every message of `queue_url` (up to `n`), with all their attributes.
async fn receive(
    sqs: &aws_sdk_sqs::Client,
    queue_url: &str,
    n: usize,
) -> Result<Vec<aws_sdk_sqs::types::Message>> {
    let mut out = Vec::new();
    for _ in 0..20 {
        if out.len() >= n {
            break;
        }
        let got = sqs
            .receive_message()
            .queue_url(queue_url)
            .max_number_of_messages(10)
            .message_attribute_names("All")
            .message_system_attribute_names(MessageSystemAttributeName::All)
            .send()
            .await?;
        out.extend(got.messages.unwrap_or_default());
    }
    Ok(out)
}

/// The Lambda record of a received message, at receive `receives`.
fn record(m: &aws_sdk_sqs::types::Message, receives: u32) -> SqsMessage {
    let mut record = SqsMessage::default();
    record.message_id = m.message_id.clone();
    record.receipt_handle = m.receipt_handle.clone();
    record.body = m.body.clone();
    record.attributes = m
        .attributes()
        .map(|a| {
            a.iter()
                .map(|(k, v)| (k.as_str().to_owned(), v.clone()))
                .collect()
        })
        .unwrap_or_default();
    record
        .attributes
        .insert("ApproximateReceiveCount".to_owned(), receives.to_string());
    record.message_attributes = m
        .message_attributes()
        .map(|a| {
            a.iter()
                .map(|(k, v)| {
                    let mut attr = SqsMessageAttribute::default();
                    attr.string_value = v.string_value.clone();
                    attr.data_type = Some(v.data_type().to_owned());
                    (k.clone(), attr)
                })
                .collect()
        })
        .unwrap_or_default();
    record
}

fn attributes(m: &aws_sdk_sqs::types::Message) -> BTreeMap<String, String> {
    m.message_attributes()
        .map(|a| {
            a.iter()
                .filter_map(|(k, v)| Some((k.clone(), v.string_value()?.to_owned())))
                .collect()
        })
        .unwrap_or_default()
}

fn valid_body() -> String {
    event("sqs-single.json").records[0]
        .body
        .clone()
        .expect("a body")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s27_bad_field_names_reach_the_moto_dlq_with_their_reason_on_the_first_receive()
-> Result<()> {
    let stack = TestStack::start().await?;
    let sdk = stack.sdk_config().await;
    let sqs = aws_sdk_sqs::Client::new(&sdk);
    let dynamo = aws_sdk_dynamodb::Client::new(&sdk);
    let s = &stack.stack;
    let body = valid_body();
    let unknown = |name: &str| format!("{{\"{name}\":1,{}", &body[1..]);
    let long_metric = body.replace("\"humidity\"", &format!("\"{}\"", "m".repeat(120_000)));
    let bodies = [
        (unknown("a\\u0000b"), "a\\u0000b: unknown field"),
        (unknown("x\\uffffy"), "x\\uFFFFy: unknown field"),
        (long_metric, "metric names must be"),
        (unknown(&"u".repeat(200_000)), "...: unknown field"),
    ];
    for (body, _) in &bodies {
        sqs.send_message()
            .queue_url(&s.queue_url)
            .message_body(body)
            .send()
            .await?;
    }
    let received = receive(&sqs, &s.queue_url, bodies.len()).await?;
    ensure!(
        received.len() == bodies.len(),
        "{} received",
        received.len()
    );
    let mut ev = SqsEvent::default();
    ev.records = received.iter().map(|m| record(m, 1)).collect();
    let config = config(&[
        ("TABLE_NAME", &s.table_name),
        ("SHARD_TABLE_NAME", &s.shard_table_name),
        ("DLQ_URL", &s.dlq_url),
        ("SOURCE_QUEUE_URL", &s.queue_url),
    ]);
    let service = Ingest::from_clients(config, &dynamo, &sqs);
    let report = service
        .process(
            &ev,
            now(),
            Instant::now() + Duration::from_secs(30),
            &mut StdRng::seed_from_u64(27),
        )
        .await;
    ensure!(
        (report.dead_lettered, report.dlq_failures) == (4, 0),
        "{report:?}"
    );
    let letters = receive(&sqs, &s.dlq_url, bodies.len()).await?;
    ensure!(letters.len() == bodies.len(), "{} letters", letters.len());
    for (body, shows) in &bodies {
        let letter = letters
            .iter()
            .find(|l| l.body() == Some(body.as_str()))
            .context("a letter with the body as sent")?;
        let reason = attributes(letter).remove("reason").context("a reason")?;
        ensure!(reason.contains(shows), "{reason}");
        ensure!(reason.chars().count() <= store::queue::MAX_TEXT_CHARS);
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s27_a_message_with_ten_attributes_is_requeued_through_moto() -> Result<()> {
    let stack = TestStack::start().await?;
    let sdk = stack.sdk_config().await;
    let sqs = aws_sdk_sqs::Client::new(&sdk);
    let s = &stack.stack;
    let mut send = sqs
        .send_message()
        .queue_url(&s.queue_url)
        .message_body(valid_body());
    for i in 0..10 {
        send = send.message_attributes(
            format!("gw.{i}"),
            MessageAttributeValue::builder()
                .data_type("String")
                .string_value(format!("v{i}"))
                .build()?,
        );
    }
    send.send().await?;
    let received = receive(&sqs, &s.queue_url, 1).await?;
    let sender = received[0]
        .attributes()
        .and_then(|a| a.get(&MessageSystemAttributeName::SenderId))
        .context("moto reports a SenderId")?
        .clone();
    let mut ev = SqsEvent::default();
    ev.records = vec![record(&received[0], 5)];
    let config = config(&[
        ("DLQ_URL", &s.dlq_url),
        ("SOURCE_QUEUE_URL", &s.queue_url),
        ("INGEST_SENDER_ID", &sender),
        // The copy comes back at once, so the test can read it.
        ("REDELIVERY_BASE_SECS", "0"),
        ("REDELIVERY_CAP_SECS", "0"),
    ]);
    let table = MemoryTable::new();
    table.set_unprocessed_fraction(1.0);
    let queue = SqsQueue::new(&sqs, &s.dlq_url, Some(s.queue_url.clone()));
    let service: Ingest<_, _, _, MemoryRollups> =
        Ingest::new(config, table, MemoryShards::new(), queue);
    let report = service
        .process(
            &ev,
            now(),
            Instant::now() + Duration::from_secs(30),
            &mut StdRng::seed_from_u64(27),
        )
        .await;
    ensure!(report.requeued == 1, "{:?}", report.messages);
    let copy = receive(&sqs, &s.queue_url, 1)
        .await?
        .into_iter()
        .next()
        .context("the copy")?;
    let attributes = attributes(&copy);
    ensure!(attributes.len() == 10, "{attributes:?}");
    ensure!(attributes.get(REQUEUES_ATTRIBUTE).map(String::as_str) == Some("1"));
    ensure!(!attributes.contains_key("gw.8") && !attributes.contains_key("gw.9"));
    Ok(())
}
