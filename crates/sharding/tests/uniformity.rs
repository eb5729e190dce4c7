//! Property 5: the shard hash is uniform.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use sharding::stable_hash;

/// Upper 99.9% quantiles of the chi-square distribution, by degrees of freedom
/// (df = N - 1). Computed from the regularized incomplete gamma function; the first
/// three agree with standard tables.
const CRITICAL_999: [(u32, f64); 4] = [(2, 10.828), (10, 27.877), (16, 37.697), (200, 266.386)];

#[test]
fn shard_counts_are_uniform_over_random_ids() {
    let mut rng = ChaCha8Rng::seed_from_u64(20_260_622);
    const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789-";
    let hashes: Vec<u64> = (0..100_000)
        .map(|_| {
            let len = rng.random_range(4..=24);
            let id: String = (0..len)
                .map(|_| char::from(ALPHABET[rng.random_range(0..ALPHABET.len())]))
                .collect();
            stable_hash(&id)
        })
        .collect();
    for (n, critical) in CRITICAL_999 {
        let mut counts = vec![0u64; n as usize];
        for h in &hashes {
            counts[(h % u64::from(n)) as usize] += 1;
        }
        let expected = hashes.len() as f64 / f64::from(n);
        let chi2: f64 = counts
            .iter()
            .map(|&c| (c as f64 - expected).powi(2) / expected)
            .sum();
        assert!(
            chi2 < critical,
            "N = {n}: chi-square {chi2:.2} >= {critical} (counts {counts:?})"
        );
    }
}
