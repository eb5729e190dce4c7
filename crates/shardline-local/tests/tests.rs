//! Tests of the `shardline-local` crate, one binary (modules per subcommand).

mod demo;
mod end_to_end;
mod examples;
mod generate;
mod heatmap;
mod template_defaults;

/// One run of the stand-ins at a time: the demo and the end-to-end tests each start
/// moto, dynalite or both, a proxy and a runner, and the demo's figures (every
/// valid reading written within its drain) assume the machine is not shared with
/// another such run. Two at once on two cores left a demo's last batch in flight past
/// its drain.
static ONE_RUN: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
