//! The local stand-in for the AWS services Shardline uses.
//!
//! One library serves `cargo xtask local ...` and the tests alike:
//! - [`repo_root`] finds the workspace root (the directory holding `template.yaml`);
//! - [`ensure_venv`] / [`ensure_dynalite`] install the pinned tools into `.local/`;
//! - [`Moto`] / [`Dynalite`] run a server on a free loopback port, stopped on drop
//!   or detached with a pid file ([`pids`]) for `cargo xtask local down`;
//! - [`provision`] creates the tables and queues declared in `template.yaml`, so local
//!   and cloud share one source of truth, and returns a [`Stack`];
//! - [`TestStack`] does all of that for one test on a private port;
//! - [`SqsRequests`] reads the SQS requests the launcher's moto answered, as billed;
//! - [`cargo_command`] runs cargo from a process cargo started, and [`LambdaWatch`]
//!   serves a function under `cargo lambda watch`.

//!
//! Creating resources and building SDK clients needs the AWS SDK, so it sits behind the
//! `provision` feature ([`provision`], [`sdk_config`], [`TestStack`]); without it the
//! crate installs, starts and stops servers and reads a stack, which is all `xtask`
//! needs, and `xtask` builds in seconds.

mod install;
pub mod pids;
#[cfg(feature = "provision")]
mod provision;
mod root;
mod server;
mod sqs_requests;
mod stack;
pub mod template;
#[cfg(feature = "provision")]
mod test_stack;
mod watch;

pub use install::{NodeTools, Venv, ensure_deploy_venv, ensure_dynalite, ensure_venv};
#[cfg(feature = "provision")]
pub use provision::{
    create_pk_sk_table, dynamodb_client_without_retries, provision, provision_tables,
    provision_tables_with, provision_with, sdk_config, time_index,
};
pub use root::{repo_root, repo_root_from};
pub use server::{Dynalite, MOTO_LAUNCHER, Moto, Service, free_loopback_port};
pub use sqs_requests::{ActionCount, SQS_REQUESTS_PATH, SqsRequests};
pub use stack::{
    Backend, DUMMY_ACCESS_KEY_ID, DUMMY_SECRET_ACCESS_KEY, LOCAL_REGION, Stack, Tables,
    read_env_file, write_env_file,
};
#[cfg(feature = "provision")]
pub use test_stack::TestStack;
pub use watch::{LambdaWatch, WatchSpec, cargo_command};
