//! Integration tests of the sharding crate.
