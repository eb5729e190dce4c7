//! Transactions in forward mode, in front of a private moto: each action charged twice
//! its units to its own key, admitted with the others or cancelled with them.

use std::sync::Arc;

use anyhow::{Context, Result};
use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::operation::transact_get_items::TransactGetItemsError;
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::types::{
    AttributeValue, CancellationReason, ConditionCheck, Delete, Get, Put, TransactGetItem,
    TransactWriteItem, Update,
};
use capacity_proxy::{Limits, ManualClock, Proxy, ProxyConfig, ProxyHandle};

use crate::common::{client, key, moto, rcu, sized_item, wcu};

/// The proxy in front of `moto` with `limits`, on a clock that never moves; a client
/// through it and one straight to moto.
async fn proxy_before(moto: &stand_in::Moto, limits: Limits) -> Result<(ProxyHandle, Client)> {
    let mut config = ProxyConfig::forward(&moto.endpoint())?;
    config.clock = Arc::new(ManualClock::new());
    config.limits = limits;
    let proxy = Proxy::start(config).await?;
    let c = client(&proxy.url());
    stand_in::create_pk_sk_table(&c, "t", "PK").await?;
    Ok((proxy, c))
}

/// Puts an item of `bytes` under (`pk`, `sk`) straight into moto: set up, not charged.
async fn seed(moto: &stand_in::Moto, pk: &str, sk: &str, bytes: usize) -> Result<()> {
    client(&moto.endpoint())
        .put_item()
        .table_name("t")
        .set_item(Some(sized_item(pk, sk, bytes)))
        .send()
        .await?;
    Ok(())
}

fn put(pk: &str, sk: &str, bytes: usize) -> Result<TransactWriteItem> {
    let put = Put::builder()
        .table_name("t")
        .set_item(Some(sized_item(pk, sk, bytes)))
        .build()?;
    Ok(TransactWriteItem::builder().put(put).build())
}

fn check(pk: &str, sk: &str, condition: &str) -> Result<TransactWriteItem> {
    let check = ConditionCheck::builder()
        .table_name("t")
        .set_key(Some(key(pk, sk)))
        .condition_expression(condition)
        .build()?;
    Ok(TransactWriteItem::builder().condition_check(check).build())
}

fn get(pk: &str, sk: &str, projection: Option<&str>) -> Result<TransactGetItem> {
    let get = Get::builder()
        .table_name("t")
        .set_key(Some(key(pk, sk)))
        .set_projection_expression(projection.map(str::to_owned))
        .build()?;
    Ok(TransactGetItem::builder().get(get).build())
}

/// The codes of a transaction's cancellation reasons.
fn codes(reasons: &[CancellationReason]) -> Vec<&str> {
    reasons.iter().map(|r| r.code().unwrap_or("-")).collect()
}

/// Per key of table `t`: (write units, items written).
fn per_key(proxy: &ProxyHandle, pk: &str) -> Result<(f64, u64)> {
    let stats = proxy.stats();
    let k = stats
        .keys
        .iter()
        .find(|k| k.table == "t" && k.pk == pk)
        .with_context(|| format!("key {pk}"))?;
    Ok((k.wcu_total, k.items_written))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transact_write_items_charges_each_action_twice_its_write_units_to_its_key() -> Result<()> {
    let moto = moto()?;
    let (proxy, c) = proxy_before(&moto, Limits::default()).await?;
    seed(&moto, "b", "shrinks", 3000).await?;
    seed(&moto, "c", "gone", 2500).await?;
    seed(&moto, "d", "checked", 1500).await?;

    let update = Update::builder()
        .table_name("t")
        .set_key(Some(key("b", "shrinks")))
        .update_expression("SET ballast = :small")
        .expression_attribute_values(":small", AttributeValue::S("z".repeat(400)))
        .build()?;
    let delete = Delete::builder()
        .table_name("t")
        .set_key(Some(key("c", "gone")))
        .build()?;
    c.transact_write_items()
        .transact_items(put("a", "new", 1000)?)
        .transact_items(TransactWriteItem::builder().update(update).build())
        .transact_items(TransactWriteItem::builder().delete(delete).build())
        .transact_items(check("d", "checked", "attribute_exists(PK)")?)
        .send()
        .await?;

    // A 1 KB put: 2. A 3 KB item shrunk: 2 x 3. A 2.5 KB item deleted: 2 x 3. A check
    // of a 1.5 KB item, a write as DynamoDB bills it: 2 x 2, no item written.
    assert_eq!(per_key(&proxy, "a")?, (2.0, 1));
    assert_eq!(per_key(&proxy, "b")?, (6.0, 1));
    assert_eq!(per_key(&proxy, "c")?, (6.0, 1));
    assert_eq!(per_key(&proxy, "d")?, (4.0, 0));
    assert_eq!(wcu(&proxy, "t"), 18.0);

    // A transactional put replacing a 5 KB item by a 1 KB one: 2 x 5.
    seed(&moto, "e", "big", 5000).await?;
    c.transact_write_items()
        .transact_items(put("e", "big", 1000)?)
        .send()
        .await?;
    assert_eq!(per_key(&proxy, "e")?, (10.0, 1));
    proxy.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transaction_over_a_keys_budget_is_cancelled_with_a_throttling_reason_and_costs_nothing()
-> Result<()> {
    let moto = moto()?;
    let limits = Limits {
        key_wcu: 5.0,
        ..Limits::default()
    };
    let (proxy, c) = proxy_before(&moto, limits).await?;

    c.put_item()
        .table_name("t")
        .set_item(Some(sized_item("hot", "0", 500)))
        .send()
        .await?;
    // 2 x 2 and 2 x 1 to one key: 6 of the 4 it has left; the other key's put alone
    // would pass.
    let e = c
        .transact_write_items()
        .transact_items(put("hot", "1", 2000)?)
        .transact_items(put("hot", "2", 1000)?)
        .transact_items(put("cold", "1", 1000)?)
        .send()
        .await
        .expect_err("over the key's budget");
    match e.into_service_error() {
        TransactWriteItemsError::TransactionCanceledException(e) => {
            assert_eq!(
                codes(e.cancellation_reasons()),
                ["None", "ThrottlingError", "None"]
            );
        }
        other => anyhow::bail!("unexpected {other:?}"),
    }
    let stored = client(&moto.endpoint())
        .scan()
        .table_name("t")
        .send()
        .await?
        .count();
    assert_eq!(stored, 1, "nothing of it was written");
    let stats = proxy.stats();
    assert_eq!(stats.wcu_by_table.get("t"), Some(&1.0));
    assert_eq!(
        stats
            .throttled_by_reason
            .get("TableWriteKeyRangeThroughputExceeded"),
        Some(&1)
    );

    // Within the budget it is forwarded and charged.
    c.transact_write_items()
        .transact_items(put("hot", "1", 2000)?)
        .send()
        .await?;
    assert_eq!(per_key(&proxy, "hot")?, (5.0, 2));
    proxy.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transaction_cancelled_by_a_condition_costs_each_action_once_at_the_item_found()
-> Result<()> {
    let moto = moto()?;
    let (proxy, c) = proxy_before(&moto, Limits::default()).await?;
    seed(&moto, "d", "checked", 1500).await?;
    let e = c
        .transact_write_items()
        .transact_items(put("a", "new", 3000)?)
        .transact_items(check("d", "checked", "attribute_not_exists(PK)")?)
        .send()
        .await
        .expect_err("the checked item exists");
    match e.into_service_error() {
        TransactWriteItemsError::TransactionCanceledException(e) => {
            assert_eq!(
                codes(e.cancellation_reasons()),
                ["None", "ConditionalCheckFailed"]
            );
        }
        other => anyhow::bail!("unexpected {other:?}"),
    }
    // The put found no item: 1; the check found 1.5 KB: 2. Nothing written.
    assert_eq!(per_key(&proxy, "a")?, (1.0, 0));
    assert_eq!(per_key(&proxy, "d")?, (2.0, 0));
    assert_eq!(proxy.stats().items_accepted, 0);
    proxy.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transact_get_items_charges_twice_the_read_units_of_each_whole_item() -> Result<()> {
    let moto = moto()?;
    let limits = Limits {
        key_rcu: 5.0,
        ..Limits::default()
    };
    let (proxy, c) = proxy_before(&moto, limits).await?;
    seed(&moto, "a", "big", 6000).await?;
    seed(&moto, "c", "big", 6000).await?;

    let out = c
        .transact_get_items()
        .transact_items(get("a", "big", None)?)
        .transact_items(get("b", "missing", None)?)
        .transact_items(get("c", "big", Some("PK"))?)
        .send()
        .await?;
    assert_eq!(out.responses().len(), 3);
    // 6 KB: 2 x 2; no item: 2 x 1; 6 KB of which only its key is returned: still 2 x 2.
    let read = |pk: &str| {
        proxy
            .stats()
            .keys
            .iter()
            .find(|k| k.pk == pk)
            .map(|k| k.rcu_total)
    };
    assert_eq!(
        (read("a"), read("b"), read("c")),
        (Some(4.0), Some(2.0), Some(4.0))
    );
    assert_eq!(rcu(&proxy, "t"), 10.0);

    // Key a has 1 of its 5 left, less than a transactional read: cancelled, not charged.
    let e = c
        .transact_get_items()
        .transact_items(get("b", "missing", None)?)
        .transact_items(get("a", "big", None)?)
        .send()
        .await
        .expect_err("over the key's read budget");
    match e.into_service_error() {
        TransactGetItemsError::TransactionCanceledException(e) => {
            assert_eq!(codes(e.cancellation_reasons()), ["None", "ThrottlingError"]);
        }
        other => anyhow::bail!("unexpected {other:?}"),
    }
    assert_eq!(rcu(&proxy, "t"), 10.0);
    assert_eq!(
        proxy
            .stats()
            .throttled_by_reason
            .get("TableReadKeyRangeThroughputExceeded"),
        Some(&1)
    );
    proxy.shutdown().await?;
    Ok(())
}
