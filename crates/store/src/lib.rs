//! The AWS adapters of Shardline: the batch writer, the shard directory, range reads
//! and the item model over DynamoDB; the queue port over SQS; a secret's value from
//! Secrets Manager.
//!
//! # Ports
//!
//! The application crates reach AWS through five narrow ports, each with an adapter
//! ([`dynamo`], [`read`], [`scan`], `sqs`) and an in-memory fake in [`memory`] (with injectable
//! faults), and the logic on top of them lives here once, so tests against
//! the fakes exercise the real retry, dedup, cache and fan-out code:
//!
//! | port | adapter | fake | logic on top |
//! |---|---|---|---|
//! | [`batch::BatchTable`]: one `BatchWriteItem` | [`dynamo::DynamoTable`] | [`memory::MemoryTable`] | [`batch::BatchWriter`] |
//! | [`directory::ShardReader`] (reads) and [`directory::ShardStore`] (changes): shard metadata items | [`dynamo::DynamoShards`] | [`memory::MemoryShards`] | [`directory::CachedDirectory`] (the one cache, for readers), [`directory::ShardDirectory`] (writers) |
//! | [`read::ReadingSource`]: one Query page, one item | [`read::DynamoReadingSource`] | [`memory::MemoryReadings`] | `query`'s scatter-gather |
//! | [`scan::TableScan`]: one Scan page of a table | [`scan::DynamoScan`] | [`memory::MemoryScan`] | `shardline audit` |
//! | [`rollup::RollupTable`]: the derived items' conditional writes and reads | [`rollup::dynamo::DynamoRollups`] | [`memory::MemoryRollups`] | the sealer, `query`'s dashboard routes |
//! | [`queue::Queue`]: dead letters, redelivery delays, requeues | `sqs::SqsQueue` (feature `sqs`) | [`memory::MemoryQueue`] | the ingest's last stages |
//!
//! Time comes in as a parameter everywhere below the edge; [`clock::wall_clock`] is
//! the edge. [`sdk::lambda_config`] is the SDK configuration both functions load at
//! their start, and `secrets` (feature `secrets`) reads a secret's value once there
//! (the query's cursor key).
//!
//! # Tables
//!
//! ## Readings table (`TABLE_NAME`)
//!
//! Hash key `PK` (S), range key `SK` (S), both from `sharding::key::write_key`. One item
//! per reading ([`item::ReadingItem`]):
//!
//! | attribute | type | meaning |
//! |---|---|---|
//! | `PK`, `SK` | S | the key under the layout and fan-out in force at `ts` |
//! | `device_id`, `event_id` | S | the reading's identity |
//! | `ts` | S | RFC 3339 UTC with milliseconds, fixed width |
//! | `ts_ms` | N | the same instant in epoch milliseconds |
//! | `metrics` | M of N | 1 to 64 numbers DynamoDB stores (0, or a magnitude from 1e-130 to below 1e126, at most 38 significant digits), as sent ([`decimal`]) |
//! | `tags` | M of S | omitted when empty |
//! | `ttl` | N | epoch seconds, `ts + RETENTION_DAYS`; the table's TTL attribute |
//!
//! ## Shard metadata table (`SHARD_TABLE_NAME`)
//!
//! Hash key `PK` (S), no range key; TTL attribute `ttl`. Four kinds of items:
//!
//! - `PK = "entity#{device_id}"`, one per entity that ever had its own fan-out:
//!   `number_of_shards` (N, the latest k), `last_updated` (N, epoch ms of the last
//!   change, the optimistic-lock token of every raise) and `shard_history` (L of
//!   M `{effective_from: N (epoch ms), k: N}`, oldest first, append-only: entries are
//!   only ever added by `list_append`, so the key of every stored reading stays
//!   computable). Created at k = 1 with `attribute_not_exists(PK)`; raised with a
//!   conditional update on `last_updated`, so of many writers racing only one wins
//!   per cooldown.
//! - `PK = "layout"`: the table-level layout history, `epochs` (L of M `{effective_from:
//!   N, value: M {strategy, shards}}`, the serde form of `sharding::epoch::TableHistory`).
//!   Created from the configuration (`SHARD_STRATEGY`, `BUCKET`, `SHARDS`) effective
//!   from the beginning of time when missing; once stored, the stored history is the
//!   source of truth and the configuration only seeds it.
//!   `hot_through` (N, epoch ms, optional): the hot index lists the entity in every
//!   hour before it in which its readings can carry a raised key (`directory::hot`).
//! - `PK = "hot#{YYYY-MM-DDTHH}"`, the hot index, one item per hour: `entities` (SS), the
//!   entities whose readings stamped in that hour can carry a raised key (from an hour
//!   before a raise until its shrink to 1), which a read plan over every device needs to
//!   find sub-shards; `ttl` (N, epoch s), `RETENTION_DAYS` and an hour after the hour.
//!   Listed by writers before they key such a reading (`ADD`), never shrunk in place.
//! - `PK = "hot"` (tables from before the hot index): `entities` (SS), every entity
//!   raised before it. No longer written; readers still read it with the hour items.

pub mod batch;
pub mod block;
pub mod clock;
pub mod config;
pub mod decimal;
pub mod directory;
pub mod dynamo;
pub mod emf;
pub mod error;
pub mod item;
pub mod memory;
pub mod pack;
pub mod queue;
pub mod read;
pub mod rollup;
pub mod scan;
pub mod sdk;
#[cfg(feature = "secrets")]
pub mod secrets;
pub mod size;
pub mod slab;
#[cfg(feature = "sqs")]
pub mod sqs;
pub mod written;
pub mod zlib;

pub use batch::{
    BatchReport, BatchTable, BatchWriter, Item, ItemTooLarge, Outcome, Put, Remake, SizedItem,
    WriteObserver, WriteStats, WriterConfig,
};
pub use decimal::Decimal;
pub use directory::{
    CachedDirectory, PlanFanoutError, PlannedFanout, ShardDirectory, ShardReader, ShardStore,
};
pub use error::{StoreError, ThrottleKind};
pub use item::{Encoded, Reading, ReadingItem};
pub use sharding::written::WriteOrder;
pub use written::Written;
