//! Shardline's local harness as a library, so `cargo xtask` and the tests drive the same
//! code the `shardline-local` binary runs. Everything here runs against a stand-in on
//! loopback (moto, dynalite, the capacity-proxy); the operator's commands for a deployed
//! table are the `shardline` crate, whose stack flags and env file this crate shares.
//!
//! - [`accounting`]: what became of each message the publisher had accepted;
//! - [`publish`]: the device simulator (pure generation from a seed, plus the SQS sender);
//! - [`run_local`]: the SQS event source mapping and the query API, in one local process;
//! - [`demo`]: the reference scenario twice (naive vs adaptive layout), one report;
//! - [`one_reading`]: a one-reading fleet through run-local, its time to readable and write units by tier;
//! - [`heatmap`]: per-key WCU over time as a PNG, from `capacity-proxy --heat-csv`;
//! - [`provision`]: the template's tables and queues on a local stand-in (`cargo xtask local up`);
//! - [`query_api`]: the client of the query HTTP API that the demo, the soak and the tests read through;
//! - [`soak`]: the pipeline under injected faults and SIGKILLs, checked against the manifest.

pub mod accounting;
pub mod demo;
pub mod heatmap;
pub mod one_reading;
pub mod provision;
pub mod publish;
pub mod query_api;
pub mod run_local;
mod signal;
pub mod soak;
