//! A hasher for maps keyed by small values the proxy chooses (context ids,
//! shard ids, stats): one multiply per word instead of SipHash's rounds.
//! Never for keys a client can choose (bucket keys): those keep the
//! standard library's keyed hasher, which resists collision floods.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// The constant of rustc's own `FxHasher`: odd, with its bits spread.
const K: u64 = 0xf135_7aea_2e62_a9c5;

/// [`HashMap`] with [`IdHasher`].
pub type IdMap<K, V> = HashMap<K, V, BuildHasherDefault<IdHasher>>;

/// FxHash: each word is added and the state multiplied by [`K`]; the
/// result is rotated so that the table's low index bits depend on the
/// product's high bits.
#[derive(Debug, Default, Clone, Copy)]
pub struct IdHasher(u64);

impl IdHasher {
    fn add(&mut self, word: u64) {
        self.0 = self.0.wrapping_add(word).wrapping_mul(K);
    }
}

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0.rotate_left(26)
    }

    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            for (w, b) in word.iter_mut().zip(chunk) {
                *w = *b;
            }
            self.add(u64::from_le_bytes(word));
        }
    }

    fn write_u8(&mut self, n: u8) {
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

    fn write_isize(&mut self, n: isize) {
        self.add(n as u64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
    fn distinct_ids_land_apart_and_a_map_works() {
        let mut map: IdMap<u32, u32> = IdMap::default();
        for id in 0..1000 {
            map.insert(id, id * 2);
        }
        assert!((0..1000).all(|id| map.get(&id) == Some(&(id * 2))));
        let hash = |n: u32| {
            let mut h = IdHasher::default();
            h.write_u32(n);
            h.finish()
        };
        assert_ne!(hash(1), hash(2));
        assert_ne!(hash(1) & 0x7f, hash(2) & 0x7f);
    }
}
