//! The local stand-in for the AWS services Shardline uses.
//!
//! One library serves `cargo xtask local ...` and the tests alike:
//! - [`repo_root`] finds the workspace root (the directory holding `template.yaml`);
//! - [`ensure_venv`] / [`ensure_dynalite`] install the pinned tools into `.local/`;
//! - [`Moto`] / [`Dynalite`] run a server on a free loopback port, stopped on drop
//!   or detached with a pid file ([`pids`]) for `cargo xtask local down`;
//! - [`provision`] creates the tables and queues declared in `template.yaml`, so local
//!   and cloud share one source of truth, and returns a [`Stack`];
//! - [`TestStack`] does all of that for one test on a private port.

mod install;
pub mod pids;
mod root;
mod server;

pub use install::{NodeTools, Venv, ensure_dynalite, ensure_venv};
pub use root::{repo_root, repo_root_from};
pub use server::{Dynalite, Moto, free_loopback_port};
