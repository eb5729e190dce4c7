//! What the soak holds the pipeline to once the queue drained: the table against the
//! manifest (every valid reading, under one sort key, nothing else), the final paged
//! read of the hot device against the table (in slab mode: of every device against the
//! manifest, `slabs`), and the DLQ against the manifest (every malformed message, with
//! its reason, nothing else).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::SocketAddr;
use std::path::Path;

use aws_sdk_dynamodb::types::AttributeValue;
use tokio::process::Child;

use super::child::ChildSpec;
use super::reader::read_all;
use super::services::Services;
use super::slabs;
use super::{HOT_DEVICE, Report, truncate};
use crate::accounting::Accounting;
use crate::publish::{Manifest, ReadingId};
use crate::run_local::{self, DeadLetterCopy};

/// Per reading (device, event id), the sort key of each stored copy.
type Copies = HashMap<(String, String), Vec<String>>;

/// Checks the table, the API and the DLQ against the manifest at `manifest_path`, with
/// `seen` (what the reader was shown) and whether the queue `drained`. The last
/// run-local is stopped (for its counters) once the API's final read is done: of the
/// hot device, or in slab mode (`report.slab_mode`) of every device, after the table's
/// tiers are counted.
pub(super) async fn verify(
    services: &Services,
    spec: &ChildSpec,
    child: Child,
    manifest_path: &Path,
    (seen, drained): (&BTreeSet<(String, String)>, bool),
    report: &mut Report,
) -> anyhow::Result<()> {
    let manifest = Manifest::read(manifest_path)?;
    let (table, counts, blocks) =
        scan_readings(&services.dynamo, &services.stack.table_name).await?;
    report.table_blocks = blocks;
    // The final, complete reads while run-local still serves.
    let read_start = std::time::Instant::now();
    if report.slab_mode {
        let only_in_slabs = slabs::tiers(
            &services.dynamo,
            &services.stack.table_name,
            counts.len() as u64,
            report,
        )
        .await?;
        slabs::read_fleet(spec.query, &manifest, &only_in_slabs, report).await;
    } else {
        let expected_hot: Vec<&ReadingId> = manifest
            .readings
            .iter()
            .filter(|r| r.device_id == HOT_DEVICE)
            .collect();
        let hot_in_table: BTreeSet<(i64, String)> = table
            .iter()
            .filter(|r| r.device_id == HOT_DEVICE)
            .map(|r| (r.ts_ms, r.event_id.clone()))
            .collect();
        report.hot_device_table = hot_in_table.len() as u64;
        check_hot_device_read(report, spec.query, &expected_hot, &hot_in_table, drained).await;
    }
    report.final_read_secs = read_start.elapsed().as_secs_f64();

    // Stop the last run-local gracefully to get its counters.
    report.last_run_local = spec.stop(child, report.starts - 1).await;
    report.record_proxy(&services.proxy.stats());

    check_table(report, &manifest, &table, &counts, seen);

    let dlq = run_local::drain_dlq(&services.sqs, &services.stack.dlq_url).await?;
    check_dlq(report, &manifest, &dlq);
    account(
        report,
        &manifest,
        (&spec.received_log, drained),
        &table,
        &dlq,
    )?;

    let (raises, entities) =
        fanout_raises(&services.dynamo, &services.stack.shard_table_name).await?;
    report.fanout_raises = raises;
    report.fanned_out_entities = entities;
    Ok(())
}

/// The final, complete paged read of the hot device through the API at `query`, held
/// to the table scan made just before it.
async fn check_hot_device_read(
    report: &mut Report,
    query: SocketAddr,
    expected_hot: &[&ReadingId],
    hot_in_table: &BTreeSet<(i64, String)>,
    drained: bool,
) {
    if let (Some(from), Some(to)) = (
        expected_hot.iter().map(|r| r.ts_ms).min(),
        expected_hot.iter().map(|r| r.ts_ms).max(),
    ) {
        match read_all(query, HOT_DEVICE, from - 1_000, to + 1_000, 500).await {
            Ok(read) => {
                report.hot_device_read = read.len() as u64;
                let read: Vec<(i64, String)> = read.into_iter().collect();
                let want: Vec<(i64, String)> = hot_in_table.iter().cloned().collect();
                if read != want {
                    // The scan came first: while the queue still held messages, the
                    // read can legitimately hold more than the scan.
                    let scanned: BTreeSet<&(i64, String)> = want.iter().collect();
                    let got: BTreeSet<&(i64, String)> = read.iter().collect();
                    let only_api: Vec<_> = got.difference(&scanned).take(3).collect();
                    let only_table: Vec<_> = scanned.difference(&got).take(3).collect();
                    report.violations.push(format!(
                        "the paged read of {HOT_DEVICE} ({} readings) differs from the table scan before it ({}); only in the read: {only_api:?}; only in the table: {only_table:?}{}",
                        read.len(),
                        want.len(),
                        if drained { "" } else { " (the queue had not drained)" }
                    ));
                }
            }
            Err(e) => report.violations.push(format!(
                "the final paged read of {HOT_DEVICE} failed: {e:#}"
            )),
        }
    } else {
        report
            .violations
            .push(format!("the plan sent no reading of {HOT_DEVICE}"));
    }
}

/// The table against the manifest: every valid reading stored, under one sort key,
/// nothing stored that was not sent, and nothing shown to the reader that is not
/// stored.
fn check_table(
    report: &mut Report,
    manifest: &Manifest,
    table: &BTreeSet<ReadingId>,
    counts: &Copies,
    seen: &BTreeSet<(String, String)>,
) {
    report.table_items = counts.values().map(|sks| sks.len() as u64).sum();
    report.table_distinct = counts.len() as u64;
    // A reading re-keyed after a raise (a crash between its write and the delete, then a
    // redelivery) is stored again by design, once per such crash: a message in flight at
    // two kills can be stored three times; reads answer it once by its sort key. Copies under
    // different sort keys would be two readings to a reader: that is a violation.
    let copies = || {
        counts
            .values()
            .map(|sks| sks.len() as u64)
            .filter(|&n| n > 1)
    };
    report.stored_again = copies().count() as u64;
    report.extra_copies = copies().map(|n| n - 1).sum();
    let split: Vec<_> = counts
        .iter()
        .filter(|(_, sks)| sks.iter().collect::<BTreeSet<_>>().len() > 1)
        .collect();
    let missing: Vec<&ReadingId> = manifest.readings.difference(table).collect();
    let unexpected: Vec<&ReadingId> = table.difference(&manifest.readings).collect();
    report.missing = missing.len() as u64;
    report.unexpected = unexpected.len() as u64;
    if let Some((key, sks)) = split.first() {
        report.violations.push(format!(
            "{} readings stored under different sort keys, e.g. {key:?} as {sks:?}",
            split.len()
        ));
    }
    if !missing.is_empty() {
        report.violations.push(format!(
            "{} valid readings missing from the table, e.g. {:?}",
            missing.len(),
            missing[0]
        ));
    }
    if !unexpected.is_empty() {
        report.violations.push(format!(
            "{} readings in the table that were not sent, e.g. {:?}",
            unexpected.len(),
            unexpected[0]
        ));
    }
    if report.table_distinct != manifest.readings.len() as u64 {
        report.violations.push(format!(
            "{} distinct readings stored, {} valid readings sent",
            report.table_distinct,
            manifest.readings.len()
        ));
    }
    // Everything the reader was shown during the soak is a reading that was sent.
    let strays: Vec<&(String, String)> = seen
        .iter()
        .filter(|key| !counts.contains_key(*key))
        .collect();
    if !strays.is_empty() {
        report.violations.push(format!(
            "the reader was shown {} readings the table does not hold, e.g. {:?}",
            strays.len(),
            strays[0]
        ));
    }
}

/// The DLQ against the manifest: every malformed message there, with its reason, and
/// nothing else.
fn check_dlq(report: &mut Report, manifest: &Manifest, dlq: &[DeadLetterCopy]) {
    report.dlq_messages = dlq.len() as u64;
    let mut sources: BTreeMap<String, u64> = BTreeMap::new();
    for letter in dlq {
        match &letter.source {
            Some(id) => *sources.entry(id.clone()).or_default() += 1,
            None => report.violations.push(format!(
                "a DLQ message without source_message_id (redriven?): {}",
                truncate(&letter.body, 200)
            )),
        }
        if letter.reason.as_deref().is_some_and(|r| !r.is_empty()) {
            report.dlq_with_reason += 1;
        } else {
            report.violations.push(format!(
                "a DLQ message without a reason: {:?}",
                letter.source
            ));
        }
    }
    report.dlq_malformed = sources
        .keys()
        .filter(|id| manifest.malformed.contains_key(*id))
        .count() as u64;
    // The handler sends a refused message to the DLQ and the runner deletes it
    // afterwards; a SIGKILL (or a timed-out DLQ send that did arrive) between the two
    // redelivers it and it is sent again. Standard SQS cannot deduplicate that, so a
    // second copy with the same source_message_id is counted, not a broken promise.
    report.dlq_repeated_copies = sources.values().map(|n| n - 1).sum();
    for id in sources.keys() {
        if !manifest.malformed.contains_key(id) {
            report.violations.push(format!(
                "message {id} in the DLQ was not a malformed message"
            ));
        }
    }
    for id in manifest.malformed.keys() {
        if !sources.contains_key(id) {
            report
                .violations
                .push(format!("malformed message {id} is not in the DLQ"));
        }
    }
}

/// Each message the publisher had accepted, by what became of it: a message the table
/// or the DLQ is missing is either ours (run-local received it) or the stand-in's
/// (it never did), and the report says which, unless the queue had not `drained`.
fn account(
    report: &mut Report,
    manifest: &Manifest,
    (received_log, drained): (&Path, bool),
    table: &BTreeSet<ReadingId>,
    dlq: &[DeadLetterCopy],
) -> anyhow::Result<()> {
    let received = run_local::read_received(received_log)?;
    let dead_lettered: BTreeSet<String> = dlq.iter().filter_map(|l| l.source.clone()).collect();
    let accounting = Accounting::of(manifest, &received, table, &dead_lettered);
    let caveat = if drained {
        ""
    } else {
        " (the queue had not drained: some may still be in it)"
    };
    report.violations.extend(
        accounting
            .losses()
            .into_iter()
            .map(|l| format!("{l}{caveat}")),
    );
    report.accounting = accounting;
    Ok(())
}

/// Every reading of the table (blocks expanded), for each (device, event) the sort key
/// it has alone, once per item holding it, and how many items are blocks.
async fn scan_readings(
    dynamo: &aws_sdk_dynamodb::Client,
    table: &str,
) -> anyhow::Result<(BTreeSet<ReadingId>, Copies, u64)> {
    let mut set = BTreeSet::new();
    let mut counts = Copies::new();
    let mut blocks = 0;
    for item in store::scan::scan_items(dynamo.scan().table_name(table)).await? {
        blocks += u64::from(store::block::is_block(&item));
        // A block's members each count, under the sort key each has alone (what reads
        // identify a reading by): a reading held by a block and by another item is
        // stored twice, under one sort key.
        for reading in store::block::expand(item)? {
            counts
                .entry((reading.device_id.clone(), reading.event_id.clone()))
                .or_default()
                .push(reading.sk.clone());
            set.insert(ReadingId {
                device_id: reading.device_id,
                event_id: reading.event_id,
                ts_ms: reading.ts_ms,
            });
        }
    }
    Ok((set, counts, blocks))
}

/// Fan-out changes in the shard table (entries of every `shard_history`) and the
/// entities having any.
async fn fanout_raises(
    dynamo: &aws_sdk_dynamodb::Client,
    table: &str,
) -> anyhow::Result<(u64, u64)> {
    let (mut raises, mut entities) = (0, 0);
    for item in store::scan::scan_items(dynamo.scan().table_name(table)).await? {
        if let Some(AttributeValue::L(history)) = item.get("shard_history")
            && !history.is_empty()
        {
            raises += history.len() as u64;
            entities += 1;
        }
    }
    Ok((raises, entities))
}
