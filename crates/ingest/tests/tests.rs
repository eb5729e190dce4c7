//! Integration tests of `ingest`, one binary (scenario numbers from RELIABILITY.md).

mod handler;
mod marshal;
mod moto;
mod support;
