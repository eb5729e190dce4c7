//! Tests of the `shardline` crate, one binary (modules per subcommand).

mod audience;
mod audit;
mod blocks;
mod cost;
mod fanout;
mod plan;
mod seal;
mod slabs;
mod unsealable;
