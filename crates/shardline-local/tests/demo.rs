//! The demo at reduced scale: a few seconds, a small fleet, and a hot device over a
//! per-key limit lowered to 100 WCU/s, so both runs stay cheap. The report must show
//! the naive layout throttled, the adaptive one raising the hot device's fan-out and
//! writing every valid reading, and exactly the malformed messages in each DLQ.

use std::time::Duration;

use anyhow::Result;
use shardline_local::demo::{self, IngestTuning, Scenario};

fn scenario(out_dir: &std::path::Path) -> Result<Scenario> {
    Ok(Scenario {
        root: stand_in::repo_root()?,
        out_dir: out_dir.to_path_buf(),
        devices: 20,
        fleet_rate: 40.0,
        hot_device: demo::HOT_DEVICE.to_owned(),
        hot_rate: 200.0,
        duration: Duration::from_secs(6),
        bad_rate: 0.05,
        batch: 5,
        seed: 11,
        key_wcu: 100.0,
        drain: Duration::from_secs(15),
        query_window: Duration::from_secs(2),
        planned_fanout: true,
        ingest: IngestTuning {
            max_future_secs: 1,
            cache_ttl_secs: 1,
            cooldown_secs: 3,
            slack_secs: 1,
            jitter_secs: 0,
            retry_max_attempts: 40,
            max_inflight: 4,
            blocks: true,
        },
        batching_window: Duration::from_millis(300),
        batch_size: 10,
        max_concurrency: 4,
        verbose: false,
        one_reading: None,
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_demo_report_shows_naive_throttles_and_the_planned_fanout_absorbing_them() -> Result<()>
{
    let _alone = crate::ONE_RUN.lock().await;
    let dir = tempfile::tempdir()?;
    let report = demo::run(&scenario(dir.path())?).await?;
    let text = demo::report_text(&report);
    let (naive, adaptive) = (&report.naive, &report.adaptive);

    // The plan places the hot device's sub-shards as the ingest does (base shards, raised
    // at RAISE_AHEAD_WCU, a tenth of the per-key limit): at this scale the fleet's 40 WCU/s
    // and a 10 WCU/s share fit one key's budget of 50, so N can be 1 (its sub-shards are
    // then keys of their own, j >= N). What the plan promises is its budget.
    assert!(
        report.plan.max_pk_wcu <= report.plan.budget_per_pk,
        "{text}"
    );
    assert!(naive.throttled() > 0, "the naive layout throttles:\n{text}");
    assert_eq!(naive.runner.fanout_raises, 0, "{text}");
    let planned = report.plan.hot_entity_fanout;
    assert!(planned > 1, "{text}");
    assert!(
        adaptive.fanout.first().is_some_and(|e| e.k == planned),
        "the API lists the planned fan-out first:\n{text}"
    );
    assert_eq!(
        adaptive.throttles_before_raise,
        Some(0),
        "the planned fan-out is in force before the first reading:\n{text}"
    );
    assert!(
        adaptive.throttled() < naive.throttled(),
        "the planned fan-out takes the load the naive key cannot:\n{text}"
    );
    assert_eq!(adaptive.sent.send_failures, 0, "{text}");
    every_message_is_accounted_for(&report, &text);
    assert_eq!(
        adaptive.written, adaptive.sent.sent.readings,
        "every valid reading of the adaptive run is written:\n{text}\nthe runner's counters: {:?}",
        adaptive.runner
    );
    assert_eq!(
        adaptive.queued_visible + adaptive.queued_invisible,
        0,
        "{text}"
    );
    for run in [naive, adaptive] {
        assert!(run.sent.sent.malformed_total() > 0, "{text}");
        assert_eq!(
            run.dlq,
            run.sent.sent.malformed_total(),
            "the DLQ holds exactly the malformed messages:\n{text}"
        );
        assert!(run.heatmap.is_file(), "{text}");
        assert!(run.hot_query.refused.is_none(), "{text}");
        assert!(run.hot_query.items > 0, "{text}");
        assert!(run.fleet_query.refused.is_none(), "{text}");
        assert!(run.fleet_query.items > 0, "{text}");
    }
    assert!(adaptive.throttles_after_raise.is_some(), "{text}");
    dashboard_holds(&report, &text)?;
    // The bill. Naive: each reading of the demo's shape is an item under 1 KB, one
    // write unit, paid again only by a redelivered message's overwrite. Adaptive: a new
    // table packs blocks, so the hot device's messages of 5 readings are one write unit
    // each, and the fleet's messages pack what they hold of one device.
    let naive_per_reading = naive.write_units_per_reading().expect("readings written");
    assert!(
        (1.0..1.5).contains(&naive_per_reading),
        "{naive_per_reading}:\n{text}"
    );
    let per_reading = adaptive
        .write_units_per_reading()
        .expect("readings written");
    assert!(per_reading < 0.5, "{per_reading}:\n{text}");
    let (naive_bill, bill) = (
        naive.monthly_write_bill().expect("a bill"),
        adaptive.monthly_write_bill().expect("a bill"),
    );
    assert!(
        (81_000.0..121_500.0).contains(&naive_bill),
        "{naive_bill}:\n{text}"
    );
    assert!(bill < naive_bill / 2.0, "{bill}:\n{text}");
    for run in [naive, adaptive] {
        whole_bill_is_counted(run, &text);
    }
    for needle in [
        "The whole bill, a month at this run's rate",
        "per reading written",
        "a month at 50,000 readings/s",
        "readings sent",
        "throttled items",
        "sent to the DLQ",
        "write lag p50",
    ] {
        assert!(text.contains(needle), "{needle} missing from:\n{text}");
    }
    println!("{text}");
    Ok(())
}

/// A run's whole bill is counted where it was used: moto answered at least the
/// publisher's SendMessageBatch calls (each a request per 64 KB of its messages), the
/// runner's invocations were timed, the proxy charged units, and the table's bytes
/// hold each item written (the scenario's messages hold 5 readings).
fn whole_bill_is_counted(run: &demo::RunReport, text: &str) {
    let bill = run.bill.as_ref().expect("a bill");
    let c = &bill.counts;
    assert!(c.sqs_sends >= run.sent.calls, "{c:?}\n{text}");
    assert!(c.sqs_receives > 0 && c.sqs_deletes > 0, "{c:?}\n{text}");
    let ingest: u64 = c.functions.iter().map(|f| f.invocations).sum();
    assert!(ingest > 0 && ingest <= run.runner.batches, "{c:?}\n{text}");
    assert!(c.write_units > 0.0, "{c:?}\n{text}");
    // Every item is billed 100 bytes beyond its own: an item a reading in the naive
    // run, a block of a device's readings of a message in the adaptive one.
    let items_at_least = match run.variant {
        demo::Variant::Naive => run.written,
        demo::Variant::Adaptive => run.written / 5,
    };
    assert!(
        c.stored_bytes > items_at_least as f64 * 100.0,
        "{c:?}\n{text}"
    );
    for service in demo::COUNTED {
        assert!(bill.measured.service(service) > 0.0, "{service:?}\n{text}");
        assert!(bill.modelled.service(service) > 0.0, "{service:?}\n{text}");
    }
}

/// Each message the publisher had accepted is named: run 2 received every one and
/// stored or dead-lettered it; run 1's messages not settled are still in its queue
/// (its throttled backlog). A message SQS accepted and never handed out is the
/// stand-in's loss, which the report tells from ours (scenario 45).
fn every_message_is_accounted_for(report: &demo::DemoReport, text: &str) {
    let (naive, adaptive) = (&report.naive, &report.adaptive);
    let accounting = &adaptive.accounting;
    assert!(
        accounting.losses().is_empty(),
        "{:#?}\n{text}",
        accounting.losses()
    );
    assert_eq!(accounting.accepted, adaptive.sent.sent.messages, "{text}");
    assert_eq!(
        accounting.stored + accounting.dead_lettered,
        accounting.accepted,
        "{text}"
    );
    let naive_open =
        (naive.accounting.unsettled.len() + naive.accounting.never_received.len()) as u64;
    assert!(
        naive_open <= naive.queued_visible + naive.queued_invisible,
        "run 1's unsettled messages are in its queue: {naive_open}\n{text}"
    );
    assert!(naive.accounting.unlogged.is_empty(), "{text}");
    for needle in ["received and stored", "never received (stand-in)"] {
        assert!(text.contains(needle), "{needle} missing from:\n{text}");
    }
}

/// Run 2's dashboard: its hours resealed from every reading the table holds, the device
/// list and the fleet's hour agreeing, the hot device's latest reading answered, and its
/// series drawn from as many raw readings as its device-hour counts.
fn dashboard_holds(report: &demo::DemoReport, text: &str) -> Result<()> {
    let adaptive = &report.adaptive;
    assert!(report.naive.dashboard.is_none(), "{text}");
    let dashboard = match &adaptive.dashboard {
        Some(Ok(d)) => d,
        Some(Err(why)) => anyhow::bail!("no dashboard: {why}\n{text}"),
        None => anyhow::bail!("run 2 has no dashboard:\n{text}"),
    };
    assert_eq!(dashboard.reseal.readings, adaptive.written, "{text}");
    assert_eq!(
        dashboard
            .fleet_hours
            .iter()
            .map(|h| h.readings)
            .sum::<u64>(),
        adaptive.written,
        "{text}"
    );
    assert_eq!(
        dashboard.fleet.iter().map(|m| m.readings).sum::<u64>(),
        adaptive.written,
        "{text}"
    );
    let most = dashboard.fleet_hours.iter().map(|h| h.devices).max();
    assert!(most.is_some_and(|n| n > 1), "{text}");
    if dashboard.hours.len() == 1 {
        assert_eq!(Some(dashboard.devices.devices), most, "{text}");
    }
    let hot = &dashboard.latest[0];
    assert_eq!(hot.device, demo::HOT_DEVICE, "{text}");
    assert!(hot.answer.is_ok(), "{text}");
    let series = &dashboard.series;
    assert!(series.path.is_file(), "{text}");
    assert!(series.minutes > 0, "{text}");
    assert_eq!(series.points, series.sealed_readings, "{text}");
    for needle in [
        "Dashboard of run 2",
        "Sealed by a reseal",
        demo::SERIES_FILE,
    ] {
        assert!(text.contains(needle), "{needle} missing from:\n{text}");
    }
    Ok(())
}

/// Run 2 leaves the hot device to the ingest's raises, with the production fan-out
/// settings (SHARD_CACHE_TTL_SECS 60, MAX_FUTURE_SECS 300, PROPAGATION_SLACK_SECS 5,
/// FANOUT_COOLDOWN_SECS 2, FANOUT_JITTER_SECS 1), writing an item a reading
/// (`shardline-local demo --no-blocks`, a table created before blocks): packed into
/// blocks, this hot device's 200 readings a second in messages of 5 take a few write
/// units a second, which its one key carries without a raise.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_demo_report_shows_the_reactive_fanout_with_the_production_defaults() -> Result<()> {
    let _alone = crate::ONE_RUN.lock().await;
    let dir = tempfile::tempdir()?;
    let scenario = Scenario {
        planned_fanout: false,
        ingest: IngestTuning {
            max_future_secs: 300,
            cache_ttl_secs: 60,
            cooldown_secs: 2,
            slack_secs: 5,
            jitter_secs: 1,
            blocks: false,
            ..scenario(dir.path())?.ingest
        },
        ..scenario(dir.path())?
    };
    let report = demo::run(&scenario).await?;
    let text = demo::report_text(&report);
    let (naive, adaptive) = (&report.naive, &report.adaptive);
    assert!(
        adaptive.runner.fanout_raises >= 1,
        "the ingest raised:\n{text}"
    );
    assert!(
        adaptive.fanout.first().is_some_and(|e| e.k > 1),
        "the API lists the raised fan-out:\n{text}"
    );
    assert!(
        adaptive.throttled() < naive.throttled(),
        "the raised fan-out takes the load the naive key cannot:\n{text}"
    );
    every_message_is_accounted_for(&report, &text);
    assert_eq!(
        adaptive.written, adaptive.sent.sent.readings,
        "every valid reading of the adaptive run is written:\n{text}"
    );
    assert_eq!(
        adaptive.dlq,
        adaptive.sent.sent.malformed_total(),
        "the DLQ holds exactly the malformed messages:\n{text}"
    );
    println!("{text}");
    Ok(())
}
