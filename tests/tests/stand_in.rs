//! The stand-in creates what template.yaml declares, and the resources work.

use std::collections::BTreeMap;

use anyhow::{Context, Result};

use aws_sdk_dynamodb::types::{AttributeValue, KeyType, ScalarAttributeType, TimeToLiveStatus};
use aws_sdk_sqs::types::QueueAttributeName;
use stand_in::{
    Backend, Dynalite, Moto, ensure_dynalite, ensure_venv, provision, provision_tables, repo_root,
};

use crate::harness::{TestStack, dynamodb, sqs, template_path};

/// (attribute name, key type) pairs and attribute types of a table.
async fn key_schema(
    client: &aws_sdk_dynamodb::Client,
    table: &str,
) -> Result<(
    Vec<(String, KeyType)>,
    BTreeMap<String, ScalarAttributeType>,
)> {
    let out = client.describe_table().table_name(table).send().await?;
    let t = out.table().context("DescribeTable without table")?;
    let keys = t
        .key_schema()
        .iter()
        .map(|k| (k.attribute_name().to_owned(), k.key_type().clone()))
        .collect();
    let types = t
        .attribute_definitions()
        .iter()
        .map(|a| (a.attribute_name().to_owned(), a.attribute_type().clone()))
        .collect();
    Ok((keys, types))
}

async fn check_tables(
    client: &aws_sdk_dynamodb::Client,
    readings: &str,
    shards: &str,
) -> Result<()> {
    let (keys, types) = key_schema(client, readings).await?;
    assert_eq!(
        keys,
        [
            ("PK".to_owned(), KeyType::Hash),
            ("SK".to_owned(), KeyType::Range)
        ]
    );
    assert_eq!(types["PK"], ScalarAttributeType::S);
    assert_eq!(types["SK"], ScalarAttributeType::S);
    let (keys, types) = key_schema(client, shards).await?;
    assert_eq!(keys, [("PK".to_owned(), KeyType::Hash)]);
    assert_eq!(types["PK"], ScalarAttributeType::S);

    let item = BTreeMap::from([
        ("PK".to_owned(), AttributeValue::S("sensor-1#0".into())),
        (
            "SK".to_owned(),
            AttributeValue::S("2025-01-01T00:00:00Z#e1".into()),
        ),
        ("value".to_owned(), AttributeValue::N("21.5".into())),
    ]);
    client
        .put_item()
        .table_name(readings)
        .set_item(Some(item.clone().into_iter().collect()))
        .send()
        .await?;
    let got = client
        .get_item()
        .table_name(readings)
        .key("PK", item["PK"].clone())
        .key("SK", item["SK"].clone())
        .consistent_read(true)
        .send()
        .await?;
    let got: BTreeMap<_, _> = got
        .item()
        .context("item not found")?
        .clone()
        .into_iter()
        .collect();
    assert_eq!(got, item);
    Ok(())
}

#[tokio::test]
async fn moto_stack_matches_the_template() {
    let ts = TestStack::start().await.unwrap();
    let s = &ts.stack;
    assert!(
        s.endpoint.starts_with("http://127.0.0.1:"),
        "{}",
        s.endpoint
    );
    assert!(s.table_name.ends_with("-ReadingsTable"), "{}", s.table_name);
    let ddb = dynamodb(&s.endpoint).await;
    check_tables(&ddb, &s.table_name, &s.shard_table_name)
        .await
        .unwrap();

    let ttl = ddb
        .describe_time_to_live()
        .table_name(&s.table_name)
        .send()
        .await
        .unwrap();
    let ttl = ttl.time_to_live_description().unwrap();
    assert_eq!(ttl.attribute_name(), Some("ttl"));
    assert_eq!(ttl.time_to_live_status(), Some(&TimeToLiveStatus::Enabled));

    // The sealer's derived items (ROLLUP_TABLE): PK and SK, both strings, TTL on `ttl`.
    assert!(
        s.rollup_table_name.ends_with("-RollupTable"),
        "{}",
        s.rollup_table_name
    );
    let (keys, types) = key_schema(&ddb, &s.rollup_table_name).await.unwrap();
    assert_eq!(
        keys,
        [
            ("PK".to_owned(), KeyType::Hash),
            ("SK".to_owned(), KeyType::Range)
        ]
    );
    assert_eq!(types["PK"], ScalarAttributeType::S);
    assert_eq!(types["SK"], ScalarAttributeType::S);
    let ttl = ddb
        .describe_time_to_live()
        .table_name(&s.rollup_table_name)
        .send()
        .await
        .unwrap();
    let ttl = ttl.time_to_live_description().unwrap();
    assert_eq!(ttl.attribute_name(), Some("ttl"));
    assert_eq!(
        s.env_pairs()
            .iter()
            .find(|(k, _)| k == "ROLLUP_TABLE")
            .map(|(_, v)| v),
        Some(&s.rollup_table_name)
    );

    let sqs = sqs(&s.endpoint).await;
    let attrs = |url: String| {
        let sqs = sqs.clone();
        async move {
            sqs.get_queue_attributes()
                .queue_url(url)
                .attribute_names(QueueAttributeName::All)
                .send()
                .await
                .unwrap()
                .attributes()
                .unwrap()
                .clone()
        }
    };
    let queue = attrs(s.queue_url.clone()).await;
    let dlq = attrs(s.dlq_url.clone()).await;
    assert_eq!(queue[&QueueAttributeName::VisibilityTimeout], "185");
    assert_eq!(queue[&QueueAttributeName::MessageRetentionPeriod], "345600");
    assert_eq!(dlq[&QueueAttributeName::MessageRetentionPeriod], "1209600");
    let redrive: serde_json::Value =
        serde_json::from_str(&queue[&QueueAttributeName::RedrivePolicy]).unwrap();
    assert_eq!(redrive["maxReceiveCount"], 5);
    assert_eq!(
        redrive["deadLetterTargetArn"].as_str().unwrap(),
        dlq[&QueueAttributeName::QueueArn]
    );

    sqs.send_message()
        .queue_url(&s.queue_url)
        .message_body(r#"{"entity":"sensor-1"}"#)
        .send()
        .await
        .unwrap();
    let received = sqs
        .receive_message()
        .queue_url(&s.queue_url)
        .max_number_of_messages(10)
        .wait_time_seconds(1)
        .send()
        .await
        .unwrap();
    let bodies: Vec<_> = received
        .messages()
        .iter()
        .filter_map(|m| m.body())
        .collect();
    assert_eq!(bodies, [r#"{"entity":"sensor-1"}"#]);
}

#[tokio::test]
async fn provisioning_twice_keeps_the_resources() {
    let ts = TestStack::start().await.unwrap();
    let prefix = ts
        .stack
        .table_name
        .trim_end_matches("-ReadingsTable")
        .to_owned();
    let ddb = dynamodb(&ts.stack.endpoint).await;
    ddb.put_item()
        .table_name(&ts.stack.table_name)
        .item("PK", AttributeValue::S("a".into()))
        .item("SK", AttributeValue::S("b".into()))
        .send()
        .await
        .unwrap();
    let again = provision(&ts.stack.endpoint, &template_path().unwrap(), &prefix)
        .await
        .unwrap();
    assert_eq!(again, ts.stack);
    let count = ddb
        .scan()
        .table_name(&again.table_name)
        .send()
        .await
        .unwrap()
        .count();
    assert_eq!(count, 1, "re-provisioning must not recreate the table");
}

#[tokio::test]
async fn dynalite_tables_match_the_template() {
    let root = repo_root().unwrap();
    let tools = ensure_dynalite(&root).unwrap();
    let dynalite = Dynalite::start(&tools).unwrap();
    let tables = provision_tables(
        &dynalite.endpoint(),
        &template_path().unwrap(),
        "e2e-dynalite",
        Backend::Dynalite,
    )
    .await
    .unwrap();
    let ddb = dynamodb(&dynalite.endpoint()).await;
    check_tables(
        &ddb,
        tables.name("ReadingsTable").unwrap(),
        tables.name("ShardsTable").unwrap(),
    )
    .await
    .unwrap();
}

/// What a race of deletes and sends on one queue left (docs/reliability.md scenario 45).
#[derive(Debug)]
struct Race {
    /// Messages SendMessageBatch accepted while the deletes ran.
    accepted: u64,
    /// Of those, messages the queue no longer holds.
    lost: u64,
    /// Messages deleted (every delete succeeded) that the queue holds again.
    revived: u64,
}

/// Messages in flight when the race starts, deleted by [`DELETERS`] tasks in batches of
/// ten while [`SENDERS`] tasks send as many new ones.
const RACE_MESSAGES: usize = 200;
const DELETERS: usize = 4;
const SENDERS: usize = 4;

/// Sends ten messages of `body` in one batch; the number SQS accepted.
async fn send_ten(sqs: aws_sdk_sqs::Client, url: String, body: &'static str) -> Result<u64> {
    let entries = (0..10)
        .map(|i| {
            aws_sdk_sqs::types::SendMessageBatchRequestEntry::builder()
                .id(i.to_string())
                .message_body(body)
                .build()
        })
        .collect::<Result<Vec<_>, _>>()?;
    let out = sqs
        .send_message_batch()
        .queue_url(url)
        .set_entries(Some(entries))
        .send()
        .await?;
    anyhow::ensure!(out.failed().is_empty(), "{:?}", out.failed());
    Ok(out.successful().len() as u64)
}

/// Deletes the messages of `handles`, ten a batch; sends none (0).
async fn delete_all(sqs: aws_sdk_sqs::Client, url: String, handles: Vec<String>) -> Result<u64> {
    for chunk in handles.chunks(10) {
        let entries = chunk
            .iter()
            .enumerate()
            .map(|(i, h)| {
                aws_sdk_sqs::types::DeleteMessageBatchRequestEntry::builder()
                    .id(i.to_string())
                    .receipt_handle(h)
                    .build()
            })
            .collect::<Result<Vec<_>, _>>()?;
        let out = sqs
            .delete_message_batch()
            .queue_url(&url)
            .set_entries(Some(entries))
            .send()
            .await?;
        anyhow::ensure!(out.failed().is_empty(), "{:?}", out.failed());
    }
    Ok(0)
}

/// Sends [`RACE_MESSAGES`] to a new queue on `endpoint` and receives them (in flight for
/// ten minutes), then deletes them all while as many new messages are sent, and
/// counts what the queue holds: every new message visible, nothing in flight.
///
/// moto's server answers each request on a thread; its DeleteMessage rebuilds the
/// queue's message list without the lock SendMessage holds, so a message sent during a
/// delete can vanish, and of two deletes at once one can put the other's message back.
async fn race_deletes_and_sends(endpoint: &str) -> Result<Race> {
    let sqs = sqs(endpoint).await;
    let url = sqs
        .create_queue()
        .queue_name("race")
        .attributes(QueueAttributeName::VisibilityTimeout, "600")
        .send()
        .await?
        .queue_url
        .context("CreateQueue without a URL")?;
    for _ in 0..RACE_MESSAGES / 10 {
        send_ten(sqs.clone(), url.clone(), "old").await?;
    }
    let mut handles = Vec::new();
    while handles.len() < RACE_MESSAGES {
        let got = sqs
            .receive_message()
            .queue_url(&url)
            .max_number_of_messages(10)
            .send()
            .await?;
        anyhow::ensure!(!got.messages().is_empty(), "{} received", handles.len());
        handles.extend(
            got.messages()
                .iter()
                .filter_map(|m| m.receipt_handle.clone()),
        );
    }

    let mut tasks = tokio::task::JoinSet::new();
    for k in 0..DELETERS {
        let (sqs, url) = (sqs.clone(), url.clone());
        let mine: Vec<String> = handles.iter().skip(k).step_by(DELETERS).cloned().collect();
        tasks.spawn(delete_all(sqs, url, mine));
    }
    for _ in 0..SENDERS {
        let (sqs, url) = (sqs.clone(), url.clone());
        tasks.spawn(async move {
            let mut accepted = 0;
            for _ in 0..RACE_MESSAGES / SENDERS / 10 {
                accepted += send_ten(sqs.clone(), url.clone(), "new").await?;
            }
            Ok(accepted)
        });
    }
    let mut accepted = 0;
    while let Some(done) = tasks.join_next().await {
        accepted += done??;
    }

    let counts = sqs
        .get_queue_attributes()
        .queue_url(&url)
        .attribute_names(QueueAttributeName::ApproximateNumberOfMessages)
        .attribute_names(QueueAttributeName::ApproximateNumberOfMessagesNotVisible)
        .send()
        .await?;
    let count = |name| -> Result<u64> {
        Ok(counts
            .attributes()
            .and_then(|a| a.get(&name))
            .context("a count missing")?
            .parse()?)
    };
    let visible = count(QueueAttributeName::ApproximateNumberOfMessages)?;
    Ok(Race {
        accepted,
        lost: accepted.saturating_sub(visible),
        revived: count(QueueAttributeName::ApproximateNumberOfMessagesNotVisible)?,
    })
}

/// The stand-in's moto keeps every message SendMessage accepted, and every message
/// deleted stays deleted, with deletes and sends at once over HTTP: its launcher runs
/// moto's SQS under each queue's lock, and the server still answers. Over HTTP the race
/// is rare (a few messages in a thousand on moto as installed, when it shows at all);
/// `crates/stand-in/tests/servers.rs` plays it step by step.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn moto_keeps_every_message_sent_while_others_are_deleted() -> Result<()> {
    let root = repo_root()?;
    let moto = Moto::start(&ensure_venv(&root)?)?;
    let race = race_deletes_and_sends(&moto.endpoint()).await?;
    assert_eq!(race.accepted, RACE_MESSAGES as u64);
    assert_eq!((race.lost, race.revived), (0, 0), "{race:?}");
    Ok(())
}
