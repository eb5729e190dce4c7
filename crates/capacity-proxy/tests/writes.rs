//! Single-item writes in forward mode, in front of a private moto: each charged as
//! DynamoDB bills it, by the larger of the item before and after, a failed condition by
//! the item it found, and the caller answered as it asked.

use std::sync::Arc;

use anyhow::{Context, Result};
use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::types::{AttributeValue, ReturnValue};
use capacity_proxy::{ManualClock, Proxy, ProxyConfig, ProxyHandle};

use crate::common::{client, key, moto, sized_item, wcu};

/// The proxy in front of `moto` on a clock that never moves, and a client through it.
async fn proxy_before(moto: &stand_in::Moto) -> Result<(ProxyHandle, Client)> {
    let mut config = ProxyConfig::forward(&moto.endpoint())?;
    config.clock = Arc::new(ManualClock::new());
    let proxy = Proxy::start(config).await?;
    let c = client(&proxy.url());
    Ok((proxy, c))
}

/// Puts `item` into `table` straight into moto: set up, not charged.
async fn seed(direct: &Client, table: &str, bytes: usize, sk: &str) -> Result<()> {
    direct
        .put_item()
        .table_name(table)
        .set_item(Some(sized_item("k", sk, bytes)))
        .send()
        .await?;
    Ok(())
}

/// Runs `write` and returns the write units it added to `table`'s bill.
async fn charged<F: Future<Output = Result<()>>>(
    proxy: &ProxyHandle,
    table: &str,
    write: F,
) -> Result<f64> {
    let before = wcu(proxy, table);
    write.await?;
    Ok(wcu(proxy, table) - before)
}

fn s(text: &str) -> AttributeValue {
    AttributeValue::S(text.to_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn update_item_is_charged_by_the_larger_of_the_item_before_and_after() -> Result<()> {
    let moto = moto()?;
    let (proxy, c) = proxy_before(&moto).await?;
    let direct = client(&moto.endpoint());
    stand_in::create_pk_sk_table(&c, "u", "PK").await?;

    // A 3 KB item shrunk to half a KB: 3 units, the item before.
    seed(&direct, "u", 3000, "shrinks").await?;
    let units = charged(&proxy, "u", async {
        let out = c
            .update_item()
            .table_name("u")
            .set_key(Some(key("k", "shrinks")))
            .update_expression("SET ballast = :small")
            .expression_attribute_values(":small", s(&"z".repeat(480)))
            .return_values(ReturnValue::AllOld)
            .send()
            .await?;
        // The caller's ReturnValues are answered as it asked: the item before.
        assert_eq!(out.attributes(), Some(&sized_item("k", "shrinks", 3000)));
        Ok(())
    })
    .await?;
    assert_eq!(units, 3.0);

    // A 2 KB item that copies its ballast, growing to 4 KB with no value sent: 4 units,
    // the item after.
    seed(&direct, "u", 2000, "grows").await?;
    let units = charged(&proxy, "u", async {
        let out = c
            .update_item()
            .table_name("u")
            .set_key(Some(key("k", "grows")))
            .update_expression("SET twin = ballast")
            .return_values(ReturnValue::UpdatedNew)
            .send()
            .await?;
        let new = out.attributes().context("UPDATED_NEW attributes")?;
        assert_eq!(new.keys().collect::<Vec<_>>(), ["twin"]);
        Ok(())
    })
    .await?;
    assert_eq!(units, 4.0);

    // The same with the item after in the answer (ALL_NEW): 6 units, no lookup needed.
    let units = charged(&proxy, "u", async {
        let out = c
            .update_item()
            .table_name("u")
            .set_key(Some(key("k", "grows")))
            .update_expression("SET third = ballast")
            .return_values(ReturnValue::AllNew)
            .send()
            .await?;
        assert_eq!(out.attributes().map(|a| a.len()), Some(5));
        Ok(())
    })
    .await?;
    assert_eq!(units, 6.0);

    // An update that creates its item: 2 units for 1.5 KB, and no answer asked for.
    let units = charged(&proxy, "u", async {
        let out = c
            .update_item()
            .table_name("u")
            .set_key(Some(key("k", "new")))
            .update_expression("SET ballast = :b")
            .expression_attribute_values(":b", s(&"n".repeat(1500)))
            .send()
            .await?;
        assert!(out.attributes().is_none());
        Ok(())
    })
    .await?;
    assert_eq!(units, 2.0);

    let stats = proxy.stats();
    let k = stats.keys.iter().find(|k| k.pk == "k").context("key k")?;
    assert_eq!((k.wcu_total, k.items_written), (15.0, 4));
    proxy.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn put_item_is_charged_by_the_larger_of_the_item_it_replaces_and_its_own() -> Result<()> {
    let moto = moto()?;
    let (proxy, c) = proxy_before(&moto).await?;
    let direct = client(&moto.endpoint());
    // Created behind the proxy's back: it learns the key (PK and SK) from DescribeTable
    // to find the item a put replaces.
    stand_in::create_pk_sk_table(&direct, "p", "PK").await?;

    // A 5 KB item replaced by a 1 KB one: 5 units.
    seed(&direct, "p", 5000, "a").await?;
    let units = charged(&proxy, "p", async {
        let out = c
            .put_item()
            .table_name("p")
            .set_item(Some(sized_item("k", "a", 1000)))
            .return_values(ReturnValue::AllOld)
            .send()
            .await?;
        assert_eq!(out.attributes(), Some(&sized_item("k", "a", 5000)));
        Ok(())
    })
    .await?;
    assert_eq!(units, 5.0);

    // A 1 KB item replaced by a 2.5 KB one: 3 units; a new 1 KB item: 1 unit.
    let units = charged(&proxy, "p", async {
        c.put_item()
            .table_name("p")
            .set_item(Some(sized_item("k", "a", 2500)))
            .send()
            .await?;
        Ok(())
    })
    .await?;
    assert_eq!(units, 3.0);
    let units = charged(&proxy, "p", async {
        c.put_item()
            .table_name("p")
            .set_item(Some(sized_item("k", "b", 1000)))
            .send()
            .await?;
        Ok(())
    })
    .await?;
    assert_eq!(units, 1.0);
    assert_eq!(proxy.stats().items_accepted, 3);
    proxy.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_condition_costs_the_units_of_the_item_found_and_at_least_one() -> Result<()> {
    let moto = moto()?;
    let (proxy, c) = proxy_before(&moto).await?;
    let direct = client(&moto.endpoint());
    stand_in::create_pk_sk_table(&c, "c", "PK").await?;
    seed(&direct, "c", 500, "small").await?;
    seed(&direct, "c", 2500, "large").await?;

    // A 3 KB put that may not replace the half-KB item there: 1 unit, not 3.
    let units = charged(&proxy, "c", async {
        let e = c
            .put_item()
            .table_name("c")
            .set_item(Some(sized_item("k", "small", 3000)))
            .condition_expression("attribute_not_exists(PK)")
            .send()
            .await
            .expect_err("the item exists");
        let e = e.into_service_error();
        assert!(e.is_conditional_check_failed_exception(), "{e:?}");
        Ok(())
    })
    .await?;
    assert_eq!(units, 1.0);

    // An update whose condition fails on a 2.5 KB item: 3 units.
    let units = charged(&proxy, "c", async {
        let e = c
            .update_item()
            .table_name("c")
            .set_key(Some(key("k", "large")))
            .update_expression("SET ballast = :v")
            .condition_expression("ballast = :other")
            .expression_attribute_values(":v", s("v"))
            .expression_attribute_values(":other", s("other"))
            .send()
            .await
            .expect_err("the condition is false");
        let e = e.into_service_error();
        assert!(e.is_conditional_check_failed_exception(), "{e:?}");
        Ok(())
    })
    .await?;
    assert_eq!(units, 3.0);

    // A delete whose condition fails on no item at all: 1 unit.
    let units = charged(&proxy, "c", async {
        let e = c
            .delete_item()
            .table_name("c")
            .set_key(Some(key("k", "missing")))
            .condition_expression("attribute_exists(PK)")
            .send()
            .await
            .expect_err("there is no item");
        let e = e.into_service_error();
        assert!(e.is_conditional_check_failed_exception(), "{e:?}");
        Ok(())
    })
    .await?;
    assert_eq!(units, 1.0);

    // Charged, but nothing was written; a call the upstream refuses costs nothing.
    let e = c
        .put_item()
        .table_name("no-such-table")
        .set_item(Some(sized_item("k", "x", 3000)))
        .send()
        .await
        .expect_err("no such table");
    assert!(e.into_service_error().is_resource_not_found_exception());
    let stats = proxy.stats();
    assert_eq!(stats.items_accepted, 0);
    assert_eq!(stats.wcu_by_table.get("no-such-table"), None);
    proxy.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_item_is_charged_by_the_item_it_deletes_and_throttled_at_the_key_budget()
-> Result<()> {
    let moto = moto()?;
    let mut config = ProxyConfig::forward(&moto.endpoint())?;
    config.clock = Arc::new(ManualClock::new());
    config.limits.key_wcu = 5.0;
    let proxy = Proxy::start(config).await?;
    let c = client(&proxy.url());
    let direct = client(&moto.endpoint());
    stand_in::create_pk_sk_table(&c, "d", "PK").await?;
    seed(&direct, "d", 2500, "a").await?;
    seed(&direct, "d", 2500, "b").await?;

    let delete = |sk: &'static str| c.delete_item().table_name("d").set_key(Some(key("k", sk)));
    // 2.5 KB deleted: 3 units of the key's 5.
    let units = charged(&proxy, "d", async {
        delete("a").send().await?;
        Ok(())
    })
    .await?;
    assert_eq!(units, 3.0);
    // The next 3-unit delete finds 2 left: throttled, charged nothing, nothing deleted.
    let e = delete("b").send().await.expect_err("over the key's budget");
    assert!(
        e.into_service_error()
            .is_provisioned_throughput_exceeded_exception()
    );
    assert_eq!(wcu(&proxy, "d"), 3.0);
    let left = direct
        .get_item()
        .table_name("d")
        .set_key(Some(key("k", "b")))
        .send()
        .await?;
    assert!(left.item().is_some());
    // A missing item costs 1 to delete.
    let units = charged(&proxy, "d", async {
        delete("a").send().await?;
        Ok(())
    })
    .await?;
    assert_eq!(units, 1.0);
    let stats = proxy.stats();
    assert_eq!(
        stats
            .throttled_by_reason
            .get("TableWriteKeyRangeThroughputExceeded"),
        Some(&1)
    );
    assert_eq!(
        stats.requests_by_op.get("GetItem"),
        None,
        "lookups are not counted"
    );
    proxy.shutdown().await?;
    Ok(())
}
