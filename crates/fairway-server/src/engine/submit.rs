//! Submissions: validate, write durably in one transaction per batch, then queue in the core.

use fairway_core::{Event, JobSpec, Time};
use fairway_spec::{Parsed, PriorityClasses, ResolvedJob, SpecError, SpecErrors};
use fairway_store::{JobState, NewJob, PriorityClassRow};

use super::{AccountKind, ActiveJob, Command, Engine, Reply, core_id, tier_label};
use crate::api::{FieldError, SubmitResponse, SubmittedJob};
use crate::error::ApiError;

/// A submission that passed validation.
struct Checked {
    jobs: Vec<ResolvedJob>,
    /// The registry with the submission's classes added.
    classes: PriorityClasses,
    class_names: Vec<String>,
    warnings: Vec<FieldError>,
}

/// A checked submission waiting for the batch's commit.
struct Prepared {
    checked: Checked,
    reply: Reply<SubmitResponse>,
}

impl Engine {
    /// Step 3 of the loop: every valid submission of the batch lands in one transaction.
    /// A submission is all or nothing; one submission's errors do not affect another's.
    pub(crate) fn submit_batch(&mut self, commands: Vec<Command>, now: u64) {
        let mut prepared = Vec::new();
        let mut classes = self.classes.clone();
        let mut admitted = self.jobs.len();
        for command in commands {
            let Command::Submit { parsed, reply } = command else { unreachable!("partitioned") };
            match self.prepare(parsed, &classes, admitted) {
                Ok(checked) => {
                    admitted += checked.jobs.len();
                    classes = checked.classes.clone();
                    prepared.push(Prepared { checked, reply });
                }
                Err(e) => {
                    let _ = reply.send(Err(e));
                }
            }
        }
        if prepared.is_empty() {
            return;
        }
        match self.write_submissions(&prepared, now) {
            Ok((ids, specs)) => {
                self.classes = classes;
                self.queue_submissions(prepared, ids, specs, now);
            }
            Err(e) => {
                for p in prepared {
                    let _ = p.reply.send(Err(e.clone()));
                }
            }
        }
    }

    /// Resolves classes, checks the cluster, the container runtime and the limits.
    fn prepare(&self, parsed: Parsed, classes: &PriorityClasses, admitted: usize) -> Result<Checked, ApiError> {
        let limits = &self.config.file.limits;
        if parsed.jobs.len() > limits.jobs_per_submission_max {
            return Err(ApiError::bad_request(format!(
                "{} jobs in one submission; the limit is {}",
                parsed.jobs.len(),
                limits.jobs_per_submission_max
            )));
        }
        if admitted + parsed.jobs.len() > limits.jobs_active_max as usize {
            return Err(ApiError::queue_full(limits.jobs_active_max));
        }
        let mut staged = classes.clone();
        staged.register_all(&parsed.priority_classes).map_err(ApiError::invalid_spec)?;
        let mut jobs = Vec::with_capacity(parsed.jobs.len());
        let mut errors = Vec::new();
        for job in &parsed.jobs {
            match job.resolve(&staged) {
                Ok(r) => jobs.push(r),
                Err(e) => errors.push(e),
            }
        }
        if let Err(SpecErrors(mut e)) = fairway_spec::validate_against_cluster(&parsed.jobs, &self.cluster.shape) {
            errors.append(&mut e);
        }
        errors.extend(parsed.jobs.iter().filter_map(|job| self.check_image(job)));
        errors.extend(parsed.jobs.iter().filter_map(|job| self.check_grace(job)));
        if !errors.is_empty() {
            errors.sort_by(|a, b| (a.document, &a.path).cmp(&(b.document, &b.path)));
            return Err(ApiError::invalid_spec(SpecErrors(errors)));
        }
        let names = parsed.priority_classes.iter().map(|c| c.name.clone()).collect();
        let warnings = parsed.warnings.iter().map(crate::error::warning_view).collect();
        Ok(Checked { jobs, classes: staged, class_names: names, warnings })
    }

    /// An image job needs a container runtime, unless it may run as a plain process.
    fn check_image(&self, job: &fairway_spec::JobDoc) -> Option<SpecError> {
        if job.image.is_none() || self.runtime.is_some() || job.image_optional {
            return None;
        }
        Some(SpecError::new(
            job.origin.document,
            image_path(job),
            "this server has no container runtime (docker or podman on its PATH); remove the image, \
             or set image_optional: true to run the command as a plain process",
        ))
    }

    /// A victim may hold GPUs a higher-priority job waits for at most this long.
    fn check_grace(&self, job: &fairway_spec::JobDoc) -> Option<SpecError> {
        let max = self.config.file.limits.grace_seconds_max;
        (job.preemption_grace_seconds > max).then(|| {
            let path = match job.origin.format {
                fairway_spec::SourceFormat::Native => "preemption_grace_seconds",
                _ => "spec.template.spec.terminationGracePeriodSeconds",
            };
            SpecError::new(
                job.origin.document,
                path,
                format!("{}s is above this server's limit of {max}s", job.preemption_grace_seconds),
            )
        })
    }

    /// Writes every prepared job and class in one transaction and commits it.
    fn write_submissions(&mut self, prepared: &[Prepared], now: u64) -> Result<(Vec<i64>, Vec<JobSpec>), ApiError> {
        let mut ids = Vec::new();
        let mut specs = Vec::new();
        let mut tx = self.store.transaction().map_err(ApiError::store)?;
        for Prepared { checked: p, .. } in prepared {
            for name in &p.class_names {
                let class = p.classes.resolve(name).expect("registered by prepare");
                tx.upsert_priority_class(&PriorityClassRow {
                    name: class.name.clone(),
                    value: class.value,
                    preemption_policy: format!("{:?}", class.preemption_policy),
                    global_default: class.global_default,
                    description: Some(class.description.clone()).filter(|d| !d.is_empty()),
                })
                .map_err(ApiError::store)?;
            }
            for job in &p.jobs {
                let doc = stored_doc(job);
                let new = NewJob {
                    name: job.doc.name.clone(),
                    user: job.doc.user.clone(),
                    project: job.doc.project.clone(),
                    priority: job.priority,
                    priority_class: job.priority_class.clone(),
                    spec_json: serde_json::to_string(&doc).map_err(|e| ApiError::internal(e.to_string()))?,
                    submitted_at_ms: now,
                };
                let id = tx.insert_job(&new).map_err(ApiError::store)?;
                ids.push(id);
            }
        }
        // Core specs are built before the commit so that a job the core could not take
        // (an account name the interner refuses) never reaches the store.
        let mut i = 0;
        for Prepared { checked: p, .. } in prepared {
            for job in &p.jobs {
                specs.push(core_spec(&mut self.interner, ids[i], job)?);
                i += 1;
            }
        }
        tx.commit().map_err(ApiError::store)?;
        Ok((ids, specs))
    }

    pub(crate) fn core_spec(&mut self, id: i64, job: &ResolvedJob) -> Result<JobSpec, ApiError> {
        core_spec(&mut self.interner, id, job)
    }

    fn queue_submissions(&mut self, prepared: Vec<Prepared>, ids: Vec<i64>, specs: Vec<JobSpec>, now: u64) {
        let mut ids = ids.into_iter().zip(specs);
        for Prepared { checked: p, reply } in prepared {
            let mut accepted = Vec::new();
            for job in p.jobs {
                let (id, spec) = ids.next().expect("one id per job");
                if let Err(e) = self.core.apply(Event::Submit(spec), Time(now)) {
                    // Validation and the active-job limit make this unreachable; if it
                    // happens the job is in the store and recovery will queue it.
                    tracing::error!(id, "core refused a stored submission: {e}");
                }
                accepted.push(SubmittedJob { id, name: job.doc.name.clone(), project: job.doc.project.clone() });
                self.metrics.submissions.inc();
                let tier = tier_label(&job);
                self.metrics.job_state(&tier, JobState::Pending, 1);
                self.jobs.insert(id, new_active(job, now));
            }
            let response = SubmitResponse { jobs: accepted, priority_classes: p.class_names, warnings: p.warnings };
            let _ = reply.send(Ok(response));
        }
        self.touch();
    }
}

/// The core's job: user and project in their own account namespaces.
fn core_spec(interner: &mut fairway_spec::Interner, id: i64, job: &ResolvedJob) -> Result<JobSpec, ApiError> {
    let mut spec = job.to_core(core_id(id), interner).map_err(|e| ApiError::invalid_spec(SpecErrors(vec![e])))?;
    spec.user = super::account_in(interner, AccountKind::User, &job.doc.user)?;
    spec.project = super::account_in(interner, AccountKind::Project, &job.doc.project)?;
    Ok(spec)
}

/// Where the image was written in the submitted document.
fn image_path(job: &fairway_spec::JobDoc) -> String {
    match job.origin.format {
        fairway_spec::SourceFormat::Native => "image".into(),
        _ => "spec.template.spec.containers[0].image".into(),
    }
}

/// The native document as stored: the resolved preemption policy is written into it, so
/// that recovery does not depend on classes that may change later.
pub(crate) fn stored_doc(job: &ResolvedJob) -> fairway_spec::JobDoc {
    let mut doc = job.doc.clone();
    doc.preemption_policy = Some(job.preemption_policy.into());
    doc
}

pub(crate) fn new_active(resolved: ResolvedJob, now: u64) -> ActiveJob {
    ActiveJob {
        resolved,
        state: JobState::Pending,
        submitted_at_ms: now,
        first_started_at_ms: None,
        run: 0,
        in_flight: false,
        started_at_ms: None,
        failures: 0,
        last_checkpoint_ms: None,
        recovered_preempting: false,
    }
}
