//! Tests of the `shardline` crate, one binary (modules per subcommand).

mod audit;
mod demo;
mod end_to_end;
mod examples;
mod fanout;
mod generate;
mod heatmap;
mod plan;
mod template_defaults;
