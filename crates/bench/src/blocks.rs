//! Item 8: the write bill of blocks. One device's readings of the demo's shape, a reading
//! every 100 ms, sent 1, 10, 50 and 200 to a message, through the ingest handler with
//! blocks on (a new table's default: a minute, 16 KiB, 1,000 readings) into the
//! capacity-proxy in sink mode: the write units the proxy charged per reading, and the
//! bytes of the items stored per reading (the items as the writer encodes them, sized
//! by DynamoDB's rule: the sink keeps none). The same readings with blocks off are the
//! baseline of the same run.

use std::time::Duration;

use anyhow::{Context, Result};
use capacity_proxy::{Proxy, ProxyConfig};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use sharding::block::BlockLayout;
use sharding::epoch::TableHistory;
use sharding::key::{ReadingRef, write_key};

use crate::common::{self, Gen, T0_MS};
use crate::report::{Results, at_most};

/// Readings per run: 200 messages of 10, 40 of 50, 10 of 200.
const READINGS: usize = 2_000;
/// The goal of each message size, write units per reading (issue 34).
const GOALS: [(usize, f64); 4] = [(1, 1.0), (10, 0.10), (50, 0.04), (200, 0.03)];

/// The device's readings; event ids time-ordered (a UUID whose tail counts, sharing
/// most characters with its neighbours) or `random` (36 characters sharing none).
fn readings(random: bool) -> Vec<Gen> {
    (0..READINGS)
        .map(|i| Gen {
            device: "sensor-alpha-001".to_owned(),
            event: if random {
                let h = (i as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
                let g = h.rotate_left(29).wrapping_mul(0xBF58_476D_1CE4_E5B9);
                format!(
                    "{:08x}-{:04x}-4{:03x}-{:04x}-{:012x}",
                    h >> 32,
                    h & 0xffff,
                    g & 0xfff,
                    (g >> 16) & 0xffff,
                    g >> 16
                )
            } else {
                format!("0190a1b2-c3d4-7e5f-8a9b-{i:012x}")
            },
            ts_ms: T0_MS + 3_600_000 + i as i64 * 100,
            temperature: 15.0 + (i % 200) as f64 / 10.0,
        })
        .collect()
}

/// Write units the proxy charged for `gens` sent `per_message` to a message,
/// `per_event` messages to an event, through the handler configured with `extra`.
async fn charged(
    gens: &[Gen],
    per_message: usize,
    per_event: usize,
    extra: &[(&str, &str)],
) -> Result<f64> {
    let mut config = ProxyConfig::sink();
    config.seed = Some(34);
    let proxy = Proxy::start(config).await?;
    let mut vars = vec![("SHARDS", "8"), ("BUCKET", "hour")];
    vars.extend_from_slice(extra);
    let service = common::service(&proxy.url(), common::ingest_config(&vars)?).await;
    let now = common::ts(2 * 3_600_000)?;
    let messages: Vec<(String, String)> = gens
        .chunks(per_message)
        .enumerate()
        .map(|(i, chunk)| {
            let body =
                serde_json::json!({"readings": chunk.iter().map(Gen::json).collect::<Vec<_>>()});
            (format!("msg-{i:06}"), body.to_string())
        })
        .collect();
    let mut written = 0;
    for (i, batch) in messages.chunks(per_event).enumerate() {
        let event = common::event(batch.iter().cloned());
        let mut rng = ChaCha8Rng::seed_from_u64(i as u64);
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        written += service
            .process(&event, now, deadline, &mut rng)
            .await
            .readings_written;
    }
    anyhow::ensure!(
        written == gens.len() as u64,
        "wrote {written} of {} readings",
        gens.len()
    );
    let wcu: f64 = proxy.stats().wcu_by_table.values().sum();
    proxy.shutdown().await?;
    Ok(wcu / gens.len() as f64)
}

/// Bytes of the items that store `gens` sent `per_event` to an event, per reading, as
/// the writer packs and encodes them under the default block layout (one device's
/// messages of an event packed together).
fn stored_bytes(gens: &[Gen], per_event: usize) -> Result<f64> {
    let table = TableHistory::new(common::hourly(8).with_blocks(BlockLayout::default()));
    let retention = Duration::from_secs(30 * 86_400);
    let mut bytes = 0;
    for chunk in gens.chunks(per_event) {
        let readings: Vec<store::Reading> =
            chunk.iter().map(Gen::reading).collect::<Result<_>>()?;
        let units = store::pack::pack(&readings, &table);
        for members in store::pack::take(readings, &units) {
            let first = members.first().context("a member")?;
            let first_key = write_key(
                &ReadingRef::new(&first.device_id, &first.event_id, first.ts),
                &table,
                &sharding::epoch::FanoutHistory::new(),
                first.ts,
            )?
            .key;
            let key = store::pack::item_key(&members, &first_key);
            bytes += store::pack::encode(&members, &key, retention)?.size;
        }
    }
    Ok(bytes as f64 / gens.len() as f64)
}

pub async fn run(results: &mut Results) -> Result<()> {
    let gens = readings(false);
    let baseline = charged(&gens, 1, 10, &[]).await?;
    results.figure(
        "8",
        "write units per reading, blocks off (today's items), the proxy's charge",
        format!("{baseline:.3}"),
    );
    for (per_message, goal) in GOALS {
        let per_reading = charged(&gens, per_message, 10, &[("BLOCKS", "on")]).await?;
        results.goal(
            "8",
            &format!(
                "write units per reading, blocks on (the default), {per_message} readings a message, 10 messages an event, packed together (one device, a reading every 100 ms, time-ordered ids), the proxy's charge"
            ),
            format!(
                "{per_reading:.3} ({:.1}x fewer than blocks off)",
                baseline / per_reading
            ),
            &format!("<= {goal}"),
            at_most(per_reading, goal),
        );
    }
    // A message of one reading alone of its device in its batch is today's item.
    let alone = charged(&gens, 1, 1, &[("BLOCKS", "on")]).await?;
    results.figure(
        "8",
        "write units per reading, blocks on, 1 reading a message, each message alone in its event (today's item), the proxy's charge",
        format!("{alone:.3}"),
    );
    let bytes = stored_bytes(&gens, 50 * 10)?;
    results.goal(
        "8",
        "bytes stored per reading, blocks on, 50 readings a message, 10 messages an event, time-ordered ids (the items' size by DynamoDB's rule)",
        format!("{bytes:.1}"),
        "<= 40",
        at_most(bytes, 40.0),
    );
    // Ids that share nothing: each member keeps its 36 characters.
    let random = readings(true);
    let per_reading = charged(&random, 50, 10, &[("BLOCKS", "on")]).await?;
    let bytes = stored_bytes(&random, 50 * 10)?;
    results.figure(
        "8",
        "blocks on, 50 readings a message, 10 messages an event, random 36-character ids: write units per reading (the proxy's charge); bytes stored per reading",
        format!("{per_reading:.3}; {bytes:.1}"),
    );
    results.note(
        "8",
        "one device (sensor-alpha-001), 2,000 readings of the demo's shape (two \
         metrics), a reading every 100 ms, sent 1, 10, 50 or 200 to a message, 10 \
         messages to an event (the ingest packs one device's messages of a batch \
         together, so an event of 10 messages of one reading makes one block; one row \
         sends each message alone), through ingest::Ingest::process in process into the \
         capacity-proxy in sink mode; write units as the proxy charged them (its \
         per-table total) over the readings written. Blocks on is the default layout of \
         a new table (a window of a minute, 16 KiB, 1,000 readings); blocks off is the \
         item-a-reading layout of the same run. Event ids are time-ordered (a UUID \
         whose last 12 hex digits count up, so neighbours share 34 characters, stored \
         once in the block's `idp`) except in the last row, where they are 36 \
         characters sharing none. Bytes stored: the items as the writer packs and \
         encodes them (store::pack, store::block), sized by DynamoDB's rule (the sink \
         keeps no items).",
    );
    Ok(())
}
