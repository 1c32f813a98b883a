//! Resolution: a job's priority class looked up in a registry (`JobDoc::resolve`), and the
//! resolved job's explicit conversion to the core's `JobSpec`. The job as read is in
//! `model.rs`.

use fairway_core::{JobId, JobSpec, PreemptionPolicy, Priority};

use crate::error::SpecError;
use crate::interner::{AccountKind, Interner};
use crate::model::{Field, JobDoc, PreemptionProtection, PriorityRef};
use crate::priority::PriorityClasses;

/// A job whose priority is resolved against a registry of classes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResolvedJob {
    pub doc: JobDoc,
    pub priority: Priority,
    /// The class the priority came from; `None` for a bare value.
    pub priority_class: Option<String>,
    pub preemption_policy: PreemptionPolicy,
    /// Rule 1's protection, from its class (none for a bare value).
    pub protection: PreemptionProtection,
}

impl JobDoc {
    /// Looks up the job's priority class. Fails when the class is unknown.
    pub fn resolve(&self, classes: &PriorityClasses) -> Result<ResolvedJob, SpecError> {
        let (priority, priority_class, class_policy, protection) = match &self.priority {
            PriorityRef::Value(v) => {
                (*v, None, PreemptionPolicy::PreemptLowerPriority, PreemptionProtection::default())
            }
            by_class => {
                let c = match by_class {
                    PriorityRef::Class(name) => classes
                        .resolve(name)
                        .ok_or_else(|| self.origin.error(Field::Priority, classes.unknown_class(name)))?,
                    _ => classes.default_class(),
                };
                (c.value, Some(c.name.clone()), c.preemption_policy, c.protection)
            }
        };
        let preemption_policy = self.preemption_policy.map_or(class_policy, PreemptionPolicy::from);
        Ok(ResolvedJob { doc: self.clone(), priority, priority_class, preemption_policy, protection })
    }

    /// Resolves the priority and converts to the core's job. Seconds become milliseconds.
    pub fn to_core(&self, id: JobId, classes: &PriorityClasses, interner: &mut Interner) -> Result<JobSpec, SpecError> {
        self.resolve(classes)?.to_core(id, interner)
    }

    /// The gang's total resources, or the field whose product overflows the core's types.
    pub(crate) fn check_totals(&self) -> Result<(), (Field, String)> {
        let r = &self.resources;
        let n = self.replicas;
        let too_large = |what: &str| format!("{what} per replica × {n} replicas is too large");
        r.gpus.checked_mul(n).ok_or_else(|| (Field::Gpus, too_large("gpus")))?;
        r.cpu_millis.checked_mul(u64::from(n)).ok_or_else(|| (Field::Cpu, too_large("cpu")))?;
        r.memory_mib.checked_mul(u64::from(n)).ok_or_else(|| (Field::Memory, too_large("memory")))?;
        Ok(())
    }
}

impl ResolvedJob {
    /// The core's job. Fails only when the interner's id space is full or when a
    /// hand-built document's gang is too large for the core's integer types.
    pub fn to_core(&self, id: JobId, interner: &mut Interner) -> Result<JobSpec, SpecError> {
        let doc = &self.doc;
        doc.check_totals().map_err(|(field, reason)| doc.origin.error(field, reason))?;
        if doc.replicas == 0 || doc.resources.gpus == 0 {
            let field = if doc.replicas == 0 { Field::Replicas } else { Field::Gpus };
            return Err(doc.origin.error(field, "must be at least 1"));
        }
        if doc.resources.gpu_milli.is_some() && doc.replicas > 1 {
            let reason = "a share of one GPU (resources.gpu_milli) is for one-replica jobs; a gang takes whole GPUs";
            return Err(doc.origin.error(Field::Replicas, reason));
        }
        let user = interner
            .account_of(AccountKind::User, &doc.user)
            .map_err(|e| doc.origin.error(Field::Name, e.to_string()))?;
        let project = interner
            .account_of(AccountKind::Project, &doc.project)
            .map_err(|e| doc.origin.error(Field::Name, e.to_string()))?;
        let gpu_model = match &doc.resources.gpu_model {
            Some(model) => {
                Some(interner.gpu_model(model).map_err(|e| doc.origin.error(Field::GpuModel, e.to_string()))?)
            }
            None => None,
        };
        Ok(JobSpec {
            id,
            user,
            project,
            priority: self.priority,
            preemption_policy: self.preemption_policy,
            preemptible: doc.preemptible,
            per_replica: doc.resources.per_replica(),
            gpu_model,
            image: match &doc.image {
                Some(reference) => {
                    Some(interner.image(reference).map_err(|e| doc.origin.error(Field::Name, e.to_string()))?)
                }
                None => None,
            },
            replicas: doc.replicas,
            grace_ms: secs_to_ms(doc.preemption_grace_seconds),
            max_runtime_ms: doc.max_runtime_seconds.map(secs_to_ms),
            max_total_runtime_ms: doc.max_total_runtime_seconds.map(secs_to_ms),
            runtime_estimate_ms: None,
            min_run_before_preemption_ms: secs_to_ms(self.protection.min_run_seconds),
            preemptions_per_hour_max: self.protection.preemptions_per_hour_max,
            overrides_protection: self.protection.overrides_protection,
            preemption_delay_ms: secs_to_ms(self.protection.preemption_delay_seconds),
            checkpoint_interval_ms: doc.checkpoint_interval_seconds.map(secs_to_ms),
        })
    }
}

/// Parsing bounds every duration far below overflow; saturating only guards hand-built docs.
fn secs_to_ms(secs: u64) -> u64 {
    secs.saturating_mul(1000)
}
