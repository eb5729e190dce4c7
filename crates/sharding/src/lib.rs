//! Shardline's key-design engine: pure functions from readings, shard epochs and time
//! ranges to DynamoDB keys and read plans. No I/O, no clock, no AWS or Lambda crate: time
//! and randomness come in as parameters.
//!
//! # Stable shard hash (`shardline-hash-v1`)
//!
//! `stable_hash(s)` = first 8 bytes of SHA-256 over the UTF-8 bytes of `s`, big-endian
//! `u64`; `shard_index(s, n) = stable_hash(s) % n`. Test vectors:
//! `crates/sharding/testdata/vectors.json`.
//!
//! # Key formats
//!
//! `{ts}` is the reading's timestamp in fixed-width RFC 3339 UTC with milliseconds
//! (`2026-06-22T01:00:00.000Z`), so string order is time order. Ids (entity, event id) are
//! 1 to [`key::MAX_ID_LEN`] (128) bytes of `[A-Za-z0-9._:-]` ([`key::validate_id`]); `#`
//! separates components and never occurs in one.
//! `k` is the entity's fan-out at the reading's keying time (default: N for `Random`/`Calculated`,
//! 1 for `TimeBucket`), N the table-level shard count in force at `ts`.
//!
//! | strategy | PK | SK |
//! |---|---|---|
//! | `Unsharded` (legacy) | `{entity}` | `{ts}#{event_id}` |
//! | `Random` | `{entity}#{shard_index(event_id, k)}` | `{ts}#{event_id}` |
//! | `Calculated { attribute }` | `{entity}#{shard_index(attribute value, k)}` | `{ts}#{event_id}` |
//! | `TimeBucket { bucket, .. }`, k = 1 | `{s}#{bucket_label}` | `{entity}#{ts}#{event_id}` |
//! | `TimeBucket { sub_shards: Base, .. }`, k >= 2, j < N | `{(s + j) % N}#{bucket_label}` | `{entity}#{ts}#{event_id}` |
//! | `TimeBucket { .. }`, k >= 2, otherwise | `{s}.{j}#{bucket_label}` | `{entity}#{ts}#{event_id}` |
//!
//! with `s = shard_index(entity, N)`, `j = 1 + shard_index(event_id, k)` (sub-shards never
//! share the entity's cold key; under `Base` placement they are the entity's next base
//! shards, which carry other entities too, told apart by the sort key's entity prefix),
//! and bucket labels `2026-06-22T01:05` (minute),
//! `2026-06-22T01` (hour), `2026-06-22` (day), `2026-06` (month). `Random` derives its
//! suffix from the event id, so a redelivery under the same fan-out lands on the same key.
//!
//! **Fan-out keys nest**: every key a reading can have under fan-out k is read under any
//! k' >= k: the cold key plus sub-shards `1..=k'` (`TimeBucket`), suffixes `0..k'`
//! (`Random`, `Calculated`).
//!
//! # Shard epochs
//!
//! The table layout and each entity's fan-out form histories of [`epoch::Epoch`]s.
//! A table change scheduled at `now` takes effect at `now + margin`, with margin > writer
//! cache TTL + maximum accepted future skew of a reading's ts
//! ([`epoch::propagation_margin`]), and a reading takes the layout in force at its own
//! timestamp. A fan-out *raise* takes effect at once: a reading takes the fan-out in
//! force at its keying time (the later of the write and its ts, at most
//! [`epoch::REKEY_HORIZON`] after its ts), so the backlog not yet written spreads too,
//! and a reader reads each instant with the largest fan-out in force over the horizon
//! after it, which holds every k a writer can have used. A fan-out *shrink* takes
//! effect after the margin, like a table change.
//!
//! # Read plans
//!
//! One entity over `[from, to)` ([`read_plan::plan_entity`]): for each table epoch, read
//! fan-out span, bucket and key, one `Query` with `SK BETWEEN lo AND hi`:
//! `{entity}#{from}` .. `{entity}#{to - 1 ms}#~` for `TimeBucket`, `{from}` ..
//! `{to - 1 ms}#~` otherwise (`~` sorts above every id character). Queries on the same PK
//! with touching ranges are joined: a `TimeBucket` entity that was never raised costs one
//! query per bucket. All entities ([`read_plan::plan_all`], `TimeBucket` only): every
//! `{s}#{bucket}` for s in 0..N plus the hot entities' dedicated sub-shard keys, each with a time
//! filter; such a PK is ordered by entity, then time, so the reader merges after
//! buffering. A reading stored twice (written, then redelivered after a raise) has one
//! sort key under both keys: readers de-duplicate by it, keeping the copy written last
//! ([`written`]): a reading sent again with new values replaces the old one.
//!
//! # Merging
//!
//! [`merge::BoundedMerge`] schedules a plan's reads: it says which streams to read a
//! page from and with what `Limit` (each stream's share of the remaining need, read
//! ahead into later buckets by observed density), holds back ties at a time-index
//! page's last millisecond, and emits items in order only when no unread item can
//! precede them. The caller (the query function) does the I/O.
//!
//! [`by_device`] is the merge order of the sealer's read of an hour, device by device:
//! the next device, each key's readings of it, and their order, each once. The caller
//! (`sealer::by_device`) does the I/O.

pub mod backoff;
pub mod block;
pub mod by_device;
pub mod capacity;
pub mod epoch;
pub mod fanout;
pub mod hash;
pub mod key;
pub mod layout;
pub mod merge;
pub mod read_plan;
pub mod slab;
pub mod time;
pub mod written;

pub use backoff::{Backoff, Redelivery};
pub use capacity::{CapacityPlan, PlanInput, PlannerError, plan_capacity};
pub use epoch::{
    Epoch, EpochError, FanoutHistory, REKEY_HORIZON, TableHistory, keying_time, propagation_margin,
};
pub use fanout::{
    FanoutDecision, FanoutPolicy, KeepReason, Raise, ShardMeta, Shrink, Signal, Throttle, decide,
    decide_shrink, needed_fanout,
};
pub use hash::{HASH_VERSION, shard_index, stable_hash};
pub use key::{
    ItemKey, KeyError, ReadingRef, WriteKey, is_metric_name, point_keys, validate_id, write_key,
};
pub use layout::{Layout, Strategy};
pub use merge::{Arrival, BoundedMerge, Order, PageAsk, Step, StreamShape, TimedKey};
pub use read_plan::{KeyQuery, PlanError, ReadPlan, plan_all, plan_entity};
pub use time::{Bucket, BucketSpan, TimeError, TimeRange, Timestamp};
pub use written::{WriteOrder, Written, keep_last};
