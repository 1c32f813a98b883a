//! Splitting jobs that are larger than one node into gangs.

use serde::{Deserialize, Serialize};

use super::WorkloadError;

/// How a job asking for more GPUs than one node has is turned into a gang of equal replicas.
///
/// A job with `g` GPUs on nodes with `n` GPUs each becomes `r` replicas of `g / r` GPUs, where
/// `r` is the smallest replica count with `r ≥ ceil(g / n)` and `g % r == 0`. Jobs with
/// `g ≤ n` stay a single replica. With 8-GPU nodes:
///
/// | GPUs | replicas × GPUs | | GPUs | replicas × GPUs |
/// |---|---|---|---|---|
/// | 1..=8 | 1 × g | | 16 | 2 × 8 |
/// | 9 | 3 × 3 | | 17 (prime) | 17 × 1 |
/// | 10 | 2 × 5 | | 18 | 3 × 6 |
/// | 11 (prime) | 11 × 1 | | 20 | 4 × 5 |
/// | 12 | 2 × 6 | | 24 | 3 × 8 |
/// | 14 | 2 × 7 | | 32, 64, 128 | 4 × 8, 8 × 8, 16 × 8 |
///
/// Every replica fits on one node, the gang uses the fewest replicas that can, and the GPU total
/// is unchanged. A prime `g > n` can only be split into `g` single-GPU replicas. (The traces'
/// multi-node sizes are 12, 16, 20, 24, 32, 64 and 128, which all split into ≤ 8-GPU replicas of
/// at least 5 GPUs.)
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GangSplit {
    /// GPUs per node; must be ≥ 1. Defaults to 8.
    pub gpus_per_node: u32,
}

impl Default for GangSplit {
    fn default() -> Self {
        Self { gpus_per_node: 8 }
    }
}

impl GangSplit {
    /// A split for nodes of `gpus_per_node` GPUs.
    pub const fn new(gpus_per_node: u32) -> Self {
        Self { gpus_per_node }
    }

    /// Checks that `gpus_per_node ≥ 1`.
    pub fn validate(&self) -> Result<(), WorkloadError> {
        if self.gpus_per_node == 0 {
            return Err(WorkloadError::Spec("gang_split.gpus_per_node must be ≥ 1".into()));
        }
        Ok(())
    }

    /// `(replicas, gpus_per_replica)` for a job of `gpus` GPUs. `gpus = 0` gives `(1, 0)`.
    ///
    /// # Panics
    /// If `gpus_per_node` is 0 (see [`GangSplit::validate`]).
    pub fn split(&self, gpus: u32) -> (u32, u32) {
        assert!(self.gpus_per_node > 0, "GangSplit::gpus_per_node must be ≥ 1");
        if gpus <= self.gpus_per_node {
            return (1, gpus);
        }
        let min_replicas = gpus.div_ceil(self.gpus_per_node);
        let replicas = (min_replicas..=gpus).find(|&r| gpus / r * r == gpus).expect("r = gpus always divides gpus");
        (replicas, gpus / replicas)
    }
}
