//! A seeded xorshift generator for the property tests: the same seed gives
//! the same sequence, so a failing case replays.

pub struct Rng(pub u64);

impl Rng {
    /// The next number below `n` (0 when `n` is 0).
    pub fn next(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n.max(1)
    }
}
