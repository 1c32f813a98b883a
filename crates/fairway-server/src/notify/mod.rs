//! Notifications the server sends itself (config `notify:`, `docs/notify.md`): the article's
//! "a medium job waited more than 30 minutes: e-mail the administrators" on a machine with
//! no Prometheus or Alertmanager.
//!
//! Two halves:
//! - [`Evaluator`] (pure, here): given the jobs and the time, which alerts start firing and
//!   which resolve. Alertmanager's model, per (rule, job): an alert fires once, is not sent
//!   again while it fires, and is sent once more when it resolves. A `failed` alert is an
//!   event: sent once, with nothing to resolve. What fires or resolves in one evaluation is
//!   grouped into one notice per rule and status.
//! - [`deliver`]: a task that sends each notice to its receiver's addresses (SMTP) and
//!   webhook (Alertmanager's webhook JSON), with retries, off the engine's thread.
//!
//! The firing set lives in memory: after a restart, an alert whose condition still holds
//! fires (and is sent) once more.

pub mod deliver;

use std::collections::BTreeMap;

use crate::config::{NotifyConfig, NotifyRuleConfig, PriorityClassConfig};

/// Rules and receivers a config may name, at most.
pub const RULES_MAX: usize = 64;
pub const RECEIVERS_MAX: usize = 64;
/// E-mail addresses one receiver may name, at most.
pub const ADDRESSES_MAX: usize = 100;
/// Alerts firing at once, at most: beyond it a new alert is not tracked (and not sent), and
/// is counted in `fairway_notifications_total{outcome="dropped"}`.
pub const FIRING_MAX: usize = 10_000;
/// Alerts one notice lists, at most; the rest are counted (`truncated`).
pub const ALERTS_PER_NOTICE_MAX: usize = 50;
/// The longest threshold a `pending` rule may give: a year.
pub const PENDING_SECONDS_MAX: u64 = 365 * 24 * 3600;

/// The receivers of a config that [`check`] accepted, in order (rules name them by index).
pub fn receivers(config: &NotifyConfig) -> Vec<Receiver> {
    config
        .receivers
        .iter()
        .map(|r| Receiver { name: r.name.clone(), email_to: r.email_to.clone(), webhook_url: r.webhook_url.clone() })
        .collect()
}

/// What a rule watches for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Condition {
    /// Pending (since it last entered the queue) for at least this long.
    PendingMs(u64),
    /// Preempted at least this many times, while the job is unfinished.
    Preempted(u32),
    /// Ended failed (its retries spent, or stopped at its run-time limit): an event.
    Failed,
}

/// A rule, checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rule {
    pub name: String,
    pub condition: Condition,
    pub tier: Option<String>,
    pub tenant: Option<String>,
    /// Index into the receivers.
    pub receiver: usize,
}

impl Rule {
    fn matches(&self, job: &JobFacts<'_>) -> bool {
        self.tier.as_deref().is_none_or(|t| t == job.tier) && self.tenant.as_deref().is_none_or(|t| t == job.tenant)
    }

    /// The rule in words, for the notice's text.
    pub fn describe(&self) -> String {
        let what = match self.condition {
            Condition::PendingMs(ms) => format!("pending longer than {}", duration_text(ms)),
            Condition::Preempted(n) => format!("preempted {n} time{} or more", if n == 1 { "" } else { "s" }),
            Condition::Failed => "failed".to_owned(),
        };
        let mut scope = Vec::new();
        if let Some(t) = &self.tier {
            scope.push(format!("tier {t}"));
        }
        if let Some(t) = &self.tenant {
            scope.push(format!("tenant {t}"));
        }
        if scope.is_empty() { format!("jobs {what}") } else { format!("jobs ({}) {what}", scope.join(", ")) }
    }
}

/// A job as the evaluator sees it.
#[derive(Clone, Copy, Debug)]
pub struct JobFacts<'a> {
    pub id: i64,
    pub name: &'a str,
    pub tier: &'a str,
    pub tenant: &'a str,
    pub user: &'a str,
    /// Since when it waits, while pending.
    pub pending_since_ms: Option<u64>,
    pub preemptions: u32,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Status {
    Firing,
    Resolved,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Firing => "firing",
            Status::Resolved => "resolved",
        }
    }
}

/// One job's alert, as sent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Alert {
    pub job_id: i64,
    pub job_name: String,
    pub tier: String,
    pub tenant: String,
    pub user: String,
    /// When its condition began to hold (for `pending`: when the job entered the queue).
    pub starts_at_ms: u64,
    /// When it resolved.
    pub ends_at_ms: Option<u64>,
    /// One line: what happened to which job.
    pub summary: String,
    /// The detail: how long, and why (for a pending job, the scheduler's reasons).
    pub description: String,
}

/// What one receiver is told about one rule at one time.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Notice {
    pub receiver: usize,
    pub rule: String,
    pub rule_text: String,
    pub status: Status,
    pub alerts: Vec<Alert>,
    /// Alerts beyond [`ALERTS_PER_NOTICE_MAX`], left out of `alerts`.
    pub truncated: usize,
}

/// A receiver, checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Receiver {
    pub name: String,
    pub email_to: Vec<String>,
    pub webhook_url: Option<String>,
}

/// The pure half: rules, receivers and what fires now.
#[derive(Debug, Default)]
pub struct Evaluator {
    pub rules: Vec<Rule>,
    pub receivers: Vec<Receiver>,
    firing: BTreeMap<(usize, i64), Alert>,
    /// Alerts not tracked since the last call to [`Evaluator::take_dropped`] (the firing
    /// set was full).
    dropped: u64,
}

impl Evaluator {
    /// From a config that [`check`] accepted.
    pub fn new(config: &NotifyConfig) -> Evaluator {
        let receivers = receivers(config);
        let rules = config.rules.iter().filter_map(|r| rule_of(r, &receivers).ok()).collect();
        Evaluator { rules, receivers, firing: BTreeMap::new(), dropped: 0 }
    }

    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// Alerts firing now.
    pub fn firing(&self) -> usize {
        self.firing.len()
    }

    /// Alerts not tracked because the firing set was full, since the last call.
    pub fn take_dropped(&mut self) -> u64 {
        std::mem::take(&mut self.dropped)
    }

    /// Checks the `pending` and `preempted` rules against every unfinished job: what starts
    /// to fire (with `why`'s text for a pending job) and what resolves (its condition no
    /// longer holds, or the job is gone).
    pub fn evaluate<'a>(
        &mut self,
        now_ms: u64,
        jobs: impl IntoIterator<Item = JobFacts<'a>>,
        mut why: impl FnMut(i64) -> Option<String>,
    ) -> Vec<Notice> {
        let mut holding: std::collections::BTreeSet<(usize, i64)> = std::collections::BTreeSet::new();
        let mut fired: Vec<(usize, Alert)> = Vec::new();
        for job in jobs {
            for (r, rule) in self.rules.iter().enumerate() {
                if !rule.matches(&job) {
                    continue;
                }
                let Some(since) = holds(rule.condition, &job, now_ms) else { continue };
                holding.insert((r, job.id));
                if self.firing.contains_key(&(r, job.id)) {
                    continue;
                }
                if self.firing.len() >= FIRING_MAX {
                    self.dropped += 1;
                    continue;
                }
                let alert = fire(rule, &job, since, now_ms, &mut why);
                self.firing.insert((r, job.id), alert.clone());
                fired.push((r, alert));
            }
        }
        let ended: Vec<(usize, i64)> = self.firing.keys().filter(|k| !holding.contains(k)).copied().collect();
        let mut resolved = Vec::new();
        for key in ended {
            let mut alert = self.firing.remove(&key).expect("listed above");
            alert.ends_at_ms = Some(now_ms);
            alert.description = match self.rules[key.0].condition {
                Condition::PendingMs(_) => format!(
                    "no longer pending (it started, or left the queue) after {}",
                    duration_text(now_ms.saturating_sub(alert.starts_at_ms))
                ),
                _ => "the job finished or was removed".to_owned(),
            };
            resolved.push((key.0, alert));
        }
        let mut notices = self.group(fired, Status::Firing);
        notices.extend(self.group(resolved, Status::Resolved));
        notices
    }

    /// A job ended failed: the `failed` rules that match it, each sent once.
    pub fn job_failed(&mut self, now_ms: u64, job: &JobFacts<'_>, message: &str) -> Vec<Notice> {
        let fired: Vec<(usize, Alert)> = self
            .rules
            .iter()
            .enumerate()
            .filter(|(_, rule)| rule.condition == Condition::Failed && rule.matches(job))
            .map(|(r, _)| {
                let mut alert = alert_of(job, now_ms, format!("job {} (#{}) failed", job.name, job.id));
                alert.description = message.to_owned();
                (r, alert)
            })
            .collect();
        self.group(fired, Status::Firing)
    }

    /// One notice per rule, in rule order; alerts in job order.
    fn group(&self, mut alerts: Vec<(usize, Alert)>, status: Status) -> Vec<Notice> {
        alerts.sort_by_key(|(r, a)| (*r, a.job_id));
        let mut notices: Vec<Notice> = Vec::new();
        for (r, alert) in alerts {
            let rule = &self.rules[r];
            let same = notices.last().is_some_and(|n| n.rule == rule.name);
            if !same {
                notices.push(Notice {
                    receiver: rule.receiver,
                    rule: rule.name.clone(),
                    rule_text: rule.describe(),
                    status,
                    alerts: Vec::new(),
                    truncated: 0,
                });
            }
            let notice = notices.last_mut().expect("pushed above");
            if notice.alerts.len() < ALERTS_PER_NOTICE_MAX {
                notice.alerts.push(alert);
            } else {
                notice.truncated += 1;
            }
        }
        notices
    }
}

/// Since when the condition holds for the job, if it does now.
fn holds(condition: Condition, job: &JobFacts<'_>, now_ms: u64) -> Option<u64> {
    match condition {
        Condition::PendingMs(ms) => job.pending_since_ms.filter(|&since| now_ms.saturating_sub(since) >= ms),
        Condition::Preempted(n) => (job.preemptions >= n).then_some(now_ms),
        Condition::Failed => None,
    }
}

fn fire(
    rule: &Rule,
    job: &JobFacts<'_>,
    since: u64,
    now_ms: u64,
    why: &mut impl FnMut(i64) -> Option<String>,
) -> Alert {
    match rule.condition {
        Condition::PendingMs(_) => {
            let waited = duration_text(now_ms.saturating_sub(since));
            let mut alert = alert_of(job, since, format!("job {} (#{}) pending for {waited}", job.name, job.id));
            alert.description = match why(job.id) {
                Some(why) => format!("pending for {waited}; why: {why}"),
                None => format!("pending for {waited}"),
            };
            alert
        }
        Condition::Preempted(_) => {
            let times = job.preemptions;
            let mut alert = alert_of(job, since, format!("job {} (#{}) preempted {times} times", job.name, job.id));
            alert.description = format!("preempted {times} times and still unfinished");
            alert
        }
        Condition::Failed => unreachable!("an event, not a state: see job_failed"),
    }
}

fn alert_of(job: &JobFacts<'_>, starts_at_ms: u64, summary: String) -> Alert {
    Alert {
        job_id: job.id,
        job_name: job.name.to_owned(),
        tier: job.tier.to_owned(),
        tenant: job.tenant.to_owned(),
        user: job.user.to_owned(),
        starts_at_ms,
        ends_at_ms: None,
        summary,
        description: String::new(),
    }
}

/// `1h 5m`, `30m`, `2m 3s`, `45s`.
pub fn duration_text(ms: u64) -> String {
    let s = ms / 1000;
    let (h, m, s) = (s / 3600, s % 3600 / 60, s % 60);
    match (h, m, s) {
        (0, 0, s) => format!("{s}s"),
        (0, m, 0) => format!("{m}m"),
        (0, m, s) => format!("{m}m {s}s"),
        (h, 0, _) => format!("{h}h"),
        (h, m, _) => format!("{h}h {m}m"),
    }
}

fn rule_of(r: &NotifyRuleConfig, receivers: &[Receiver]) -> Result<Rule, String> {
    let condition = match r.when.as_str() {
        "pending" => {
            let Some(s) = r.pending_seconds else {
                return Err("pending_seconds: required with when: pending".into());
            };
            if s == 0 || s > PENDING_SECONDS_MAX {
                return Err(format!("pending_seconds: from 1 to {PENDING_SECONDS_MAX} (a year), got {s}"));
            }
            Condition::PendingMs(s * 1000)
        }
        "preempted" => match r.preemptions_min {
            Some(0) => return Err("preemptions_min: must be at least 1, got 0".into()),
            Some(n) => Condition::Preempted(n),
            None => return Err("preemptions_min: required with when: preempted".into()),
        },
        "failed" => Condition::Failed,
        other => return Err(format!("when: {other:?} is not pending, failed or preempted")),
    };
    if r.pending_seconds.is_some() && !matches!(condition, Condition::PendingMs(_)) {
        return Err(format!("pending_seconds: only with when: pending (this rule is when: {})", r.when));
    }
    if r.preemptions_min.is_some() && !matches!(condition, Condition::Preempted(_)) {
        return Err(format!("preemptions_min: only with when: preempted (this rule is when: {})", r.when));
    }
    let receiver = receivers
        .iter()
        .position(|x| x.name == r.receiver)
        .ok_or_else(|| format!("receiver: {:?} is not among notify.receivers", r.receiver))?;
    Ok(Rule { name: r.name.clone(), condition, tier: r.tier.clone(), tenant: r.tenant.clone(), receiver })
}

/// Checks `notify:` as the config loads: every error names its field.
pub fn check(config: &NotifyConfig, classes: &[PriorityClassConfig]) -> Result<(), String> {
    if config.rules.len() > RULES_MAX || config.receivers.len() > RECEIVERS_MAX {
        return Err(format!("notify: at most {RULES_MAX} rules and {RECEIVERS_MAX} receivers"));
    }
    if let Some(smtp) = &config.smtp {
        deliver::check_smtp(smtp).map_err(|e| format!("notify.smtp.{e}"))?;
    }
    let mut receivers = Vec::new();
    for (i, r) in config.receivers.iter().enumerate() {
        let field = format!("notify.receivers[{i}]");
        check_name(&r.name).map_err(|e| format!("{field}.name: {e}"))?;
        if receivers.iter().any(|x: &Receiver| x.name == r.name) {
            return Err(format!("{field}.name: {:?} is given twice", r.name));
        }
        if r.email_to.is_empty() && r.webhook_url.is_none() {
            return Err(format!("{field}: give email_to, webhook_url, or both"));
        }
        if r.email_to.len() > ADDRESSES_MAX {
            return Err(format!("{field}.email_to: at most {ADDRESSES_MAX} addresses"));
        }
        if !r.email_to.is_empty() && config.smtp.is_none() {
            return Err(format!("{field}.email_to: e-mail needs notify.smtp (the relay to send it through)"));
        }
        for (j, address) in r.email_to.iter().enumerate() {
            deliver::check_address(address).map_err(|e| format!("{field}.email_to[{j}]: {e}"))?;
        }
        if let Some(url) = &r.webhook_url {
            deliver::check_webhook_url(url).map_err(|e| format!("{field}.webhook_url: {e}"))?;
        }
        receivers.push(Receiver { name: r.name.clone(), email_to: Vec::new(), webhook_url: None });
    }
    let builtin = fairway_spec::PriorityClasses::builtin();
    let known_tier = |t: &str| t == "custom" || builtin.resolve(t).is_some() || classes.iter().any(|c| c.name == t);
    for (i, r) in config.rules.iter().enumerate() {
        let field = format!("notify.rules[{i}]");
        check_name(&r.name).map_err(|e| format!("{field}.name: {e}"))?;
        if config.rules[..i].iter().any(|x| x.name == r.name) {
            return Err(format!("{field}.name: {:?} is given twice", r.name));
        }
        if let Some(tier) = &r.tier
            && !known_tier(tier)
        {
            return Err(format!("{field}.tier: {tier:?} is not a priority class (built in, or in priority_classes)"));
        }
        if let Some(tenant) = &r.tenant {
            check_name(tenant).map_err(|e| format!("{field}.tenant: {e}"))?;
        }
        rule_of(r, &receivers).map_err(|e| format!("{field}.{e}"))?;
    }
    Ok(())
}

/// A name in a subject line and a label: short, printable, no spaces.
fn check_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= 63
        && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if ok { Ok(()) } else { Err(format!("{name:?} must be 1 to 63 of a-z, A-Z, 0-9, '-', '_', '.'")) }
}

#[cfg(test)]
mod tests;
