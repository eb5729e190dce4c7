//! Reads in forward mode, in front of a private moto: charged by what they read, not by
//! what their answers show.

use std::sync::Arc;

use anyhow::Result;
use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::operation::query::builders::QueryFluentBuilder;
use aws_sdk_dynamodb::types::{AttributeValue, Select};
use capacity_proxy::{ManualClock, Proxy, ProxyConfig, ProxyHandle};

use crate::common::{client, key, moto, rcu, sized_item};

/// Runs `read` and returns the read units it added to table `r`'s bill.
async fn charged<F: Future<Output = Result<()>>>(proxy: &ProxyHandle, read: F) -> Result<f64> {
    let before = rcu(proxy, "r");
    read.await?;
    Ok(rcu(proxy, "r") - before)
}

/// A Query of partition `pk` of table `r`.
fn query(c: &Client, pk: &str) -> QueryFluentBuilder {
    c.query()
        .table_name("r")
        .key_condition_expression("#p = :k")
        .expression_attribute_names("#p", "PK")
        .expression_attribute_values(":k", AttributeValue::S(pk.to_owned()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_is_charged_by_the_items_it_read_not_by_what_its_answer_shows() -> Result<()> {
    let moto = moto()?;
    let mut config = ProxyConfig::forward(&moto.endpoint())?;
    config.clock = Arc::new(ManualClock::new());
    let proxy = Proxy::start(config).await?;
    let c = client(&proxy.url());
    let direct = client(&moto.endpoint());
    stand_in::create_pk_sk_table(&c, "r", "PK").await?;
    let mut items = vec![sized_item("g", "big", 6000)];
    items.extend((1..=3).map(|i| sized_item("k", &i.to_string(), 3000)));
    items.extend((1..=3).map(|i| sized_item("small", &i.to_string(), 1000)));
    for item in items {
        direct
            .put_item()
            .table_name("r")
            .set_item(Some(item))
            .send()
            .await?;
    }

    // A 6 KB item of which only the key is returned: 2 units strongly consistent.
    let units = charged(&proxy, async {
        let out = c
            .get_item()
            .table_name("r")
            .set_key(Some(key("g", "big")))
            .projection_expression("PK")
            .consistent_read(true)
            .send()
            .await?;
        assert_eq!(out.item().map(|i| i.len()), Some(1));
        Ok(())
    })
    .await?;
    assert_eq!(units, 2.0);

    // Three 3 KB items read, none kept by the filter: 9 KB, 3 units.
    let units = charged(&proxy, async {
        let out = query(&c, "k")
            .filter_expression("ballast = :none")
            .expression_attribute_values(":none", AttributeValue::S("none".into()))
            .consistent_read(true)
            .send()
            .await?;
        assert_eq!((out.count(), out.scanned_count()), (0, 3));
        Ok(())
    })
    .await?;
    assert_eq!(units, 3.0);

    // Counted, not returned, eventually consistent: half of 3.
    let units = charged(&proxy, async {
        let out = query(&c, "k").select(Select::Count).send().await?;
        assert_eq!(out.count(), 3);
        Ok(())
    })
    .await?;
    assert_eq!(units, 1.5);

    // Pages of two and one, keys only: 6 KB then 3 KB read, 2 units and 1.
    let first = query(&c, "k")
        .projection_expression("SK")
        .limit(2)
        .consistent_read(true);
    let mut start = None;
    let units = charged(&proxy, async {
        let out = first.send().await?;
        start = out.last_evaluated_key().cloned();
        Ok(())
    })
    .await?;
    assert_eq!(units, 2.0);
    let units = charged(&proxy, async {
        let out = query(&c, "k")
            .projection_expression("SK")
            .set_exclusive_start_key(start)
            .consistent_read(true)
            .send()
            .await?;
        assert_eq!(out.count(), 1);
        Ok(())
    })
    .await?;
    assert_eq!(units, 1.0);

    // What a Query reads is rounded once a call, not once an item: three 1 KB items, 1.
    let units = charged(&proxy, async {
        let out = query(&c, "small").consistent_read(true).send().await?;
        assert_eq!(out.count(), 3);
        Ok(())
    })
    .await?;
    assert_eq!(units, 1.0);
    assert_eq!(proxy.stats().requests_by_op.get("Query"), Some(&5));
    proxy.shutdown().await?;
    Ok(())
}
