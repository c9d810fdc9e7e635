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
            self.add(tail_word(rest));
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

/// The 1 to 7 bytes of `rest` as a little-endian word padded with zeros,
/// the word a copy into a zeroed `[u8; 8]` gives, read with fixed-size
/// loads: a copy of variable length is a `memcpy` call, which cost more
/// than the rest of hashing a short name (most names here are short).
fn tail_word(rest: &[u8]) -> u64 {
    let n = rest.len();
    let byte = |i: usize| u64::from(rest.get(i).copied().unwrap_or(0));
    let word32 = |i: usize| {
        let b = |k: usize| rest.get(i + k).copied().unwrap_or(0);
        u64::from(u32::from_le_bytes([b(0), b(1), b(2), b(3)]))
    };
    if n >= 4 {
        // Bytes 0..4 and n-4..n: together all of them; where they overlap
        // they agree.
        word32(0) | word32(n - 4) << ((n - 4) * 8)
    } else {
        // n is 1, 2 or 3: bytes 0, n/2 and n-1 are all of them.
        byte(0) | byte(n / 2) << (n / 2 * 8) | byte(n - 1) << ((n - 1) * 8)
    }
}

/// The hasher builder for `HashMap<K, V, Fx>`.
pub(crate) type Fx = BuildHasherDefault<FxHasher>;

pub(crate) type FxMap<K, V> = HashMap<K, V, Fx>;

/// String equality for hot paths and map keys that never hands `memcmp`
/// an empty string. An empty `String` points at a dangling address, and
/// glibc's AVX-512 `memcmp` reads it with a masked load whose fault
/// suppression costs about 90 ns (measured), 30 times a short compare: a
/// derived `Eq` on keys holding empty names (no GPU type, the default QOS)
/// made such compares a fifth of a pass's time.
pub(crate) fn same_str(a: &str, b: &str) -> bool {
    a.len() == b.len() && (a.is_empty() || a.as_ptr() == b.as_ptr() || a == b)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The fixed-size loads give the zero-padded copy's word at every
    /// length, so hashes (and map orders) are what they were.
    #[test]
    fn tail_word_is_the_zero_padded_bytes() {
        let bytes = [0x11u8, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77];
        for n in 1..=7 {
            let mut word = [0u8; 8];
            word[..n].copy_from_slice(&bytes[..n]);
            assert_eq!(
                tail_word(&bytes[..n]),
                u64::from_le_bytes(word),
                "{n} bytes"
            );
        }
    }

    #[test]
    fn same_str_is_string_equality() {
        let empty = String::new();
        assert!(same_str(&empty, ""));
        assert!(same_str("gpu", &String::from("gpu")));
        assert!(!same_str("gpu", "cpu"));
        assert!(!same_str("gpu", ""));
    }
}
