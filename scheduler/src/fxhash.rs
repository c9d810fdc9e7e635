//! FxHash (rustc's hasher) for the pass's per-job lookups: short keys
//! (names, small ids) hashed up to 100,000 times a pass, where SipHash's
//! flooding resistance buys nothing (the keys are the site's own names and
//! tables rebuilt from trusted state each pass). Deterministic: iteration
//! order of these maps never reaches a result.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

#[derive(Default, Clone, Copy)]
pub(crate) struct FxHasher {
    hash: u64,
}

const FX_SEED: u64 = 0x51_7c_c1_b7_27_22_0a_95;

impl FxHasher {
    #[inline]
    fn add(&mut self, word: u64) {
        self.hash = (self.hash.rotate_left(5) ^ word).wrapping_mul(FX_SEED);
    }
}

impl Hasher for FxHasher {
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for chunk in &mut chunks {
            let mut word = [0u8; 8];
            word.copy_from_slice(chunk);
            self.add(u64::from_le_bytes(word));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut word = [0u8; 8];
            word[..rest.len()].copy_from_slice(rest);
            self.add(u64::from_le_bytes(word));
        }
    }

    fn write_u8(&mut self, v: u8) {
        self.add(u64::from(v));
    }

    fn write_u32(&mut self, v: u32) {
        self.add(u64::from(v));
    }

    fn write_u64(&mut self, v: u64) {
        self.add(v);
    }

    fn write_usize(&mut self, v: usize) {
        self.add(v as u64);
    }

    fn finish(&self) -> u64 {
        // The multiply mixes upwards; tables pick buckets by the low bits,
        // so bring the mixed high bits down (as rustc-hash 2 does).
        self.hash.rotate_left(26)
    }
}

/// The hasher builder for `HashMap<K, V, Fx>`.
pub(crate) type Fx = BuildHasherDefault<FxHasher>;

pub(crate) type FxMap<K, V> = HashMap<K, V, Fx>;
