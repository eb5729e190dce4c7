//! The sealer's tests, on the in-memory fakes of `store::memory`.

#[allow(dead_code, unused_imports)]
#[path = "../../query/tests/common.rs"]
mod common;

mod sealer;
