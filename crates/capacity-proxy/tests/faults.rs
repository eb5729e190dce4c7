//! Each fault rate, over enough seeded calls, lands within a binomial bound of its setting.

use std::sync::Arc;

use anyhow::Result;
use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::batch_write_item::BatchWriteItemError;
use capacity_proxy::{Faults, ManualClock, Proxy, ProxyConfig};

use crate::common::{client, item, put};

/// |observed - n p| within 4.5 standard deviations (a false failure about 1 in 150,000
/// per check for an unseeded run; the seed makes the run reproducible).
fn assert_binomial(name: &str, observed: usize, n: usize, p: f64) {
    let mean = n as f64 * p;
    let sd = (n as f64 * p * (1.0 - p)).sqrt();
    assert!(
        (observed as f64 - mean).abs() <= 4.5 * sd,
        "{name}: observed {observed} of {n}, expected {mean:.0} +- {:.0}",
        4.5 * sd
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fault_rates_match_their_settings() -> Result<()> {
    let (drop, error, throttle, unprocessed) = (0.05, 0.10, 0.15, 0.20);
    let mut config = ProxyConfig::sink();
    config.clock = Arc::new(ManualClock::new());
    config.limits.key_wcu = 1e9;
    config.seed = Some(42);
    config.faults = Faults {
        latency_ms: 1,
        jitter_ms: 1,
        unprocessed_rate: unprocessed,
        error_rate: error,
        throttle_rate: throttle,
        drop_rate: drop,
    };
    let proxy = Proxy::start(config).await?;
    let c = client(&proxy.url());

    let calls = 800;
    let (mut dropped, mut errors, mut throttled, mut ok, mut items_ok, mut items_unprocessed) =
        (0, 0, 0, 0, 0, 0);
    for i in 0..calls {
        let reqs = (0..25)
            .map(|j| put(item("PK", &format!("k{j}"), &format!("{i}"))))
            .collect::<Result<Vec<_>>>()?;
        match c.batch_write_item().request_items("t", reqs).send().await {
            Ok(out) => {
                ok += 1;
                let un = out
                    .unprocessed_items()
                    .and_then(|m| m.get("t"))
                    .map_or(0, Vec::len);
                items_unprocessed += un;
                items_ok += 25 - un;
            }
            Err(SdkError::ServiceError(e)) => {
                let status = e.raw().status().as_u16();
                match e.into_err() {
                    BatchWriteItemError::ProvisionedThroughputExceededException(t) => {
                        assert_eq!(
                            t.throttling_reasons()[0].reason(),
                            Some("TableWriteKeyRangeThroughputExceeded")
                        );
                        throttled += 1;
                    }
                    BatchWriteItemError::InternalServerError(_) => {
                        assert_eq!(status, 500);
                        errors += 1;
                    }
                    other => anyhow::bail!("unexpected service error {other:?}"),
                }
            }
            // A closed connection without a reply.
            Err(SdkError::DispatchFailure(_) | SdkError::ResponseError(_)) => dropped += 1,
            Err(other) => anyhow::bail!("unexpected error {other:?}"),
        }
    }
    assert_eq!(dropped + errors + throttled + ok, calls);
    assert_binomial("drop", dropped, calls, drop);
    assert_binomial("error", errors, calls, error);
    assert_binomial("throttle", throttled, calls, throttle);
    assert_binomial("unprocessed", items_unprocessed, ok * 25, unprocessed);

    let stats = proxy.stats();
    assert_eq!(stats.faults.drop as usize, dropped);
    assert_eq!(stats.faults.error as usize, errors);
    assert_eq!(stats.faults.throttle as usize, throttled);
    assert_eq!(stats.faults.unprocessed_items as usize, items_unprocessed);
    assert_eq!(stats.faults.latency as usize, calls);
    assert_eq!(stats.sink_items as usize, items_ok);
    // Every call is timed, and takes at least the 1 ms injected, counted from its
    // arrival (the proxy's own work on it falls within the latency).
    assert_eq!(stats.service.calls as usize, calls);
    assert!(
        stats.service.total_micros >= 1_000 * calls as u64,
        "{:?}",
        stats.service
    );
    assert!(
        stats.service.total_micros >= stats.service.asleep_micros,
        "{:?}",
        stats.service
    );
    proxy.shutdown().await?;
    Ok(())
}
