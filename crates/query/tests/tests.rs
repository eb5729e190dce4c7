//! Query service tests: one binary, one module per concern.
#![allow(
    clippy::unwrap_used,
    reason = "test code: a failed unwrap is a failed test"
)]

mod blocks;
mod budget;
mod common;
mod cursor;
mod duplicates;
mod engine;
mod events;
mod fuzz;
mod latest;
mod latest_sealed;
mod model;
mod on_dynalite;
mod on_moto;
mod openapi;
mod params;
mod resent;
mod rollups;
mod scope;
mod sealed;
mod sealed_month;
mod series;
mod slabs;
mod stats;
