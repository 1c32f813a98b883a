//! A fixed pseudo-random sequence for the unit tests' random cases (a 64-bit linear
//! congruential generator, Knuth's MMIX constants): the same seed gives the same cases on
//! every machine, with no dependency.

pub(crate) struct TestRng(u64);

impl TestRng {
    pub(crate) fn new(seed: u64) -> TestRng {
        TestRng(seed)
    }

    /// The next value, below `bound` (from the state's high bits: the low ones cycle).
    pub(crate) fn below(&mut self, bound: u64) -> u64 {
        self.0 = self.0.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 33) % bound
    }
}
