//! The engine's side of `notify:` rules: it shows the evaluator its jobs once a second and
//! tells it when one fails; the notices go to the sending task (`crate::notify::deliver`).

use fairway_store::JobState;

use super::{ActiveJob, Engine, tier_name};
use crate::notify::{JobFacts, Notice};

fn facts(id: i64, job: &ActiveJob) -> JobFacts<'_> {
    JobFacts {
        id,
        name: &job.resolved.doc.name,
        tier: tier_name(&job.resolved),
        tenant: &job.resolved.doc.project,
        user: &job.resolved.doc.user,
        pending_since_ms: job.pending_since_ms.filter(|_| job.state == JobState::Pending),
        preemptions: job.preemptions,
    }
}

impl Engine {
    /// The `pending` and `preempted` rules against every unfinished job (step 8 of the
    /// module recipe, with the gauges).
    pub(crate) fn evaluate_notify_rules(&mut self, now: u64) {
        if self.notifier.is_empty() {
            return;
        }
        let mut notifier = std::mem::take(&mut self.notifier);
        let jobs = self.jobs.iter().map(|(&id, job)| facts(id, job));
        let why = |id: i64| {
            let reasons = self.live_view(id)?.reasons;
            (!reasons.is_empty()).then(|| reasons.iter().map(|r| r.message.as_str()).collect::<Vec<_>>().join("; "))
        };
        let notices = notifier.evaluate(now, jobs, why);
        let dropped = notifier.take_dropped();
        self.notifier = notifier;
        if dropped > 0 {
            tracing::warn!(dropped, "notify: the firing set is full; alerts left untracked");
            self.metrics.notifications_dropped(dropped);
        }
        self.send_notices(notices);
    }

    /// A job ended failed, its retries spent: the `failed` rules.
    pub(crate) fn notify_failed(&mut self, id: i64, message: &str, now: u64) {
        if self.notifier.is_empty() {
            return;
        }
        let Some(job) = self.jobs.get(&id) else { return };
        let notices = self.notifier.job_failed(now, &facts(id, job), message);
        self.send_notices(notices);
    }

    fn send_notices(&self, notices: Vec<Notice>) {
        let Some(queue) = &self.notices else { return };
        for notice in notices {
            let receiver = self.notifier.receivers[notice.receiver].name.clone();
            if queue.try_send(notice).is_err() {
                tracing::warn!(receiver, "notify: the sending queue is full; a notice is dropped");
                self.metrics.notified(&receiver, "queue", "dropped");
            }
        }
    }
}
