//! Submissions: validate, write durably in one transaction per batch, then queue in the core.
//!
//! What a caller may submit (see `auth.rs`): jobs of its own tenant (the token's user and
//! project fill in what the spec leaves out; naming another is refused), at a priority no
//! higher than its project's `priority_class_max`, and priority classes only as an admin.
//! Every problem of a submission is reported at once; the status is that of the gravest
//! kind among them: 400 for a malformed spec, 403 for what the caller may not do, 422 for
//! what this cluster cannot run.

use axum::http::StatusCode;
use fairway_core::{Event, JobSpec, Time};
use fairway_spec::{Field, JobDoc, Parsed, PriorityClasses, ResolvedJob, SpecError, SpecErrors};
use fairway_store::{JobState, NewJob, PriorityClassRow};

use super::{ActiveJob, Command, Engine, Reply, core_id, tier_label};
use crate::api::{FieldError, SubmitResponse, SubmittedJob};
use crate::auth::Identity;
use crate::error::ApiError;

/// A submission's problems, by kind.
#[derive(Default)]
struct Problems {
    invalid: Vec<SpecError>,
    forbidden: Vec<SpecError>,
    unschedulable: Vec<SpecError>,
    /// What this server lacks (a container runtime).
    unsupported: Vec<SpecError>,
}

impl Problems {
    fn into_error(self) -> Option<ApiError> {
        let (status, code) = if !self.invalid.is_empty() {
            (StatusCode::BAD_REQUEST, "invalid_spec")
        } else if !self.forbidden.is_empty() {
            (StatusCode::FORBIDDEN, "forbidden")
        } else if !self.unschedulable.is_empty() {
            (StatusCode::UNPROCESSABLE_ENTITY, "unschedulable")
        } else if !self.unsupported.is_empty() {
            (StatusCode::UNPROCESSABLE_ENTITY, "unsupported")
        } else {
            return None;
        };
        let mut all: Vec<SpecError> = [self.invalid, self.forbidden, self.unschedulable, self.unsupported].concat();
        all.sort_by(|a, b| (a.document, &a.path).cmp(&(b.document, &b.path)));
        Some(ApiError::spec_refused(status, code, SpecErrors(all)))
    }
}

/// A submission that passed validation.
struct Checked {
    jobs: Vec<ResolvedJob>,
    /// The registry with the submission's classes added.
    classes: PriorityClasses,
    class_names: Vec<String>,
    warnings: Vec<FieldError>,
}

/// Why a batch of submissions was not written.
enum WriteFailure {
    /// The store failed (a full disk): the engine degrades.
    Store(fairway_store::StoreError),
    /// A job the core could not take.
    Api(ApiError),
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
            let Command::Submit { parsed, who, reply } = command else { unreachable!("partitioned") };
            match self.prepare(parsed, &who, &classes, admitted) {
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
        let error = match self.write_submissions(&prepared, now) {
            Ok((ids, specs)) => {
                self.classes = classes;
                self.share_classes();
                self.queue_submissions(prepared, ids, specs, now);
                return;
            }
            Err(WriteFailure::Api(e)) => e,
            Err(WriteFailure::Store(e)) => {
                // Nothing of the batch was stored or queued; the engine stops taking changes
                // until the store takes writes again.
                self.degrade("submissions", &e);
                ApiError::store_unavailable(&e.to_string())
            }
        };
        for p in prepared {
            let _ = p.reply.send(Err(error.clone()));
        }
    }

    /// Fills in the tenant, resolves classes, checks what the caller may do, the cluster,
    /// the container runtime and the limits.
    fn prepare(
        &self,
        parsed: Parsed,
        who: &Identity,
        classes: &PriorityClasses,
        admitted: usize,
    ) -> Result<Checked, ApiError> {
        let limits = &self.config.file.limits;
        if parsed.jobs.len() > limits.jobs_per_submission_max {
            return Err(ApiError::bad_request(format!(
                "input: {} jobs in one submission; the limit is {}",
                parsed.jobs.len(),
                limits.jobs_per_submission_max
            )));
        }
        if admitted + parsed.jobs.len() > limits.jobs_active_max as usize {
            return Err(ApiError::queue_full(limits.jobs_active_max));
        }
        let mut problems = Problems::default();
        if !who.is_admin() {
            problems.forbidden.extend(parsed.priority_classes.iter().map(|c| {
                SpecError::new(
                    c.origin.document,
                    c.origin.path(Field::Name),
                    format!("only an admin token may add priority classes ({:?})", c.name),
                )
            }));
        }
        let mut staged = classes.clone();
        if let Err(SpecErrors(mut e)) = staged.register_all(&parsed.priority_classes) {
            problems.invalid.append(&mut e);
        }
        let docs: Vec<JobDoc> = parsed.jobs.iter().map(|job| with_tenant(job, who, &mut problems)).collect();
        let mut jobs = Vec::with_capacity(docs.len());
        for job in &docs {
            match job.resolve(&staged) {
                Ok(r) => {
                    if let Some(e) = self.check_priority(&r, who) {
                        problems.forbidden.push(e);
                    }
                    jobs.push(r);
                }
                Err(e) => problems.invalid.push(e),
            }
        }
        if let Err(SpecErrors(mut e)) = fairway_spec::validate_against_cluster(&docs, &self.cluster.shape) {
            problems.unschedulable.append(&mut e);
        } else {
            problems.unschedulable.extend(docs.iter().filter_map(|job| self.check_gang(job)));
        }
        problems.unsupported.extend(docs.iter().filter_map(|job| self.check_image(job)));
        problems.invalid.extend(docs.iter().filter_map(|job| self.check_grace(job)));
        if let Some(error) = problems.into_error() {
            return Err(error);
        }
        let names = parsed.priority_classes.iter().map(|c| c.name.clone()).collect();
        let warnings = parsed.warnings.iter().map(crate::error::warning_view).collect();
        Ok(Checked { jobs, classes: staged, class_names: names, warnings })
    }

    /// A non-admin may not submit above its project's `priority_class_max`.
    fn check_priority(&self, job: &ResolvedJob, who: &Identity) -> Option<SpecError> {
        if who.is_admin() {
            return None;
        }
        let (max_name, max_value) = self.priority_value_max(&who.project);
        (job.priority > max_value).then(|| {
            let asked = match &job.priority_class {
                Some(class) => format!("class {class:?} ({})", job.priority),
                None => format!("priority {}", job.priority),
            };
            SpecError::new(
                job.doc.origin.document,
                job.doc.origin.path(Field::Priority),
                format!(
                    "{asked} is above what project {:?} may use: at most class {max_name:?} ({max_value}); an admin \
                     can raise it with `fairway project set {} --priority-class-max <class>`",
                    who.project, who.project
                ),
            )
        })
    }

    /// A gang must fit on the empty cluster all at once: otherwise it would wait forever.
    fn check_gang(&self, job: &JobDoc) -> Option<SpecError> {
        if job.replicas <= 1 {
            return None;
        }
        let model = job.resources.gpu_model.as_deref().and_then(|m| self.interner.gpu_model_id(m));
        let per_replica = job.resources.per_replica();
        let most = self.core.replicas_fit_max(model, per_replica, job.replicas);
        (most < job.replicas).then(|| {
            SpecError::new(
                job.origin.document,
                job.origin.path(Field::Replicas),
                format!(
                    "{} replicas of {} can never run at once here: the empty cluster holds at most {most} \
                     (its nodes: {})",
                    job.replicas,
                    replica_size(&job.resources),
                    self.cluster_summary()
                ),
            )
        })
    }

    /// `2 nodes of 8 A100`, for messages.
    fn cluster_summary(&self) -> String {
        let mut counts: std::collections::BTreeMap<(String, usize), usize> = std::collections::BTreeMap::new();
        for node in &self.cluster.layout.nodes {
            *counts.entry((node.gpu_model.clone(), node.gpus.len())).or_default() += 1;
        }
        let parts: Vec<String> = counts
            .into_iter()
            .map(|((model, gpus), n)| format!("{n} node{} of {gpus} {model}", if n == 1 { "" } else { "s" }))
            .collect();
        parts.join(", ")
    }

    /// An image job needs a container runtime, unless it may run as a plain process.
    fn check_image(&self, job: &fairway_spec::JobDoc) -> Option<SpecError> {
        if job.image.is_none() || self.runtime.is_some() || job.image_optional {
            return None;
        }
        let advice = match job.origin.format {
            fairway_spec::SourceFormat::Native => {
                "remove `image`, or add `image_optional: true` to run `command` as a plain process"
            }
            _ => {
                "submit it as a native job without `image` (docs/job-spec.md), or start the server with a \
                 container runtime (docker or podman on its PATH, or `container_runtime:` in its config)"
            }
        };
        Some(SpecError::new(
            job.origin.document,
            image_path(job),
            format!("this server has no container runtime to run the image; {advice}"),
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
    fn write_submissions(&mut self, prepared: &[Prepared], now: u64) -> Result<(Vec<i64>, Vec<JobSpec>), WriteFailure> {
        let mut ids = Vec::new();
        let mut specs = Vec::new();
        let mut tx = self.store.transaction().map_err(WriteFailure::Store)?;
        for Prepared { checked: p, .. } in prepared {
            for name in &p.class_names {
                let class = p.classes.resolve(name).expect("registered by prepare");
                tx.upsert_priority_class(&PriorityClassRow {
                    name: class.name.clone(),
                    value: class.value,
                    preemption_policy: format!("{:?}", class.preemption_policy),
                    global_default: class.global_default,
                    description: Some(class.description.clone()).filter(|d| !d.is_empty()),
                    min_run_before_preemption_seconds: class.protection.min_run_seconds,
                    preemptions_per_hour_max: class.protection.preemptions_per_hour_max,
                    overrides_preemption_protection: class.protection.overrides_protection,
                    preemption_delay_seconds: class.protection.preemption_delay_seconds,
                })
                .map_err(WriteFailure::Store)?;
            }
            for job in &p.jobs {
                let doc = stored_doc(job);
                let new = NewJob {
                    name: job.doc.name.clone(),
                    user: job.doc.user.clone(),
                    project: job.doc.project.clone(),
                    priority: job.priority,
                    priority_class: job.priority_class.clone(),
                    spec_json: serde_json::to_string(&doc)
                        .map_err(|e| WriteFailure::Api(ApiError::internal(e.to_string())))?,
                    submitted_at_ms: now,
                    min_run_before_preemption_seconds: job.protection.min_run_seconds,
                    preemptions_per_hour_max: job.protection.preemptions_per_hour_max,
                    overrides_preemption_protection: job.protection.overrides_protection,
                    preemption_delay_seconds: job.protection.preemption_delay_seconds,
                };
                let id = tx.insert_job(&new).map_err(WriteFailure::Store)?;
                ids.push(id);
            }
        }
        // Core specs are built before the commit so that a job the core could not take
        // (an account name the interner refuses) never reaches the store.
        let mut i = 0;
        for Prepared { checked: p, .. } in prepared {
            for job in &p.jobs {
                specs.push(core_spec(&mut self.interner, ids[i], job).map_err(WriteFailure::Api)?);
                i += 1;
            }
        }
        tx.commit().map_err(WriteFailure::Store)?;
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

/// `4 GPUs`, or `1 GPU, 64000 MiB of memory`: what one replica asks, CPU and memory only
/// when asked, so that a gang held back by memory says so.
fn replica_size(r: &fairway_spec::ResourcesDoc) -> String {
    let mut parts = vec![match r.gpu_milli {
        Some(milli) => format!("{milli}/1000 of one GPU"),
        None => format!("{} GPU{}", r.gpus, if r.gpus == 1 { "" } else { "s" }),
    }];
    if r.cpu_millis > 0 {
        parts.push(format!("{} millicores of CPU", r.cpu_millis));
    }
    if r.memory_mib > 0 {
        parts.push(format!("{} MiB of memory", r.memory_mib));
    }
    parts.join(", ")
}

/// The job with its tenant from the caller: what the spec leaves out is the token's; what
/// it names must be the token's too, unless the caller is an admin.
fn with_tenant(job: &JobDoc, who: &Identity, problems: &mut Problems) -> JobDoc {
    let mut job = job.clone();
    let parts = [
        ("user", job.origin.tenant.user.clone(), &mut job.user, &who.user),
        ("project", job.origin.tenant.project.clone(), &mut job.project, &who.project),
    ];
    for (what, given_at, value, own) in parts {
        match given_at {
            Some(path) if !who.is_admin() && *value != *own => problems.forbidden.push(SpecError::new(
                job.origin.document,
                path,
                format!(
                    "your token is for {what} {own:?}, not {value:?}: a job runs as its submitter; leave the {what} out \
                     or name your own"
                ),
            )),
            Some(_) => {}
            None => value.clone_from(own),
        }
    }
    job
}

/// The core's job: user and project in their own account namespaces.
fn core_spec(interner: &mut fairway_spec::Interner, id: i64, job: &ResolvedJob) -> Result<JobSpec, ApiError> {
    job.to_core(core_id(id), interner).map_err(|e| ApiError::invalid_spec(SpecErrors(vec![e])))
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
        preemptions: 0,
        preempted_at_ms: Vec::new(),
        runtime_done_ms: 0,
        pending_since_ms: Some(now),
        last_checkpoint_ms: None,
        stop_requested_at_ms: None,
        retry_at_ms: None,
    }
}
