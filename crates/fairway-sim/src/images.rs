//! The image model: each node keeps a cache of container images; a job started on a node
//! that lacks its image waits for a pull there first, holding its GPUs meanwhile.
//!
//! Rules, per node:
//! 1. A start whose image the node holds runs at once; one whose image is being pulled there
//!    (for an earlier start) waits for that pull to end; otherwise the node pulls it, which
//!    takes `pull_ms`. A gang waits for its slowest node.
//! 2. Pre-pulled images (the article's warm images, kept by a DaemonSet) are there from time 0
//!    and never removed.
//! 3. Beyond `node_cache_max` other images, the least recently used one that no run uses and
//!    that is not being pulled is removed (kubelet's image garbage collection). A node may
//!    hold more while every one of them is in use.
//! 4. The scheduler learns a node's images as Kubernetes reports them: once a pull has ended
//!    (`Event::NodeImages` at that time), and when one is removed.

use fairway_core::ImageId;

/// The most images a node caches besides its pre-pulled ones.
pub const NODE_IMAGE_CACHE_MAX: u32 = 256;

/// How the simulator models images (`cost_model.image_pull_seconds` and the fields next to
/// it in a scenario).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ImagePulls {
    /// How long a node takes to pull an image it lacks.
    pub pull_ms: u64,
    /// Images a node keeps besides its pre-pulled ones (rule 3), 1 to [`NODE_IMAGE_CACHE_MAX`].
    pub node_cache_max: u32,
    /// On every node from time 0, never removed (rule 2); sorted, no duplicates.
    pub prepulled: Vec<ImageId>,
}

#[derive(Clone, Copy, Debug)]
struct Entry {
    image: ImageId,
    /// When the image is (or was) there; a later time while it is being pulled.
    ready_ms: u64,
    last_used_ms: u64,
    /// Runs using it now.
    runs: u32,
    pinned: bool,
}

/// What [`Caches::acquire`] found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Acquired {
    /// When the image is ready on the node (the start time when it was there).
    pub ready_ms: u64,
    /// This start began a pull (the caller reports the node's images at `ready_ms`).
    pub pulled: bool,
    /// An image was removed to make room (the caller reports the node's images now).
    pub removed: bool,
}

/// Every node's cache.
pub(crate) struct Caches {
    model: ImagePulls,
    nodes: Vec<Vec<Entry>>,
}

impl Caches {
    pub(crate) fn new(model: &ImagePulls, nodes: usize) -> Caches {
        let pinned: Vec<Entry> = model
            .prepulled
            .iter()
            .map(|&image| Entry { image, ready_ms: 0, last_used_ms: 0, runs: 0, pinned: true })
            .collect();
        Caches { model: model.clone(), nodes: vec![pinned; nodes] }
    }

    /// A run of `image` starts on `node` at `t` (rules 1 and 3).
    pub(crate) fn acquire(&mut self, node: usize, image: ImageId, t: u64) -> Acquired {
        let entries = &mut self.nodes[node];
        if let Some(e) = entries.iter_mut().find(|e| e.image == image) {
            e.runs += 1;
            e.last_used_ms = t;
            return Acquired { ready_ms: e.ready_ms.max(t), pulled: false, removed: false };
        }
        let ready_ms = t + self.model.pull_ms;
        entries.push(Entry { image, ready_ms, last_used_ms: t, runs: 1, pinned: false });
        let removed = self.trim(node, t);
        Acquired { ready_ms, pulled: true, removed }
    }

    /// A run of `image` on `node` ended at `t`.
    pub(crate) fn release(&mut self, node: usize, image: ImageId, t: u64) {
        let entry = self.nodes[node].iter_mut().find(|e| e.image == image);
        let entry = entry.expect("a run releases only an image it acquired, and a used image is never removed");
        entry.runs -= 1;
        entry.last_used_ms = t;
    }

    /// Rule 3: removes the least recently used removable images while the node holds too
    /// many (ties: the lower image id). True if any was removed.
    fn trim(&mut self, node: usize, t: u64) -> bool {
        let cap = self.model.node_cache_max as usize;
        let entries = &mut self.nodes[node];
        let mut removed = false;
        while entries.iter().filter(|e| !e.pinned).count() > cap {
            let victim = entries
                .iter()
                .enumerate()
                .filter(|(_, e)| !e.pinned && e.runs == 0 && e.ready_ms <= t)
                .min_by_key(|(_, e)| (e.last_used_ms, e.image))
                .map(|(i, _)| i);
            let Some(i) = victim else { break };
            entries.swap_remove(i);
            removed = true;
        }
        removed
    }

    /// The images `node` holds at `t` (pulls ended), sorted: what it reports (rule 4).
    pub(crate) fn held(&self, node: usize, t: u64) -> Vec<ImageId> {
        let mut held: Vec<ImageId> = self.nodes[node].iter().filter(|e| e.ready_ms <= t).map(|e| e.image).collect();
        held.sort_unstable();
        held
    }

    /// Every image `node` has an entry for, pulled or being pulled (tests).
    #[cfg(test)]
    fn entries(&self, node: usize) -> Vec<(u32, u64)> {
        let mut v: Vec<(u32, u64)> = self.nodes[node].iter().map(|e| (e.image.0, e.ready_ms)).collect();
        v.sort_unstable();
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn model(cache: u32, prepulled: &[u32]) -> ImagePulls {
        ImagePulls { pull_ms: 100, node_cache_max: cache, prepulled: prepulled.iter().map(|&i| ImageId(i)).collect() }
    }

    #[test]
    fn a_start_pulls_once_and_later_starts_wait_for_that_pull_or_run_at_once() {
        let mut c = Caches::new(&model(4, &[]), 2);
        assert_eq!(c.acquire(0, ImageId(7), 1_000), Acquired { ready_ms: 1_100, pulled: true, removed: false });
        assert!(c.held(0, 1_050).is_empty(), "not reported while pulling");
        // A second run on the same node during the pull waits for it, without a pull of its own.
        assert_eq!(c.acquire(0, ImageId(7), 1_040), Acquired { ready_ms: 1_100, pulled: false, removed: false });
        assert_eq!(c.held(0, 1_100), vec![ImageId(7)]);
        assert_eq!(c.acquire(0, ImageId(7), 2_000).ready_ms, 2_000);
        // The other node has its own cache.
        assert!(c.acquire(1, ImageId(7), 2_000).pulled);
    }

    #[test]
    fn prepulled_images_are_there_from_the_start_and_never_removed() {
        let mut c = Caches::new(&model(1, &[3]), 1);
        assert_eq!(c.held(0, 0), vec![ImageId(3)]);
        assert_eq!(c.acquire(0, ImageId(3), 5).ready_ms, 5);
        c.release(0, ImageId(3), 6);
        c.acquire(0, ImageId(1), 10);
        c.release(0, ImageId(1), 200);
        c.acquire(0, ImageId(2), 300);
        assert_eq!(c.entries(0), vec![(2, 400), (3, 0)], "image 1 went, the pinned 3 stayed");
    }

    #[test]
    fn the_least_recently_used_idle_image_goes_never_one_in_use_or_being_pulled() {
        let mut c = Caches::new(&model(2, &[]), 1);
        c.acquire(0, ImageId(1), 0);
        c.acquire(0, ImageId(2), 0);
        c.release(0, ImageId(1), 500);
        c.release(0, ImageId(2), 400);
        // Image 2 was used less recently than image 1.
        let a = c.acquire(0, ImageId(3), 1_000);
        assert!(a.removed);
        assert_eq!(c.entries(0), vec![(1, 100), (3, 1_100)]);
        // Image 1 is in use and image 3 is being pulled: a fourth image overflows the cache.
        c.acquire(0, ImageId(1), 1_010);
        let a = c.acquire(0, ImageId(4), 1_020);
        assert!(!a.removed);
        assert_eq!(c.entries(0).len(), 3);
        // Once they are idle and pulled, the next pull trims back to two.
        c.release(0, ImageId(1), 1_200);
        c.release(0, ImageId(3), 1_300);
        c.release(0, ImageId(4), 1_300);
        c.acquire(0, ImageId(5), 2_000);
        assert_eq!(c.entries(0), vec![(4, 1_120), (5, 2_100)], "1 and 3 were the least recently used");
    }
}
