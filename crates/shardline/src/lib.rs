//! The operator's command line for a deployed Shardline table, as a library so tests
//! drive the same code the `shardline` binary runs. It talks to AWS (or any endpoint
//! given) with the SDK's default credential chain, and links nothing of the local
//! harness (`shardline-local`).
//!
//! - [`fanout`]: a known-hot device's fan-out, scheduled ahead of its load;
//! - [`audit`]: partition-key audit of a key sample or a table scan;
//! - [`cost`]: what a fleet costs on AWS a month, by service and line item;
//! - [`seal`]: the derived items of a range of hours rebuilt from the readings;
//! - [`env`]: the stack's variables (environment over an env file) and SDK configuration,
//!   shared with the local harness.
//!
//! `shardline plan` (the capacity planner's front end) lives in the binary.

// The default credential chain with SSO makes `aws_config::load`'s future deeper than
// the default limit allows, where `fanout::schedule` lays it out.
#![recursion_limit = "256"]

pub mod audit;
pub mod blocks;
pub mod cost;
pub mod env;
pub mod fanout;
pub mod seal;
pub mod slabs;
