//! Tests of the `shardline-local` crate, one binary (modules per subcommand).

mod demo;
mod end_to_end;
mod examples;
mod generate;
mod heatmap;
mod template_defaults;
