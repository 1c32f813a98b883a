//! A tree of minimums: values by index, the least of them in O(1) and a change in
//! O(log n). The wide victim search keeps its per-node bound in one, a reservation's plan
//! its nodes' earliest steps.

/// Values by index and the least of them, kept up to date in O(log n) per change.
#[derive(Clone, Debug, Default)]
pub(crate) struct MinTree {
    /// Leaves from `width` on; each inner slot the least of its two children.
    slots: Vec<u64>,
    width: usize,
}

impl MinTree {
    pub(crate) fn new(values: &[u64]) -> MinTree {
        let width = values.len().next_power_of_two();
        let mut slots = vec![u64::MAX; 2 * width];
        slots[width..width + values.len()].copy_from_slice(values);
        for i in (1..width).rev() {
            slots[i] = slots[2 * i].min(slots[2 * i + 1]);
        }
        MinTree { slots, width }
    }

    pub(crate) fn min(&self) -> u64 {
        self.slots.get(1).copied().unwrap_or(u64::MAX)
    }

    /// The index of the least value, the lowest index among equals (`None` when every
    /// value is `u64::MAX`): the path down from the root to it, O(log n).
    pub(crate) fn min_index(&self) -> Option<usize> {
        if self.min() == u64::MAX {
            return None;
        }
        let mut slot = 1;
        while slot < self.width {
            slot = if self.slots[2 * slot] <= self.slots[2 * slot + 1] { 2 * slot } else { 2 * slot + 1 };
        }
        Some(slot - self.width)
    }

    /// The values by index (and `u64::MAX` past them, up to a power of two).
    pub(crate) fn leaves(&self) -> &[u64] {
        &self.slots[self.width..]
    }

    /// Sets the value at `index`; returns the one it replaces.
    pub(crate) fn replace(&mut self, index: usize, value: u64) -> u64 {
        let mut i = self.width + index;
        let before = std::mem::replace(&mut self.slots[i], value);
        while i > 1 {
            i /= 2;
            let least = self.slots[2 * i].min(self.slots[2 * i + 1]);
            if self.slots[i] == least {
                // Nothing above depends on more than this slot: it is as it was.
                break;
            }
            self.slots[i] = least;
        }
        before
    }

    /// The indices whose value is at most `bound` (below `u64::MAX`, the padding's value),
    /// ascending, appended to `out`: only the subtrees whose least value is at most `bound`
    /// are entered, so k of n values cost O(k log n).
    pub(crate) fn at_most(&self, bound: u64, out: &mut Vec<usize>) {
        debug_assert!(bound < u64::MAX, "the padding is at u64::MAX");
        if self.min() > bound {
            return;
        }
        // Depth first, the left child first (indices come out ascending), on a stack of
        // slots still to enter: at most two per level, and a level per bit of the width.
        let mut stack = [0usize; 2 * usize::BITS as usize];
        let (mut top, width) = (1, self.width);
        stack[0] = 1;
        while top > 0 {
            top -= 1;
            let slot = stack[top];
            if slot >= width {
                out.push(slot - width);
                continue;
            }
            for child in [2 * slot + 1, 2 * slot] {
                if self.slots[child] <= bound {
                    stack[top] = child;
                    top += 1;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The tree's least value and its index are those of a plain scan after any sequence
    /// of changes, and `replace` returns the value it replaced.
    #[test]
    fn min_tree_tracks_the_least_value() {
        for len in [1usize, 2, 3, 5, 8, 13, 64] {
            let mut values: Vec<u64> = (0..len as u64).map(|i| (i * 7919) % 23).collect();
            let mut tree = MinTree::new(&values);
            let mut seed = 12_345u64 + len as u64;
            for _ in 0..2_000 {
                seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
                let index = (seed >> 33) as usize % len;
                // Small values repeat often, so many changes leave a slot's minimum as it was.
                let value = match (seed >> 20) % 4 {
                    0 => u64::MAX,
                    _ => (seed >> 40) % 10,
                };
                assert_eq!(tree.replace(index, value), values[index]);
                values[index] = value;
                assert_eq!(tree.min(), *values.iter().min().expect("not empty"), "len {len}");
                // The lowest index of the least value, none when every value is the padding's.
                let least = values.iter().enumerate().min_by_key(|(_, v)| **v).filter(|(_, v)| **v < u64::MAX);
                assert_eq!(tree.min_index(), least.map(|(i, _)| i), "len {len}");
            }
        }
    }

    /// `at_most` gives exactly the indices a plain scan finds, ascending, after any
    /// sequence of changes.
    #[test]
    fn at_most_finds_every_value_within_the_bound() {
        for len in [0usize, 1, 2, 3, 5, 8, 13, 64, 100] {
            let mut values: Vec<u64> = (0..len as u64).map(|i| (i * 7919) % 23).collect();
            let mut tree = MinTree::new(&values);
            let mut seed = 99u64 + len as u64;
            for _ in 0..500 {
                seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
                if len > 0 {
                    let index = (seed >> 33) as usize % len;
                    let value = if (seed >> 20).is_multiple_of(4) { u64::MAX } else { (seed >> 40) % 30 };
                    tree.replace(index, value);
                    values[index] = value;
                }
                let bound = (seed >> 12) % 32;
                let mut found = Vec::new();
                tree.at_most(bound, &mut found);
                let expected: Vec<usize> = (0..len).filter(|&i| values[i] <= bound).collect();
                assert_eq!(found, expected, "len {len}, bound {bound}");
            }
        }
    }
}
