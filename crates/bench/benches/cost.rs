//! Item 5: CPU cost per reading of the ingest path without I/O: parse and validate the
//! message body, compute the key, marshal the item (the typed encoder) and size it; the
//! same marshal through `serde_dynamo` beside it, and a fixed reference workload in the
//! same run, which the report gives the path's figures as ratios to. Under the
//! allocator the ingest binary links (`ingest::Allocator`), so these are the figures
//! held to the goal;
//! `cost_system.rs` runs the same under the system allocator and counts allocations.
//! Run by `cargo xtask bench`; prints figures, asserts nothing.

use criterion::{Criterion, criterion_group, criterion_main};

#[path = "shared/cost.rs"]
mod shared;

/// The ingest binary's allocator.
#[global_allocator]
static GLOBAL: ingest::Allocator = ingest::Allocator;

fn cost(c: &mut Criterion) {
    shared::run(c, "cost", None);
}

criterion_group!(benches, cost);
criterion_main!(benches);
