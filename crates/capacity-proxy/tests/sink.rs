//! Sink mode: the capacity model at full DynamoDB scale, the sink's key set, /__stats, heat CSV.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;
use capacity_proxy::{Faults, ManualClock, Proxy, ProxyConfig, SinkKey, TableConfig};

use crate::common::{batch, client, get_json, item, offer_load, put};

const KEY_RANGE: &str = "TableWriteKeyRangeThroughputExceeded";
const TABLE_CAP: &str = "TableWriteProvisionedThroughputExceeded";

fn sink_config(clock: &Arc<ManualClock>) -> ProxyConfig {
    let mut config = ProxyConfig::sink();
    config.clock = clock.clone();
    config.seed = Some(1);
    config
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_hot_key_gets_1000_wcu_per_second_and_the_rest_is_key_range_throttled() -> Result<()> {
    let clock = Arc::new(ManualClock::new());
    let proxy = Proxy::start(sink_config(&clock)).await?;
    let c = client(&proxy.url());

    // 2,000 items/s for 10 simulated seconds to one key.
    let out = offer_load(&c, &clock, "readings", &["sensor-alpha-001"], 2000, 10).await?;

    assert_eq!(out.accepted_per_second, vec![1000; 10]);
    assert_eq!(out.unprocessed + out.throttled_items, 10_000);
    assert!(
        out.throttled_items > 0,
        "fully throttled calls fail as a whole"
    );
    let arn = "arn:aws:dynamodb:us-east-1:000000000000:table/readings";
    assert!(
        out.reasons
            .iter()
            .all(|(r, res)| r == KEY_RANGE && res == arn),
        "{:?}",
        out.reasons
    );

    let stats = proxy.stats();
    assert_eq!(stats.items_accepted, 10_000);
    assert_eq!(stats.throttled_by_reason.get(KEY_RANGE), Some(&10_000));
    assert_eq!(stats.keys[0].pk, "sensor-alpha-001");
    assert_eq!(stats.keys[0].wcu_peak_per_second, 1000.0);
    assert_eq!(stats.sink_items, 10_000);
    proxy.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_load_over_four_keys_is_never_throttled() -> Result<()> {
    let clock = Arc::new(ManualClock::new());
    let proxy = Proxy::start(sink_config(&clock)).await?;
    let c = client(&proxy.url());
    let out = offer_load(&c, &clock, "readings", &["a", "b", "c", "d"], 2000, 10).await?;
    assert_eq!(out.accepted_per_second, vec![2000; 10]);
    assert_eq!((out.unprocessed, out.throttled_items), (0, 0));
    assert!(proxy.stats().throttled_by_reason.is_empty());
    proxy.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_table_cap_throttles_with_the_table_reason() -> Result<()> {
    let clock = Arc::new(ManualClock::new());
    let mut config = sink_config(&clock);
    config.tables.insert(
        "capped".into(),
        TableConfig {
            table_wcu: Some(1500.0),
            ..TableConfig::default()
        },
    );
    let proxy = Proxy::start(config).await?;
    let c = client(&proxy.url());
    let out = offer_load(&c, &clock, "capped", &["a", "b", "c", "d"], 2000, 4).await?;
    assert_eq!(out.accepted_per_second, vec![1500; 4]);
    assert!(out.throttled_items > 0);
    assert!(
        out.reasons.iter().all(|(r, _)| r == TABLE_CAP),
        "{:?}",
        out.reasons
    );
    // Other tables keep the defaults.
    let other = offer_load(&c, &clock, "uncapped", &["a", "b", "c", "d"], 2000, 1).await?;
    assert_eq!(other.accepted_per_second, vec![2000]);
    proxy.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_acknowledged_item_is_in_stats_and_in_the_sink() -> Result<()> {
    let clock = Arc::new(ManualClock::new());
    let mut config = sink_config(&clock);
    config.faults = Faults {
        unprocessed_rate: 0.3,
        ..Faults::default()
    };
    let proxy = Proxy::start(config).await?;
    let c = client(&proxy.url());

    let mut expected = BTreeSet::new();
    let mut per_pk: HashMap<String, u64> = HashMap::new();
    let mut pending = Vec::new();
    for i in 0..1000 {
        let pk = format!("dev-{}", i % 7);
        let sk = format!("t{i:05}");
        expected.insert(SinkKey {
            table: "readings".into(),
            pk: pk.clone(),
            sk: Some(sk.clone()),
        });
        *per_pk.entry(pk.clone()).or_default() += 1;
        pending.push(put(item("PK", &pk, &sk))?);
    }
    let mut calls = 0;
    let mut unprocessed_seen = 0;
    while !pending.is_empty() {
        calls += 1;
        assert!(calls < 500, "unprocessed items never drain");
        let chunk: Vec<_> = pending.drain(..pending.len().min(25)).collect();
        let out = batch(&c, "readings", chunk).await?;
        assert!(out.throttled.is_empty());
        unprocessed_seen += out.unprocessed.len();
        pending.extend(out.unprocessed);
    }
    assert!(unprocessed_seen > 0);

    let keys: BTreeSet<_> = proxy.sink_keys().into_iter().collect();
    assert_eq!(keys, expected);

    let stats = get_json(proxy.addr, "/__stats?top=0").await?;
    assert_eq!(stats["sink_items"], 1000);
    assert_eq!(stats["items_accepted"], 1000);
    assert_eq!(
        stats["faults"]["unprocessed_items"],
        unprocessed_seen as u64
    );
    let listed = stats["keys"].as_array().map(Vec::len);
    assert_eq!(listed, Some(7));
    for k in stats["keys"].as_array().into_iter().flatten() {
        let pk = k["pk"].as_str().unwrap_or_default();
        assert_eq!(k["items_written"].as_u64(), per_pk.get(pk).copied(), "{pk}");
        assert_eq!(k["wcu_total"].as_f64(), per_pk.get(pk).map(|&n| n as f64));
    }
    assert_eq!(stats["requests_by_op"]["BatchWriteItem"], calls);
    // The default listing is truncated to the top keys.
    let top = get_json(proxy.addr, "/__stats?top=3").await?;
    assert_eq!(top["keys"].as_array().map(Vec::len), Some(3));
    assert_eq!(top["key_count"], 7);
    proxy.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn put_item_is_charged_stored_and_throttled_and_other_ops_get_a_clear_error() -> Result<()> {
    let clock = Arc::new(ManualClock::new());
    let mut config = sink_config(&clock);
    config.limits.key_wcu = 3.0;
    let proxy = Proxy::start(config).await?;
    let c = client(&proxy.url());
    for i in 0..3 {
        c.put_item()
            .table_name("t")
            .set_item(Some(item("PK", "k", &format!("{i}"))))
            .send()
            .await?;
    }
    let err = c
        .put_item()
        .table_name("t")
        .set_item(Some(item("PK", "k", "3")))
        .send()
        .await
        .expect_err("fourth write in the same second is over budget")
        .into_service_error();
    let reasons: Vec<_> = match &err {
        aws_sdk_dynamodb::operation::put_item::PutItemError::ProvisionedThroughputExceededException(e) => {
            e.throttling_reasons().iter().filter_map(|r| r.reason()).map(str::to_owned).collect()
        }
        other => anyhow::bail!("unexpected error {other:?}"),
    };
    assert_eq!(reasons, vec![KEY_RANGE.to_owned()]);
    assert_eq!(proxy.sink_keys().len(), 3);

    let err = c
        .describe_table()
        .table_name("t")
        .send()
        .await
        .expect_err("sink has no tables");
    let msg = format!("{:?}", err.into_service_error());
    assert!(msg.contains("sink mode"), "{msg}");
    proxy.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heat_csv_has_one_row_per_second_and_key() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("heat.csv");
    let clock = Arc::new(ManualClock::new());
    let mut config = sink_config(&clock);
    config.heat_csv = Some(path.clone());
    config.limits.key_wcu = 30.0;
    let proxy = Proxy::start(config).await?;
    let c = client(&proxy.url());
    offer_load(&c, &clock, "t", &["hot", "cold"], 50, 2).await?;
    clock.advance(Duration::from_secs(5));
    proxy.shutdown().await?;
    let text = std::fs::read_to_string(&path)?;
    // 50 items/s over two keys: 25 each (the 25-item batches alternate keys), within 30.
    assert_eq!(
        text,
        "second,table,pk,wcu,throttled_items\n0,t,cold,25,0\n0,t,hot,25,0\n1,t,cold,25,0\n1,t,hot,25,0\n"
    );
    Ok(())
}
