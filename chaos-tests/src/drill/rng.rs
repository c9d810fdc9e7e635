//! A seeded splitmix64 generator: the drill's only source of randomness,
//! so one `--seed` gives the same workload and fault schedule (the timing
//! of a real cluster still varies from run to run).

#[derive(Debug, Clone)]
pub struct Rng {
    state: u64,
}

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng { state: seed }
    }

    /// A generator for stream `n` of the same seed (one per submitter and
    /// one for faults), so adding a submitter does not shift the others.
    pub fn fork(seed: u64, n: u64) -> Rng {
        let mut base = Rng::new(seed ^ n.wrapping_mul(0xA076_1D64_78BD_642F));
        Rng::new(base.next_u64())
    }

    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `lo..=hi` (`lo` when `hi < lo`).
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        if hi <= lo {
            return lo;
        }
        lo + self.next_u64() % (hi - lo + 1)
    }

    /// True with probability `percent` / 100.
    pub fn chance(&mut self, percent: u64) -> bool {
        self.next_u64() % 100 < percent
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_stream_and_forks_differ() {
        let a: Vec<u64> = (0..5).map(|_| Rng::new(7).next_u64()).collect();
        assert!(a.windows(2).all(|w| w[0] == w[1]));
        let mut x = Rng::fork(7, 1);
        let mut y = Rng::fork(7, 2);
        assert_ne!(x.next_u64(), y.next_u64());
        let mut r = Rng::new(3);
        for _ in 0..1000 {
            let v = r.range(2, 5);
            assert!((2..=5).contains(&v));
        }
        assert_eq!(r.range(4, 4), 4);
    }
}
