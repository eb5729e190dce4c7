//! Integration tests of `ingest`, one binary (scenario numbers from RELIABILITY.md).

mod handler;
mod moto;
mod support;
