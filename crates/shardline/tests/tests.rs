//! Tests of the `shardline` crate, one binary (modules per subcommand).

mod audience;
mod audit;
mod fanout;
mod plan;
