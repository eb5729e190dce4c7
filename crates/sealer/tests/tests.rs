//! The sealer's tests, on the in-memory fakes of `store::memory`, and on dynalite
//! (`on_dynalite`).
#![allow(
    clippy::unwrap_used,
    reason = "test code: a failed unwrap is a failed test"
)]

#[allow(dead_code, unused_imports)]
#[path = "../../query/tests/common.rs"]
mod common;

mod by_device;
mod compact;
mod horizon;
mod layouts;
mod limits;
mod on_dynalite;
mod recount;
mod scale;
mod sealer;
