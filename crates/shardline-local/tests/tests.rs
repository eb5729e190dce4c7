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
/// another such run.
///
/// A valid reading CI once found unwritten with the queue empty (the "rare loss of a
/// last batch") was moto's: its DeleteMessage replaced the queue's list without the
/// lock SendMessage holds, so a message sent while the runner deleted others vanished
/// after SendMessage had returned its id. The stand-in's launcher closes that race
/// (`infra/local/moto_launch.py`), and the demo names each message the publisher had
/// accepted and run-local never received.
static ONE_RUN: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
