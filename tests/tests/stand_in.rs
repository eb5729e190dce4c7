//! The stand-in creates what template.yaml declares, and the resources work.

use std::collections::BTreeMap;

use anyhow::{Context, Result};

use aws_sdk_dynamodb::types::{AttributeValue, KeyType, ScalarAttributeType, TimeToLiveStatus};
use aws_sdk_sqs::types::QueueAttributeName;
use stand_in::{Backend, Dynalite, ensure_dynalite, provision, provision_tables, repo_root};

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
