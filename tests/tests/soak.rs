//! The soak of `cargo xtask soak` (docs/reliability.md scenarios 14, 16 and 45), smaller: about 2,000 messages
//! through capacity-proxy in front of dynalite (30% unprocessed, 5% HTTP 500, 10 ms
//! latency, 4 WCU/s per key so the hot devices throttle and fan out), SQS on moto, and
//! `shardline-local run-local` SIGKILLed three times; the table holds exactly the valid
//! readings, the DLQ exactly the malformed messages, each message the publisher had
//! accepted was received and stored or dead-lettered, and the API reader saw only
//! sorted, in-range, unique pages.

use std::path::PathBuf;

use anyhow::{Context as _, Result, bail};
use shardline_local::soak::{SoakConfig, run};
use tokio::sync::Mutex;

/// One soak at a time: each runs moto, dynalite, a proxy, run-local, a publisher and a
/// reader, and two at once on two cores leave the reader's requests short of their time.
static ONE_SOAK: Mutex<()> = Mutex::const_new(());

/// Builds the `shardline-local` binary into this test's target directory (a dependency's
/// binary is not built for a test of another package) and returns its path.
fn shardline_binary(root: &std::path::Path) -> Result<PathBuf> {
    let target = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .context("CARGO_TARGET_TMPDIR has no parent")?
        .to_path_buf();
    let status = stand_in::cargo_command(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .args([
            "build",
            "--quiet",
            "--package",
            "shardline-local",
            "--bin",
            "shardline-local",
        ])
        .env("CARGO_TARGET_DIR", &target)
        .current_dir(root)
        .status()
        .context("running cargo build for the shardline-local binary")?;
    if !status.success() {
        bail!("building the shardline-local binary failed: {status}");
    }
    let bin = target.join("debug").join("shardline-local");
    if !bin.is_file() {
        bail!("{} was not built", bin.display());
    }
    Ok(bin)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn soak_with_faults_and_three_kills() -> Result<()> {
    let _alone = ONE_SOAK.lock().await;
    let root = stand_in::repo_root()?;
    let bin = shardline_binary(&root)?;
    let config = SoakConfig::new(root, bin, 2_000, 3, 7);
    let report = run(&config).await?;
    println!("{}", report.text());
    assert!(report.violations.is_empty(), "{}", report.text());
    assert_eq!(report.messages_sent, 2_000);
    assert_eq!(report.kills, 3);
    assert_eq!(report.starts, 4);
    assert!(
        report.malformed_sent > 0,
        "the plan holds malformed messages"
    );
    // Every valid reading is stored, under one sort key (the report's violations say
    // otherwise). Copies beyond the first come only from a kill between a write and the
    // queue's delete, then a redelivery after a raise (the proxy injects its faults
    // before it forwards a call, so they apply nothing), and reads answer
    // each reading once, which the paged read of the hot device checks.
    assert_eq!(report.table_distinct, report.readings_sent);
    messages_are_accounted_for(&report);
    assert_eq!(
        report.dlq_messages,
        report.malformed_sent + report.dlq_repeated_copies
    );
    assert_eq!(report.dlq_malformed, report.malformed_sent);
    assert_eq!(report.dlq_with_reason, report.dlq_messages);
    assert!(report.proxy_unprocessed_items > 0, "faults were injected");
    assert!(report.proxy_errors > 0, "HTTP 500s were injected");
    assert!(
        report.proxy_throttled.values().sum::<u64>() > 0 && report.fanout_raises > 0,
        "the hot devices' keys throttled and their fan-out grew"
    );
    assert!(
        report.reader.pages > 0,
        "the reader paged the API during the soak"
    );
    assert_eq!(report.hot_device_read, report.hot_device_table);
    Ok(())
}

/// The soak in block mode (issue 34, scenario 28): messages of 10 readings, so the hot
/// device's messages are written as blocks by the default layout, with the same faults
/// and kills: every valid reading stored, none answered twice.
///
/// Run alone, after the other tests, by `cargo xtask test` (its step "soak in block
/// mode, alone"): a raised device's read is two Queries a key (the readings' and the
/// blocks' lanes), and beside the other end-to-end tests on two cores a read of the hot
/// device could run out of its time budget (a 400 the soak counts as a violation; no
/// reading lost or doubled). On moto, which scans the whole table for every Query, it
/// once took 1,043 s on CI; its DynamoDB is now dynalite, which reads a key's range as
/// DynamoDB does. There its reader, which used to finish the range it was paging after
/// the queue drained, once paged a raised device at a small limit for four and a half
/// minutes more; it now leaves its range once stopped. Alone it takes about a minute.
/// `cargo test -p e2e --test e2e -- --ignored soak_in_block_mode` runs it by hand,
/// `cargo xtask soak --batch 10` for longer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "run alone, after the other tests, by cargo xtask test"]
async fn soak_in_block_mode_with_faults_and_two_kills() -> Result<()> {
    let _alone = ONE_SOAK.lock().await;
    let root = stand_in::repo_root()?;
    let bin = shardline_binary(&root)?;
    let mut config = SoakConfig::new(root, bin, 200, 2, 11);
    config.batch = 10;
    let report = run(&config).await?;
    println!("{}", report.text());
    assert!(report.violations.is_empty(), "{}", report.text());
    assert_eq!(report.kills, 2);
    assert!(
        report.table_blocks > 0,
        "blocks were written:\n{}",
        report.text()
    );
    assert!(report.readings_sent > 1_500, "{}", report.text());
    assert_eq!(report.table_distinct, report.readings_sent);
    messages_are_accounted_for(&report);
    assert_eq!(report.dlq_malformed, report.malformed_sent);
    assert_eq!(report.hot_device_read, report.hot_device_table);
    Ok(())
}

/// The soak in slab mode (issue 53): `SLABS=on`, one reading a message from 300
/// devices at 20 readings/s, with the same faults and two kills. Every valid reading is
/// stored (most in slabs; one a redelivery brought past `SLAB_ACCEPT_SECS` in its
/// device's own items), every message accounted for, the audit's tiers count the same
/// readings as the soak's scan (a slab written twice after a kill is a copy both count),
/// and every device's read through the query API answers each reading sent to it once,
/// slab-held ones included. A window closes about 70 s after its end (accept, the
/// child's timeout, the margin) and run-local's sealer compacts it then; the soak ends
/// about then, so its reads are mostly of open windows' slabs, and no hour is sealed.
///
/// Run alone by `cargo xtask test` (its step "soak in slab mode, alone"), about a
/// minute and a half: `cargo test -p e2e --test e2e -- --ignored soak_in_slab_mode`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "run alone, after the other tests, by cargo xtask test"]
async fn soak_in_slab_mode_with_faults_and_two_kills() -> Result<()> {
    let _alone = ONE_SOAK.lock().await;
    let root = stand_in::repo_root()?;
    let bin = shardline_binary(&root)?;
    let config = SoakConfig::new(root, bin, 800, 2, 11).in_slab_mode();
    let report = run(&config).await?;
    println!("{}", report.text());
    assert!(report.violations.is_empty(), "{}", report.text());
    assert_eq!(report.kills, 2);
    assert_eq!(report.table_distinct, report.readings_sent);
    messages_are_accounted_for(&report);
    assert_eq!(report.dlq_malformed, report.malformed_sent);
    let slabs = &report.slabs;
    assert!(
        slabs.slab_items > 0 && slabs.only_in_slabs > 0,
        "{}",
        report.text()
    );
    assert_eq!(slabs.audit.readings, report.readings_sent);
    // The soak's own count takes a run and the slabs it compacted for two copies; the
    // audit counts them once, so it equals the soak's only while no window is compacted.
    if slabs.run_items == 0 {
        assert_eq!(slabs.audit.extra_copies, report.extra_copies);
    } else {
        assert!(
            slabs.audit.extra_copies <= report.extra_copies,
            "{}",
            report.text()
        );
    }
    assert!(slabs.devices_read > 200, "{}", report.text());
    assert_eq!(slabs.readings_read, report.readings_sent);
    assert!(slabs.read_only_in_slabs > 0, "{}", report.text());
    Ok(())
}

/// Each message the publisher had accepted was received by some run of run-local (its
/// received log, appended across the kills) and stored or dead-lettered: none is
/// missing, and none is put down to the stand-in (scenario 45). The table it was stored
/// in is dynalite's, which reads a key's range as DynamoDB does (moto scans the whole
/// table for every Query).
fn messages_are_accounted_for(report: &shardline_local::soak::Report) {
    assert!(
        report.dynamodb.starts_with("dynalite "),
        "{}",
        report.text()
    );
    let accounting = &report.accounting;
    assert_eq!(
        accounting.accepted,
        report.messages_sent,
        "{}",
        report.text()
    );
    assert_eq!(
        (accounting.stored, accounting.dead_lettered),
        (report.valid_messages, report.malformed_sent),
        "{}",
        report.text()
    );
    assert!(accounting.losses().is_empty(), "{}", report.text());
}
