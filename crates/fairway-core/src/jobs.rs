//! The jobs the core holds, in a slab: a job is addressed inside the core by its slot
//! ([`JobIx`]), which every index carries, so that the hot paths never search for a job.
//! Drivers name jobs by [`JobId`]; the id → slot map is used once per event, and only for
//! lookups: it is never iterated, so its order can reach no decision.

use std::collections::HashMap;

use crate::ids::JobIx;

use crate::model::Job;
use crate::types::JobId;

#[derive(Clone, Debug, Default)]
pub(crate) struct JobStore {
    slots: Vec<Option<Job>>,
    vacant: Vec<JobIx>,
    /// A fixed-key hasher: lookups only, so the map's order never matters, and runs are
    /// reproducible down to memory layout.
    by_id: HashMap<JobId, JobIx, foldhash::fast::FixedState>,
}

impl JobStore {
    pub fn len(&self) -> usize {
        self.by_id.len()
    }

    pub fn ix_of(&self, id: JobId) -> Option<JobIx> {
        self.by_id.get(&id).copied()
    }

    pub fn contains(&self, id: JobId) -> bool {
        self.by_id.contains_key(&id)
    }

    /// The slot the next `insert` will use.
    pub fn next_ix(&self) -> JobIx {
        self.vacant.last().copied().unwrap_or(JobIx(self.slots.len() as u32))
    }

    /// Hold a new job (its id must be new) in the slot `next_ix` named.
    pub fn insert(&mut self, job: Job) -> JobIx {
        let ix = self.next_ix();
        debug_assert_eq!(job.key.ix, ix, "a job's queue key names its own slot");
        let fresh = self.by_id.insert(job.spec.id, ix).is_none();
        assert!(fresh, "{} is already held", job.spec.id);
        match self.vacant.pop() {
            Some(_) => self.slots[ix.0 as usize] = Some(job),
            None => self.slots.push(Some(job)),
        }
        ix
    }

    /// `remove` for a caller that needs nothing of the job: it is dropped where it lies, not
    /// moved out first (a job is large, and every finished job goes this way).
    pub fn discard(&mut self, ix: JobIx) {
        let slot = &mut self.slots[ix.0 as usize];
        let id = slot.as_ref().expect("discarding a held job").spec.id;
        *slot = None;
        self.vacate(ix, id);
    }

    pub fn remove(&mut self, ix: JobIx) -> Job {
        let job = self.slots[ix.0 as usize].take().expect("removing a held job");
        self.vacate(ix, job.spec.id);
        job
    }

    /// Forget the job `id` that was in slot `ix` (now empty), and keep the slot for reuse.
    fn vacate(&mut self, ix: JobIx, id: JobId) {
        self.by_id.remove(&id);
        self.vacant.push(ix);
    }

    /// The job in a slot, if the slot holds one (for checks that may meet stale slots).
    pub fn get_slot(&self, ix: JobIx) -> Option<&Job> {
        self.slots.get(ix.0 as usize).and_then(Option::as_ref)
    }

    pub fn get(&self, id: JobId) -> Option<&Job> {
        self.ix_of(id).map(|ix| &self[ix])
    }

    /// Every held job, in slot order (for rare recounts; slot order is deterministic).
    pub fn iter(&self) -> impl Iterator<Item = &Job> {
        self.slots.iter().flatten()
    }

    #[cfg(test)]
    pub fn get_mut(&mut self, id: JobId) -> Option<&mut Job> {
        self.ix_of(id).map(|ix| &mut self[ix])
    }
}

impl std::ops::Index<JobIx> for JobStore {
    type Output = Job;
    fn index(&self, ix: JobIx) -> &Job {
        self.slots[ix.0 as usize].as_ref().expect("a held job's slot")
    }
}

impl std::ops::IndexMut<JobIx> for JobStore {
    fn index_mut(&mut self, ix: JobIx) -> &mut Job {
        self.slots[ix.0 as usize].as_mut().expect("a held job's slot")
    }
}
