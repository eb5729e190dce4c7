//! End-to-end tests: each starts its own stand-in on a free loopback port.

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
