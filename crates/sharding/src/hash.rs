//! The stable shard hash, version 1.
//!
//! `stable_hash(s)` = the first 8 bytes of SHA-256 over the UTF-8 bytes of `s`, read as a
//! big-endian `u64`; `shard_index(s, n)` = `stable_hash(s) % n`. Every key format in this
//! crate uses it, and `testdata/vectors.json` pins it for other languages. Changing it would
//! move every existing reading to another key, so a new function gets a new version name.

use std::num::NonZeroU32;

use sha2::{Digest, Sha256};

/// Name of the hash every key of this crate is built with.
pub const HASH_VERSION: &str = "shardline-hash-v1";

/// First 8 bytes, big-endian, of SHA-256 over the UTF-8 bytes of `input`.
#[must_use]
pub fn stable_hash(input: &str) -> u64 {
    let digest = Sha256::digest(input.as_bytes());
    let mut head = [0u8; 8];
    head.copy_from_slice(&digest[..8]);
    u64::from_be_bytes(head)
}

/// `stable_hash(input) % n`, a shard index in `[0, n)`.
#[must_use]
pub fn shard_index(input: &str, n: NonZeroU32) -> u32 {
    let index = stable_hash(input) % u64::from(n.get());
    // The remainder of a division by a u32 always fits a u32.
    u32::try_from(index).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(input: &str, expected_hash: u64) {
        assert_eq!(stable_hash(input), expected_hash, "input {input:?}");
    }

    #[test]
    fn known_values() {
        // SHA-256("") = e3b0c44298fc1c14...
        check("", 0xe3b0_c442_98fc_1c14);
        // SHA-256("abc") = ba7816bf8f01cfea...
        check("abc", 0xba78_16bf_8f01_cfea);
    }

    #[test]
    fn index_is_below_n() {
        let n = NonZeroU32::new(7).expect("7 is not zero");
        for i in 0..1000 {
            assert!(shard_index(&format!("dev-{i}"), n) < 7);
        }
        assert_eq!(shard_index("anything", NonZeroU32::MIN), 0);
    }
}
