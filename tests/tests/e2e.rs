//! End-to-end tests: each starts its own stand-in on a free loopback port.

// The query service's futures, awaited in process by the blocks test, are deep types.
#![recursion_limit = "256"]

mod blocks;
mod harness;
mod iam;
mod ingest;
mod item_size;
mod lambda;
mod soak;
mod stand_in;
mod template;
mod tidy;
