//! The Shardline command line as a library, so `cargo xtask demo` and tests drive the
//! same code the `shardline` binary runs.
//!
//! - [`publish`]: the device simulator (pure generation from a seed, plus the SQS sender);
//! - [`run_local`]: the SQS event source mapping and the query API, in one local process;
//! - [`demo`]: the reference scenario twice (naive vs adaptive layout), one report;
//! - [`fanout`]: a known-hot device's fan-out, scheduled ahead of its load;
//! - [`audit`]: partition-key audit of a key sample or a table scan;
//! - [`heatmap`]: per-key WCU over time as a PNG, from `capacity-proxy --heat-csv`;
//! - [`provision`]: the template's tables and queues on a local stand-in (`cargo xtask local up`);
//! - [`soak`]: the pipeline under injected faults and SIGKILLs, checked against the manifest;
//! - [`env`]: the `.local/stack.env` file and SDK configuration shared by all of them.

pub mod audit;
pub mod demo;
pub mod env;
pub mod fanout;
pub mod heatmap;
pub mod provision;
pub mod publish;
pub mod run_local;
pub mod soak;
