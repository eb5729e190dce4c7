//! Integration tests of `ingest`, one binary (scenario numbers from docs/reliability.md).

mod blocks;
mod front_door;
mod grouping;
mod handler;
mod late;
mod marshal;
mod moto;
mod moto_refusals;
mod refusals;
mod slabs;
mod support;
