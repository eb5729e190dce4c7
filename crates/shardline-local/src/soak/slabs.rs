//! The slab mode's own checks: the table by tier as `store::scan` and the audit read it
//! (slabs, runs, devices' own items, and the copies the audit counts), and every
//! device's read through the query API against what was sent to it.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::net::SocketAddr;

use futures::StreamExt as _;
use serde::Serialize;
use shardline::audit::{self, DuplicateReport, Sampled};
use store::scan::{DynamoScan, ScanAttributes, Tier};

use super::Report;
use super::reader::read_all;
use crate::publish::Manifest;

/// Device reads in flight at once in the final read of the fleet.
const READS_IN_FLIGHT: usize = 8;

/// Readings per page of the final read of the fleet.
const PAGE_LIMIT: u32 = 100;

/// The readings table by tier, and the fleet's final read.
#[derive(Debug, Clone, Default, Serialize)]
pub struct SlabFigures {
    /// Slab items, and the distinct readings they hold.
    pub slab_items: u64,
    pub slab_readings: u64,
    /// Run items (compacted windows, markers left out), and the distinct readings they
    /// hold.
    pub run_items: u64,
    pub run_readings: u64,
    /// Distinct readings held by devices' own items (a reading too old for a slab when
    /// it reached the ingest: a kill's redelivery).
    pub own_readings: u64,
    /// Distinct readings only slabs hold.
    pub only_in_slabs: u64,
    /// Readings held more than once as the audit counts them (a run stands for the slabs
    /// it was compacted from).
    pub audit: DuplicateReport,
    /// Devices read through the API at the end, the readings those reads answered, and
    /// those among them only slabs hold.
    pub devices_read: u64,
    pub readings_read: u64,
    pub read_only_in_slabs: u64,
}

impl SlabFigures {
    /// The summary's lines.
    pub(super) fn text(&self) -> String {
        format!(
            "slabs: {} slab items holding {} readings ({} only there), {} run items holding {}, {} readings in devices' own items; audit: {} held, {} distinct, {} held more than once ({} extra copies)\n\
             fleet read: {} devices read through the API, {} readings answered ({} of them only in slabs)",
            self.slab_items,
            self.slab_readings,
            self.only_in_slabs,
            self.run_items,
            self.run_readings,
            self.own_readings,
            self.audit.items,
            self.audit.readings,
            self.audit.duplicated,
            self.audit.extra_copies,
            self.devices_read,
            self.readings_read,
            self.read_only_in_slabs,
        )
    }
}

/// The (device, event id) of each reading only slabs hold.
pub(super) type SlabOnly = HashSet<(String, String)>;

/// Scans the table through `store::scan` into the audit's items, counts them by tier
/// and the copies the audit counts, into `report.slabs`; returns the readings only slabs
/// hold. A slab-mode table without slabs, or an audit that counts other than the
/// `distinct` readings of the soak's own scan, is a violation.
pub(super) async fn tiers(
    dynamo: &aws_sdk_dynamodb::Client,
    table: &str,
    distinct: u64,
    report: &mut Report,
) -> anyhow::Result<SlabOnly> {
    let scan = DynamoScan::new(dynamo.clone(), table);
    let items = audit::scan_table(&scan, &ScanAttributes::readings(), None).await?;
    let figures = &mut report.slabs;
    let (mut slabs, mut runs, mut own) = (HashSet::new(), HashSet::new(), HashSet::new());
    for item in &items {
        let identities = identities(item);
        if identities.is_empty() {
            continue;
        }
        let held = match item.tier {
            Tier::Slab => {
                figures.slab_items += 1;
                &mut slabs
            }
            Tier::Run => {
                figures.run_items += 1;
                &mut runs
            }
            Tier::Own => &mut own,
        };
        held.extend(identities);
    }
    figures.slab_readings = slabs.len() as u64;
    figures.run_readings = runs.len() as u64;
    figures.own_readings = own.len() as u64;
    let only: SlabOnly = slabs
        .iter()
        .filter(|id| !runs.contains(*id) && !own.contains(*id))
        .filter_map(|id| device_and_event(id))
        .collect();
    figures.only_in_slabs = only.len() as u64;
    figures.audit = audit::count_duplicates(&items);
    if figures.slab_items == 0 {
        report
            .violations
            .push("slab mode: the table holds no slab".to_owned());
    }
    if figures.audit.readings != distinct {
        report.violations.push(format!(
            "the audit's scan counts {} distinct readings, the soak's {distinct}",
            figures.audit.readings
        ));
    }
    Ok(only)
}

/// The readings an item holds, as the audit names them (`{device}#{ts}#{event id}`).
fn identities(item: &Sampled) -> Vec<String> {
    let Some(sk) = item.sk.as_deref() else {
        return Vec::new();
    };
    let pk = item.write.pk.as_str();
    if item.members.is_empty() {
        audit::reading_identity(pk, sk).into_iter().collect()
    } else {
        item.members
            .iter()
            .filter_map(|member| audit::reading_identity(pk, member))
            .collect()
    }
}

/// The device and event id of a reading's identity `{device}#{ts}#{event id}`.
fn device_and_event(identity: &str) -> Option<(String, String)> {
    let (device, rest) = identity.split_once('#')?;
    let (_, event) = rest.rsplit_once('#')?;
    Some((device.to_owned(), event.to_owned()))
}

/// Reads every device the manifest sent readings of through the API at `query`, over
/// its readings' span, and holds each read to what was sent: every reading answered,
/// once (the page checks refuse a reading twice), none that was not sent.
pub(super) async fn read_fleet(
    query: SocketAddr,
    manifest: &Manifest,
    only_in_slabs: &SlabOnly,
    report: &mut Report,
) {
    let mut sent: BTreeMap<&str, BTreeSet<(i64, String)>> = BTreeMap::new();
    for r in &manifest.readings {
        sent.entry(r.device_id.as_str())
            .or_default()
            .insert((r.ts_ms, r.event_id.clone()));
    }
    let reads = futures::stream::iter(sent.iter().map(|(device, want)| async move {
        let from = want.first().map_or(0, |(ts, _)| ts - 1_000);
        let to = want.last().map_or(0, |(ts, _)| ts + 1_000);
        (*device, read_all(query, device, from, to, PAGE_LIMIT).await)
    }))
    .buffer_unordered(READS_IN_FLIGHT)
    .collect::<Vec<_>>()
    .await;
    let mut wrong = Vec::new();
    for (device, read) in reads {
        report.slabs.devices_read += 1;
        let read = match read {
            Ok(read) => read,
            Err(e) => {
                wrong.push(format!("the read of {device} failed: {e:#}"));
                continue;
            }
        };
        report.slabs.readings_read += read.len() as u64;
        report.slabs.read_only_in_slabs += read
            .iter()
            .filter(|(_, event)| only_in_slabs.contains(&(device.to_owned(), event.clone())))
            .count() as u64;
        let got: BTreeSet<(i64, String)> = read.into_iter().collect();
        let want = &sent[device];
        if &got != want {
            let missing: Vec<_> = want.difference(&got).take(3).collect();
            let not_sent: Vec<_> = got.difference(want).take(3).collect();
            wrong.push(format!(
                "the read of {device} answered {} readings, {} were sent; not answered: {missing:?}; not sent: {not_sent:?}",
                got.len(),
                want.len()
            ));
        }
    }
    if !wrong.is_empty() {
        report.violations.push(format!(
            "{} of {} device reads differ from what was sent: {}",
            wrong.len(),
            sent.len(),
            wrong.iter().take(3).cloned().collect::<Vec<_>>().join("; ")
        ));
    }
}
