//! Hashing for ids this process hands out itself (connection ids, match
//! ids): the maps a relay looks up on every datagram by such an id.
//!
//! The standard `HashMap` hashes with SipHash, which keeps an attacker who
//! picks the keys (a source address, a name) from making every key collide.
//! An id counted up by the server is not picked by anyone, so that defence
//! buys nothing there and costs a few percent of a loaded relay's CPU
//! (measured: the schedule's deadline map alone was about 3 %). Keys that
//! come from the network keep the standard hasher.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// A multiplicative hasher (Fibonacci hashing, as in `rustc-hash`): one
/// multiply per integer. Use it only through [`IdMap`], for keys the
/// process assigns itself.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct IdHasher(u64);

/// 2^64 / the golden ratio, odd: multiplying by it maps consecutive ids to
/// well-spread high bits and distinct low bits.
const K: u64 = 0x9e37_79b9_7f4a_7c15;

impl IdHasher {
    const fn add(&mut self, n: u64) {
        self.0 = (self.0.rotate_left(5) ^ n).wrapping_mul(K);
    }
}

impl Hasher for IdHasher {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.add(u64::from(b));
        }
    }

    fn write_u8(&mut self, n: u8) {
        self.add(u64::from(n));
    }

    fn write_u16(&mut self, n: u16) {
        self.add(u64::from(n));
    }

    fn write_u32(&mut self, n: u32) {
        self.add(u64::from(n));
    }

    fn write_u64(&mut self, n: u64) {
        self.add(n);
    }

    fn write_usize(&mut self, n: usize) {
        self.add(n as u64);
    }

    fn finish(&self) -> u64 {
        // The table takes its bucket from the low bits (for one integer, a
        // one-to-one function of the id's low bits: consecutive ids never
        // share a bucket) and its tag from the top 7 (the product's best mixed).
        self.0
    }
}

/// A hash map keyed by ids this process assigned (see the module docs).
pub(crate) type IdMap<K, V> = HashMap<K, V, BuildHasherDefault<IdHasher>>;

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;
    use std::hash::BuildHasher;

    #[test]
    fn consecutive_ids_spread_over_buckets_and_tags() {
        let b = BuildHasherDefault::<IdHasher>::default();
        let hashes: Vec<u64> = (0u32..4096).map(|i| b.hash_one(i)).collect();
        let buckets: HashSet<u64> = hashes.iter().map(|h| h & 4095).collect();
        let tags: HashSet<u64> = hashes.iter().map(|h| h >> 57).collect();
        // Every id its own bucket in a table of 4096, and every tag used.
        assert_eq!(buckets.len(), 4096);
        assert_eq!(tags.len(), 128);
    }

    #[test]
    fn an_id_map_behaves_as_a_map() {
        let mut m: IdMap<u64, u64> = IdMap::default();
        for i in 0..10_000 {
            m.insert(i, i * 2);
        }
        assert_eq!(m.len(), 10_000);
        assert_eq!(m.get(&4321), Some(&8642));
        assert_eq!(m.remove(&4321), Some(8642));
        assert_eq!(m.get(&4321), None);
    }
}
