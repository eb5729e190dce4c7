//! Forward mode in front of a private moto (started through `stand-in`).

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::operation::get_item::GetItemError;
use aws_sdk_dynamodb::types::{AttributeValue, Select};
use capacity_proxy::{ManualClock, Proxy, ProxyConfig, TableConfig};

use crate::common::{client, item, moto, offer_load};

/// Items in `table`, over every Scan page (a page stops at 1 MB).
async fn count(c: &Client, table: &str) -> Result<i32> {
    let pages = c
        .scan()
        .table_name(table)
        .select(Select::Count)
        .into_paginator()
        .send()
        .collect::<Result<Vec<_>, _>>()
        .await?;
    Ok(pages.iter().map(|page| page.count()).sum())
}

fn forward_config(upstream: &str, clock: &Arc<ManualClock>) -> Result<ProxyConfig> {
    let mut config = ProxyConfig::forward(upstream)?;
    config.clock = clock.clone();
    config.seed = Some(3);
    // Budgets scaled down 5x from DynamoDB's to keep the test fast; the shape is the same.
    config.limits.key_wcu = 200.0;
    Ok(config)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hot_key_is_cut_to_its_budget_spread_keys_pass_and_moto_holds_what_was_accepted()
-> Result<()> {
    let moto = moto()?;
    let clock = Arc::new(ManualClock::new());
    let proxy = Proxy::start(forward_config(&moto.endpoint(), &clock)?).await?;
    let via_proxy = client(&proxy.url());
    let direct = client(&moto.endpoint());
    stand_in::create_pk_sk_table(&via_proxy, "hot", "PK").await?;
    stand_in::create_pk_sk_table(&via_proxy, "spread", "PK").await?;

    // 400 items/s for 10 s to one key against a 200 WCU/s key budget.
    let out = offer_load(&via_proxy, &clock, "hot", &["sensor-alpha-001"], 400, 10).await?;
    assert_eq!(out.accepted_per_second, vec![200; 10]);
    assert_eq!(out.unprocessed + out.throttled_items, 2000);
    let arn = "arn:aws:dynamodb:us-east-1:000000000000:table/hot";
    assert!(
        out.reasons
            .iter()
            .all(|(r, res)| r == "TableWriteKeyRangeThroughputExceeded" && res == arn)
    );
    assert_eq!(count(&direct, "hot").await?, 2000);

    // The same load over 4 keys stays within every key's budget.
    let out = offer_load(&via_proxy, &clock, "spread", &["a", "b", "c", "d"], 400, 10).await?;
    assert_eq!(out.accepted_per_second, vec![400; 10]);
    assert_eq!((out.unprocessed, out.throttled_items), (0, 0));
    assert_eq!(count(&direct, "spread").await?, 4000);

    let stats = proxy.stats();
    assert_eq!(stats.items_accepted, 6000);
    assert_eq!(stats.requests_by_op.get("CreateTable"), Some(&2));
    proxy.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn table_cap_reason_and_key_attribute_learned_from_describe_table() -> Result<()> {
    let moto = moto()?;
    let clock = Arc::new(ManualClock::new());
    let mut config = forward_config(&moto.endpoint(), &clock)?;
    config.tables.insert(
        "capped".into(),
        TableConfig {
            table_wcu: Some(300.0),
            ..TableConfig::default()
        },
    );
    let proxy = Proxy::start(config).await?;
    let via_proxy = client(&proxy.url());
    // Created behind the proxy's back, with a key attribute other than the default `PK`:
    // the proxy must learn it with DescribeTable to find the hot key.
    stand_in::create_pk_sk_table(&client(&moto.endpoint()), "devices", "device").await?;
    stand_in::create_pk_sk_table(&via_proxy, "capped", "PK").await?;

    let out = offer_load(&via_proxy, &clock, "capped", &["a", "b", "c", "d"], 400, 3).await?;
    assert_eq!(out.accepted_per_second, vec![300; 3]);
    assert!(out.throttled_items > 0);
    let arn = "arn:aws:dynamodb:us-east-1:000000000000:table/capped";
    assert!(
        out.reasons
            .iter()
            .all(|(r, res)| r == "TableWriteProvisionedThroughputExceeded" && res == arn),
        "{:?}",
        out.reasons
    );

    let mut accepted = 0;
    for i in 0..300 {
        let it = item("device", "hot-device", &format!("{i}"));
        match via_proxy
            .put_item()
            .table_name("devices")
            .set_item(Some(it))
            .send()
            .await
        {
            Ok(_) => accepted += 1,
            Err(e) => {
                let e = e.into_service_error();
                assert!(e.is_provisioned_throughput_exceeded_exception(), "{e:?}");
            }
        }
    }
    assert_eq!(accepted, 200);
    let stats = proxy.stats();
    assert!(
        stats
            .keys
            .iter()
            .any(|k| k.table == "devices" && k.pk == "hot-device")
    );
    proxy.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_are_charged_by_returned_size_and_throttled_with_the_read_reason() -> Result<()> {
    let moto = moto()?;
    let clock = Arc::new(ManualClock::new());
    let mut config = forward_config(&moto.endpoint(), &clock)?;
    config.limits.key_rcu = 10.0;
    let proxy = Proxy::start(config).await?;
    let c = client(&proxy.url());
    stand_in::create_pk_sk_table(&c, "r", "PK").await?;
    // A 6 KB item: 2 RCU strongly consistent, 1 RCU eventually consistent.
    let mut big = item("PK", "k", "big");
    big.insert("blob".into(), AttributeValue::S("y".repeat(6000)));
    c.put_item()
        .table_name("r")
        .set_item(Some(big))
        .send()
        .await?;

    let key = |sk: &str| {
        [
            ("PK".to_owned(), AttributeValue::S("k".into())),
            ("SK".to_owned(), AttributeValue::S(sk.into())),
        ]
        .into()
    };
    let mut ok = 0;
    let mut reason = None;
    for _ in 0..10 {
        match c
            .get_item()
            .table_name("r")
            .set_key(Some(key("big")))
            .consistent_read(true)
            .send()
            .await
        {
            Ok(out) => {
                assert!(out.item().is_some());
                ok += 1;
            }
            Err(e) => match e.into_service_error() {
                GetItemError::ProvisionedThroughputExceededException(t) => {
                    reason = t.throttling_reasons()[0].reason().map(str::to_owned);
                    break;
                }
                other => anyhow::bail!("unexpected {other:?}"),
            },
        }
    }
    assert_eq!(ok, 5, "10 RCU buy five 2-RCU reads");
    assert_eq!(
        reason.as_deref(),
        Some("TableReadKeyRangeThroughputExceeded")
    );

    // A second later the bucket is full again; eventually consistent Query pages cost half.
    clock.advance(Duration::from_secs(1));
    let mut queries = 0;
    loop {
        let r = c
            .query()
            .table_name("r")
            .key_condition_expression("#p = :k")
            .expression_attribute_names("#p", "PK")
            .expression_attribute_values(":k", AttributeValue::S("k".into()))
            .send()
            .await;
        match r {
            Ok(out) => {
                assert_eq!(out.count(), 1);
                queries += 1;
            }
            Err(e) => {
                assert!(
                    e.into_service_error()
                        .is_provisioned_throughput_exceeded_exception()
                );
                break;
            }
        }
        assert!(queries < 50, "reads never throttled");
    }
    assert_eq!(
        queries, 10,
        "10 RCU buy ten 1-RCU eventually consistent pages"
    );
    let stats = proxy.stats();
    let k = stats
        .keys
        .iter()
        .find(|k| k.table == "r" && k.pk == "k")
        .context("key r/k")?;
    assert_eq!(k.rcu_total, 20.0);
    assert_eq!(
        stats
            .throttled_by_reason
            .get("TableReadKeyRangeThroughputExceeded"),
        Some(&2)
    );
    proxy.shutdown().await?;
    Ok(())
}
