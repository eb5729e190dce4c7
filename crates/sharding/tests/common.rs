//! Helpers shared by the test modules.

use std::num::NonZeroU32;

use sharding::Timestamp;

pub fn ts(s: &str) -> Timestamp {
    s.parse().expect("valid timestamp")
}

pub fn nz(n: u32) -> NonZeroU32 {
    NonZeroU32::new(n).expect("non-zero")
}

/// Path of a file relative to the crate.
pub fn crate_path(rel: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(rel)
}
