//! Integration tests of `store`, one binary (scenario numbers from docs/reliability.md).

mod batch_memory;
mod batch_mock;
mod block;
mod chunking;
mod decimal;
mod directory_hot;
mod directory_memory;
mod emulators;
mod pack;
mod rollup_dynalite;
mod slab;
mod support;
