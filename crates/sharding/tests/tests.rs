//! Integration tests of the sharding crate, one binary.

mod block;
mod block_plan;
mod common;
mod fanout;
mod formats;
mod last_written;
mod lifecycle;
mod merge;
mod merge_blocks;
mod planner;
mod props;
mod uniformity;
mod vectors;
