//! Item 5 under the system allocator, instrumented: the same path as `cost.rs` (context
//! beside it, in the same `cargo xtask bench` run), and the allocations per reading of
//! the whole path and each stage (the counts do not depend on the allocator).
//! Run by `cargo xtask bench`; prints figures, asserts nothing.

use std::alloc::System;

use criterion::{Criterion, criterion_group, criterion_main};
use stats_alloc::{INSTRUMENTED_SYSTEM, Region, StatsAlloc};

#[path = "shared/cost.rs"]
mod shared;

/// Counts every allocation, so the bench can report allocations per reading.
#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

fn cost(c: &mut Criterion) {
    let count = |pass: &dyn Fn()| {
        let region = Region::new(GLOBAL);
        pass();
        let change = region.change();
        change.allocations + change.reallocations
    };
    shared::run(c, "cost_system", Some(&count));
}

criterion_group!(benches, cost);
criterion_main!(benches);
