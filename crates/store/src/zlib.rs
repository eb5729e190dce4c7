//! zlib (RFC 1950) as the store compresses what it packs: a slab's or run's columns
//! (`store::slab`) and a derived item's long body (`store::rollup::stored`). A reader
//! inflates at most a bound the writer kept to, so no stored item can make it hold more.

use std::io::{Read as _, Write as _};

use flate2::Compression;
use flate2::read::ZlibDecoder;
use flate2::write::ZlibEncoder;

/// `bytes` compressed at flate2's default level: the same bytes always make the same
/// stream under one build.
#[must_use]
pub fn compress(bytes: &[u8]) -> Vec<u8> {
    let mut z = ZlibEncoder::new(Vec::with_capacity(bytes.len() / 2), Compression::default());
    // Writing to a vector cannot fail.
    z.write_all(bytes)
        .and_then(|()| z.finish())
        .unwrap_or_default()
}

/// The bytes `z` inflates to, at most `max`; or why not, in words that follow the
/// attribute's name: it does not inflate, or inflates to more than `max`.
pub fn inflate(z: &[u8], max: usize) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    ZlibDecoder::new(z)
        .take(max as u64 + 1)
        .read_to_end(&mut out)
        .map_err(|e| format!("does not inflate: {e}"))?;
    if out.len() > max {
        return Err(format!("inflates to more than {max} bytes"));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_is_compressed_inflates_back_within_its_bound_and_no_further() {
        let text = b"{\"m\":[\"21.5\",\"21.5\",\"21.5\"]}".repeat(40);
        let z = compress(&text);
        assert!(z.len() < text.len());
        assert_eq!(inflate(&z, text.len()).unwrap(), text);
        assert!(
            inflate(&z, text.len() - 1)
                .unwrap_err()
                .contains("more than")
        );
        assert!(
            inflate(&[7, 7], 10)
                .unwrap_err()
                .contains("does not inflate")
        );
    }
}
