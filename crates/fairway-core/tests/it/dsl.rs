//! A small text language for scheduler scenarios and its interpreter.
//!
//! A scenario is a list of commands, one per line; `#` starts a comment. Times are seconds
//! (`90`, `90s`) or milliseconds (`1500ms`); `at=` is optional and defaults to the time of
//! the previous command (it may never go back). Names stand for ids: jobs get `JobId`s in
//! submission order (or `id=`), nodes, accounts and GPU models are numbered in order of first
//! appearance, so ties "by lowest id" follow the order names first appear in the file.
//!
//! ```text
//! config policy=fifo|priority|fairway backfill=on|off preemption=on|off scoring=best-fit|spread
//!        packing=random|dot-product|gpu-clustering|gpu-packing|best-fit|fgd|fairway|core
//!        order=fifo|priority victims-max=N candidates-max=N attempts-max=N starts-max=N
//!        wide-steps-max=N
//!        nodes-scored-max=N fair-half-life=TIME|off reservations=N|off default-runtime=TIME
//!        history=N                                           (before any other command)
//! node [add] N gpus=8 model=A100 cpu=64000 mem=512000        (these are the defaults)
//! node remove|drain|uncordon N
//! images N IMG,IMG...                                        (the images node N holds now)
//! quota ACCOUNT [gpus=N] [cpu=N] [mem=N] | quota ACCOUNT none
//! weight ACCOUNT N                                           (fair-share weight)
//! recent ACCOUNT [gpu-milli=N] [cpu=N] [mem=N] as-of=TIME     (a recent average saved before
//!        a restart: `Event::RestoreRecentUsage`)
//! submit J prio=0 gpus=1 share=MILLI replicas=1 model=M cpu=0 mem=0 user=default project=default
//!        (share=: a share of one GPU in thousandths, with no whole GPU unless gpus= says;
//!        image=IMG: the container image it runs)
//!        preemptible=yes|no policy=preempt|never grace=30 ckpt=SECS max-runtime=SECS max-total-runtime=SECS estimate=SECS min-run=SECS
//!        preemptions-per-hour=N overrides-protection=yes|no preemption-delay=SECS id=N
//! cancel J | exit J outcome=succeeded|failed|requeue | checkpoint J   (checkpoint time = at)
//! cycle                 run a cycle; prints its decisions, the starts it took back, then
//!                       every pending job's reasons
//! why J...              the human sentences of `Scheduler::why` (or the job's state)
//! status [J...]         each job's state (all jobs when none is named)
//! forecast [jobs-max=N] every pending job's position and expected start (`Scheduler::forecast`)
//! wakeup                when the core next wants a cycle without an event (`next_wakeup`)
//! usage ACCOUNT         what is charged to the account, and its quota
//! share ACCOUNT...      each account's fair share (`Scheduler::fair_share`) and recent average
//! work                  the core's counters so far: jobs considered, victim searches (what a
//!                       cycle cost; scenarios about wake-ups pin how many looks they take)
//! ```
//!
//! Every event goes to an [`Oracle`] too, and after every cycle `check_invariants` and the
//! oracle's checks must pass, or the scenario fails.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use fairway_core::packing;
use fairway_core::*;

use crate::oracle::Oracle;

/// Names <-> ids, in order of first appearance.
#[derive(Default)]
struct Names {
    jobs: BTreeMap<String, JobId>,
    job_names: BTreeMap<u64, String>,
    next_job: u64,
    nodes: Vec<String>,
    accounts: Vec<String>,
    models: Vec<String>,
    images: Vec<String>,
}

fn intern(list: &mut Vec<String>, name: &str) -> usize {
    match list.iter().position(|n| n == name) {
        Some(i) => i,
        None => {
            list.push(name.to_string());
            list.len() - 1
        }
    }
}

impl Names {
    fn node(&mut self, name: &str) -> NodeId {
        NodeId(intern(&mut self.nodes, name) as u32)
    }
    fn account(&mut self, name: &str) -> AccountId {
        AccountId(intern(&mut self.accounts, name) as u32)
    }
    fn image(&mut self, name: &str) -> ImageId {
        ImageId(intern(&mut self.images, name) as u32)
    }
    fn model(&mut self, name: &str) -> GpuModel {
        GpuModel(intern(&mut self.models, name) as u16)
    }
    fn job(&self, name: &str) -> Result<JobId, String> {
        self.jobs.get(name).copied().ok_or(format!("unknown job {name}"))
    }
    fn new_job(&mut self, name: &str, id: Option<u64>) -> Result<JobId, String> {
        if self.jobs.contains_key(name) {
            return Err(format!("job name {name} used twice"));
        }
        let id = id.unwrap_or(self.next_job);
        if self.job_names.contains_key(&id) {
            return Err(format!("job id {id} used twice"));
        }
        self.next_job = self.next_job.max(id + 1);
        self.jobs.insert(name.to_string(), JobId(id));
        self.job_names.insert(id, name.to_string());
        Ok(JobId(id))
    }

    fn j(&self, id: JobId) -> String {
        self.job_names.get(&id.0).cloned().unwrap_or_else(|| id.to_string())
    }
    fn n(&self, id: NodeId) -> String {
        self.nodes.get(id.0 as usize).cloned().unwrap_or_else(|| id.to_string())
    }
    fn a(&self, id: AccountId) -> String {
        self.accounts.get(id.0 as usize).cloned().unwrap_or_else(|| id.to_string())
    }
    fn m(&self, id: GpuModel) -> String {
        self.models.get(id.0 as usize).cloned().unwrap_or_else(|| id.to_string())
    }

    /// Replace `job#N`, `node#N`, `account#N` and `gpu-model#N` in a core message by names.
    fn rename(&self, text: &str) -> String {
        let mut out = String::new();
        let mut rest = text;
        'outer: while !rest.is_empty() {
            for prefix in ["job#", "node#", "account#", "gpu-model#"] {
                if let Some(after) = rest.strip_prefix(prefix) {
                    let digits = after.bytes().take_while(u8::is_ascii_digit).count();
                    if let Ok(n) = after[..digits].parse::<u64>() {
                        out.push_str(&match prefix {
                            "job#" => self.j(JobId(n)),
                            "node#" => self.n(NodeId(n as u32)),
                            "account#" => self.a(AccountId(n as u32)),
                            _ => self.m(GpuModel(n as u16)),
                        });
                        rest = &after[digits..];
                        continue 'outer;
                    }
                }
            }
            let c = rest.chars().next().expect("non-empty");
            out.push(c);
            rest = &rest[c.len_utf8()..];
        }
        out
    }

    fn placement(&self, p: &Placement) -> String {
        let parts: Vec<String> = p
            .replicas()
            .iter()
            .map(|r| format!("{}[{}]", self.n(r.node), gpu_list(&r.gpus.iter().collect::<Vec<_>>())))
            .collect();
        parts.join(" ")
    }

    fn reason(&self, r: &PendingReason) -> String {
        match r {
            PendingReason::OverQuota { account, resource, requested, used, limit, limit_from } => {
                let [requested, used, limit] = [requested, used, limit].map(|a| resource.format_amount(*a));
                let from = match limit_from {
                    LimitSource::Quota => String::new(),
                    LimitSource::BorrowingLimit { cohort } => format!(" borrowing limit in {}", self.a(*cohort)),
                };
                format!(
                    "over_quota({} {}: used {used} + {requested} > {limit}{from})",
                    self.a(*account),
                    resource.name()
                )
            }
            PendingReason::CohortExhausted { cohort, resource, requested, used, limit, .. } => {
                let [requested, used, limit] = [requested, used, limit].map(|a| resource.format_amount(*a));
                format!(
                    "cohort_exhausted({} {}: used {used} + {requested} > {limit})",
                    self.a(*cohort),
                    resource.name()
                )
            }
            PendingReason::NeverFits {
                gpus_per_replica,
                gpu_model,
                resource,
                requested,
                largest,
                replicas,
                replicas_max,
            } => {
                let why = match resource {
                    Some(kind) => format!("{} {requested} > {largest}", kind.name()),
                    None if *replicas_max > 0 => format!("{replicas} replicas > {replicas_max} the nodes hold"),
                    None => "no node has it all".into(),
                };
                format!("never_fits({gpus_per_replica} GPUs/replica{}; {why})", self.model_suffix(*gpu_model))
            }
            PendingReason::NoFit { gpus_per_replica, replicas, gpu_model, gpus_free_max, nodes_matching } => format!(
                "no_fit({replicas}x{gpus_per_replica} GPUs{}; max free {gpus_free_max} on {nodes_matching} node{})",
                self.model_suffix(*gpu_model),
                if *nodes_matching == 1 { "" } else { "s" }
            ),
            PendingReason::NoShareFit { gpu_milli, gpu_model, share_free_max, nodes_matching } => format!(
                "no_share_fit({gpu_milli}/1000{}; max free {share_free_max} on {nodes_matching} node{})",
                self.model_suffix(*gpu_model),
                if *nodes_matching == 1 { "" } else { "s" }
            ),
            PendingReason::WaitingForPreemption { victims } => {
                let v: Vec<String> = victims.iter().map(|v| self.j(*v)).collect();
                format!("waiting_for_preemption({})", v.join(" "))
            }
            PendingReason::BlockedBehind { job, priority } => {
                format!("blocked_behind({} prio {priority})", self.j(*job))
            }
            PendingReason::VictimsProtected { until } => format!("victims_protected(until {until})"),
            PendingReason::PreemptionDelayed { until } => format!("preemption_delayed(until {until})"),
            PendingReason::HeldForReservation { job, at } => format!("held_for_reservation({} at {at})", self.j(*job)),
            PendingReason::NoPreemptionCandidates
            | PendingReason::PreemptionDisabled
            | PendingReason::PreemptionBudgetExhausted
            | PendingReason::NotYetConsidered => r.label().to_string(),
        }
    }

    fn model_suffix(&self, m: Option<GpuModel>) -> String {
        m.map(|m| format!(" of {}", self.m(m))).unwrap_or_default()
    }

    fn decision(&self, d: &Decision) -> String {
        match d {
            Decision::Start { job, placement } => format!("start {} {}", self.j(*job), self.placement(placement)),
            Decision::Preempt { victim, preemptor, deadline, cause } => {
                // A reclaim says so; priority, the usual cause, goes unsaid.
                let cause = match cause {
                    PreemptCause::Priority => String::new(),
                    PreemptCause::Reclaim { cohort } => format!(" reclaim({})", self.a(*cohort)),
                };
                format!("preempt {} for {} deadline={deadline}{cause}", self.j(*victim), self.j(*preemptor))
            }
            Decision::Stop { job, cause } => {
                let cause = match cause {
                    StopCause::Cancelled => "cancelled",
                    StopCause::RuntimeLimit => "runtime-limit",
                };
                format!("stop {} {cause}", self.j(*job))
            }
            Decision::Requeued { job, cause: RequeueCause::NodeRemoved } => {
                format!("requeued {} node-removed", self.j(*job))
            }
        }
    }

    fn status(&self, s: &Scheduler, id: JobId) -> String {
        match s.job_status(id) {
            None => "gone".to_string(),
            Some(JobStatus::Pending { reasons, reserved }) => {
                let mut out = "pending".to_string();
                if let Some(p) = reserved {
                    let _ = write!(out, ", holds {}", self.placement(p));
                }
                if !reasons.is_empty() {
                    let r: Vec<String> = reasons.iter().map(|r| self.reason(r)).collect();
                    let _ = write!(out, ": {}", r.join(", "));
                }
                out
            }
            Some(JobStatus::Running { placement, started_at }) => {
                format!("running {} since {started_at}", self.placement(placement))
            }
            Some(JobStatus::Preempting { placement, preemptor, deadline }) => {
                format!("preempting {} for {} until {deadline}", self.placement(placement), self.j(preemptor))
            }
            Some(JobStatus::Stopping { placement, cause }) => {
                format!("stopping {} ({cause:?})", self.placement(placement))
            }
        }
    }
}

/// `0,1,2,3` as `0-3`; runs of three or more are ranges.
fn gpu_list(gpus: &[u32]) -> String {
    let mut parts = Vec::new();
    let mut i = 0;
    while i < gpus.len() {
        let mut j = i;
        while j + 1 < gpus.len() && gpus[j + 1] == gpus[j] + 1 {
            j += 1;
        }
        if j >= i + 2 {
            parts.push(format!("{}-{}", gpus[i], gpus[j]));
        } else {
            parts.extend(gpus[i..=j].iter().map(u32::to_string));
        }
        i = j + 1;
    }
    parts.join(",")
}

const SUBMIT_KEYS: &[&str] = &[
    "prio",
    "gpus",
    "share",
    "image",
    "replicas",
    "model",
    "cpu",
    "mem",
    "user",
    "project",
    "preemptible",
    "policy",
    "grace",
    "ckpt",
    "max-runtime",
    "max-total-runtime",
    "estimate",
    "min-run",
    "preemptions-per-hour",
    "overrides-protection",
    "preemption-delay",
    "id",
];

fn parse_time(v: &str) -> Result<u64, String> {
    let bad = || format!("bad time {v:?}");
    if let Some(ms) = v.strip_suffix("ms") {
        ms.parse().map_err(|_| bad())
    } else {
        let secs: u64 = v.strip_suffix('s').unwrap_or(v).parse().map_err(|_| bad())?;
        Ok(secs * 1000)
    }
}

fn parse_num<T: std::str::FromStr>(key: &str, v: &str) -> Result<T, String> {
    v.parse().map_err(|_| format!("bad number for {key}: {v:?}"))
}

fn parse_bool(key: &str, v: &str) -> Result<bool, String> {
    match v {
        "yes" | "on" | "true" => Ok(true),
        "no" | "off" | "false" => Ok(false),
        _ => Err(format!("bad flag for {key}: {v:?}")),
    }
}

/// One command line: the command, positional words, `key=value` pairs.
struct Line<'a> {
    cmd: &'a str,
    args: Vec<&'a str>,
    kv: Vec<(&'a str, &'a str)>,
}

impl<'a> Line<'a> {
    fn parse(text: &'a str) -> Line<'a> {
        let mut words = text.split_whitespace();
        let cmd = words.next().unwrap_or("");
        let mut args = Vec::new();
        let mut kv = Vec::new();
        for w in words {
            match w.split_once('=') {
                Some((k, v)) => kv.push((k, v)),
                None => args.push(w),
            }
        }
        Line { cmd, args, kv }
    }

    fn arg(&self, i: usize) -> Result<&'a str, String> {
        self.args.get(i).copied().ok_or(format!("{}: missing argument {}", self.cmd, i + 1))
    }

    /// Reject keys the command does not know (typos would silently change a scenario).
    fn only(&self, keys: &[&str]) -> Result<(), String> {
        for (k, _) in &self.kv {
            if !keys.contains(k) && *k != "at" {
                return Err(format!("{}: unknown key {k}", self.cmd));
            }
        }
        Ok(())
    }

    fn get(&self, key: &str) -> Option<&'a str> {
        self.kv.iter().rev().find(|(k, _)| *k == key).map(|(_, v)| *v)
    }
}

pub struct Runner {
    config: Config,
    sched: Option<Scheduler>,
    oracle: Oracle,
    names: Names,
    now: Time,
    out: String,
}

impl Runner {
    pub fn new() -> Runner {
        Runner {
            config: Config::default(),
            sched: None,
            oracle: Oracle::new(),
            names: Names::default(),
            now: Time::ZERO,
            out: String::new(),
        }
    }

    /// Run a whole script; `Ok(transcript)` or `Err(what went wrong, with the transcript so far)`.
    pub fn run(mut self, script: &str) -> Result<String, String> {
        for (n, raw) in script.lines().enumerate() {
            let text = raw.split(" #").next().unwrap_or("").trim();
            if text.is_empty() || text.starts_with('#') {
                continue;
            }
            if let Err(e) = self.line(text) {
                return Err(format!("line {}: {raw}\n  {e}\ntranscript so far:\n{}", n + 1, self.out));
            }
        }
        Ok(self.out)
    }

    fn sched(&mut self) -> &mut Scheduler {
        let config = self.config.clone();
        self.sched.get_or_insert_with(|| Scheduler::new(config))
    }

    fn set_time(&mut self, line: &Line) -> Result<(), String> {
        if let Some(v) = line.get("at") {
            let t = Time(parse_time(v)?);
            if t < self.now {
                return Err(format!("time goes back from {} to {t}", self.now));
            }
            self.now = t;
        }
        Ok(())
    }

    fn apply(&mut self, what: &str, event: Event) -> Result<(), String> {
        let now = self.now;
        match self.sched().apply(event.clone(), now) {
            Ok(()) => {
                let s = self.sched.as_ref().expect("created by sched()");
                self.oracle.applied(s, &event, now).map_err(|e| format!("oracle after {what}: {e}"))
            }
            Err(e) => {
                let msg = self.names.rename(&e.to_string());
                let _ = writeln!(self.out, "error: {what}: {msg}");
                Ok(())
            }
        }
    }

    fn line(&mut self, text: &str) -> Result<(), String> {
        let line = Line::parse(text);
        if line.cmd != "config" {
            self.set_time(&line)?;
        }
        match line.cmd {
            "config" => self.config(&line),
            "node" => self.node(&line),
            "images" => {
                line.only(&[])?;
                let node = self.names.node(line.arg(0)?);
                let list = line.args.get(1).copied().unwrap_or("");
                let images = list.split(',').filter(|n| !n.is_empty()).map(|n| self.names.image(n)).collect();
                self.apply(text, Event::NodeImages { node, images })
            }
            "quota" => self.quota(&line),
            "member" => self.member(&line),
            "weight" => {
                line.only(&[])?;
                let account = self.names.account(line.arg(0)?);
                let weight = parse_num("weight", line.arg(1)?)?;
                let text = format!("weight {}", line.args.join(" "));
                self.apply(&text, Event::SetFairShareWeight { account, weight })
            }
            "recent" => {
                line.only(&["gpu-milli", "cpu", "mem", "as-of"])?;
                let account = self.names.account(line.arg(0)?);
                let num = |key: &str| line.get(key).map_or(Ok(0), |v| parse_num(key, v));
                let recent =
                    RecentUsage { gpu_milli: num("gpu-milli")?, cpu_millis: num("cpu")?, memory_mib: num("mem")? };
                let as_of = Time(parse_time(line.get("as-of").ok_or("recent: as-of= is required")?)?);
                let text = format!("recent {}", line.args.join(" "));
                self.apply(&text, Event::RestoreRecentUsage { account, recent, as_of })
            }
            "submit" => self.submit(&line),
            "restore" => self.restore(&line),
            "restore-hold" => self.restore_hold(&line),
            "cancel" => {
                line.only(&[])?;
                let job = self.names.job(line.arg(0)?)?;
                self.apply(text, Event::Cancel(job))
            }
            "exit" => {
                line.only(&["outcome"])?;
                let job = self.names.job(line.arg(0)?)?;
                let outcome = match line.get("outcome").ok_or("exit: outcome= is required")? {
                    "succeeded" => ExitOutcome::Succeeded,
                    "failed" => ExitOutcome::Failed,
                    "requeue" => ExitOutcome::Requeue,
                    other => return Err(format!("bad outcome {other}")),
                };
                self.apply(text, Event::Exited { job, outcome })
            }
            "checkpoint" => {
                line.only(&[])?;
                let job = self.names.job(line.arg(0)?)?;
                let at = self.now;
                self.apply(text, Event::CheckpointReported { job, at })
            }
            "cycle" => {
                line.only(&[])?;
                self.cycle()
            }
            "why" => {
                line.only(&[])?;
                for name in &line.args {
                    let id = self.names.job(name)?;
                    let s = self.sched();
                    let reasons: Vec<String> = s.why(id).iter().map(ToString::to_string).collect();
                    let s = self.sched.as_ref().expect("created");
                    if reasons.is_empty() {
                        let status = self.names.status(s, id);
                        let _ = writeln!(self.out, "why {name}: {status}");
                    }
                    for r in reasons {
                        let r = self.names.rename(&r);
                        let _ = writeln!(self.out, "why {name}: {r}");
                    }
                }
                Ok(())
            }
            "status" => {
                line.only(&[])?;
                let ids: Vec<(String, JobId)> = if line.args.is_empty() {
                    let mut all: Vec<(String, JobId)> =
                        self.names.jobs.iter().map(|(n, id)| (n.clone(), *id)).collect();
                    all.sort_by_key(|(_, id)| *id);
                    all
                } else {
                    line.args.iter().map(|n| Ok((n.to_string(), self.names.job(n)?))).collect::<Result<_, String>>()?
                };
                self.sched();
                let s = self.sched.as_ref().expect("created");
                for (name, id) in ids {
                    let st = self.names.status(s, id);
                    let _ = writeln!(self.out, "status {name}: {st}");
                }
                Ok(())
            }
            "forecast" => {
                line.only(&["jobs-max"])?;
                let jobs_max = line.get("jobs-max").map_or(Ok(usize::MAX), |v| parse_num("jobs-max", v))?;
                let now = self.now;
                let estimates = self.sched().forecast(now, jobs_max);
                for e in estimates {
                    let start = match e.start {
                        StartEstimate::At(t) => format!("at {t}"),
                        StartEstimate::NotBefore(t) => format!("not before {t}"),
                        StartEstimate::NotPlaceable => "not placeable".to_owned(),
                        StartEstimate::NotForecast => "not forecast".to_owned(),
                    };
                    let name = self.names.rename(&e.job.to_string());
                    let _ = writeln!(self.out, "forecast #{} {name}: {start}", e.position);
                }
                Ok(())
            }
            "wakeup" => {
                line.only(&[])?;
                let next = self.sched().next_wakeup();
                let _ = writeln!(self.out, "wakeup {}", next.map_or("none".to_owned(), |t| t.to_string()));
                Ok(())
            }
            "work" => {
                line.only(&[])?;
                let c = self.sched().counters();
                let _ =
                    writeln!(self.out, "work: {} considered, {} searches", c.jobs_considered, c.preemption_searches);
                Ok(())
            }
            "share" => {
                line.only(&[])?;
                let now = self.now;
                for name in &line.args {
                    let account = self.names.account(name);
                    let share = self.sched().fair_share(account, now).map_or("off".to_string(), |s| format!("{s:.4}"));
                    let recent = self.sched().recent_usage(now);
                    let recent = recent.iter().find(|(a, _)| *a == account).map(|(_, r)| *r).unwrap_or_default();
                    let _ = writeln!(self.out, "share {name}: {share} (recent gpu-milli={})", recent.gpu_milli);
                }
                Ok(())
            }
            "usage" => {
                line.only(&[])?;
                let name = line.arg(0)?;
                let account = self.names.account(name);
                let (used, quota) = self.sched().account_usage(account);
                let quota = match quota {
                    None => "no quota".to_string(),
                    Some(q) => {
                        let mut parts = Vec::new();
                        if let Some(g) = q.gpus_max {
                            parts.push(format!("gpus={g}"));
                        }
                        if let Some(c) = q.cpu_millis_max {
                            parts.push(format!("cpu={c}"));
                        }
                        if let Some(m) = q.memory_mib_max {
                            parts.push(format!("mem={m}"));
                        }
                        format!("quota {}", parts.join(" "))
                    }
                };
                let _ = writeln!(self.out, "usage {name}: {used}; {quota}");
                Ok(())
            }
            other => Err(format!("unknown command {other}")),
        }
    }

    fn config(&mut self, line: &Line) -> Result<(), String> {
        if self.sched.is_some() {
            return Err("config must come before every other command".into());
        }
        line.only(&[
            "policy",
            "backfill",
            "preemption",
            "scoring",
            "packing",
            "image-locality",
            "order",
            "victims-max",
            "candidates-max",
            "wide-steps-max",
            "attempts-max",
            "cycle-victims-max",
            "starts-max",
            "nodes-scored-max",
            "fair-half-life",
            "reservations",
            "default-runtime",
            "history",
        ])?;
        // The preset first, so that later keys refine it.
        if let Some(p) = line.get("policy") {
            self.config.policy = match p {
                "fifo" => Policy::fifo(),
                "priority" => Policy::priority(),
                "fairway" => Policy::fairway(),
                other => return Err(format!("unknown policy {other}")),
            };
        }
        let limits = &mut self.config.limits;
        for &(k, v) in &line.kv {
            match k {
                "policy" => {}
                "backfill" => self.config.policy.backfill = parse_bool(k, v)?,
                "preemption" => self.config.policy.preemption = parse_bool(k, v)?,
                "scoring" => {
                    self.config.policy.scoring = ScoringPolicy::from_name(v).ok_or(format!("unknown scoring {v}"))?
                }
                "image-locality" => self.config.policy.image_locality_permille = parse_num(k, v)?,
                "packing" if v == "core" => self.config.policy.packing = None,
                "packing" => {
                    self.config.policy.packing = Some(v.parse().map_err(|e: packing::UnknownPolicy| e.to_string())?)
                }
                "order" => {
                    self.config.policy.order = match v {
                        "fifo" => QueueOrder::Fifo,
                        "priority" => QueueOrder::Priority,
                        "priority-shortest-first" => QueueOrder::PriorityShortestFirst,
                        other => return Err(format!("unknown order {other}")),
                    }
                }
                "victims-max" => limits.victims_per_preemption_max = parse_num(k, v)?,
                "candidates-max" => limits.victim_candidates_max = parse_num(k, v)?,
                "wide-steps-max" => limits.wide_search_steps_max = parse_num(k, v)?,
                "attempts-max" => limits.preemption_attempts_per_cycle_max = parse_num(k, v)?,
                "cycle-victims-max" => limits.victims_per_cycle_max = parse_num(k, v)?,
                "starts-max" => limits.starts_per_cycle_max = parse_num(k, v)?,
                "nodes-scored-max" => limits.candidate_nodes_scored_max = parse_num(k, v)?,
                "fair-half-life" => {
                    self.config.policy.fair_share = match v {
                        "off" => None,
                        _ => Some(FairSharing { half_life_ms: parse_time(v)? }),
                    }
                }
                "reservations" => {
                    self.config.policy.reservations = match v {
                        "off" => None,
                        _ => Some(Reservations { count_max: parse_num(k, v)? }),
                    }
                }
                "default-runtime" => self.config.policy.estimates.default_runtime_ms = parse_time(v)?,
                "history" => self.config.policy.estimates.history_runs_max = parse_num(k, v)?,
                _ => unreachable!("checked by only()"),
            }
        }
        Ok(())
    }

    fn node(&mut self, line: &Line) -> Result<(), String> {
        let text = format!("node {}", line.args.join(" "));
        let (verb, name) = match line.args.as_slice() {
            [name] => ("add", *name),
            [verb, name] => (*verb, *name),
            _ => return Err("node: expected `node [add|remove|drain|uncordon] NAME`".into()),
        };
        if verb != "add" {
            line.only(&[])?;
        }
        let id = self.names.node(name);
        let event = match verb {
            "add" => {
                line.only(&["gpus", "model", "cpu", "mem"])?;
                let gpus = line.get("gpus").map_or(Ok(8), |v| parse_num("gpus", v))?;
                let cpu = line.get("cpu").map_or(Ok(64_000), |v| parse_num("cpu", v))?;
                let mem = line.get("mem").map_or(Ok(512_000), |v| parse_num("mem", v))?;
                let model = self.names.model(line.get("model").unwrap_or("A100"));
                Event::NodeAdded(NodeSpec { id, gpu_model: model, capacity: Resources::new(gpus, cpu, mem) })
            }
            "remove" => Event::NodeRemoved(id),
            "drain" => Event::NodeDrained(id),
            "uncordon" => Event::NodeUncordoned(id),
            other => return Err(format!("node: unknown verb {other}")),
        };
        self.apply(&text, event)
    }

    fn quota(&mut self, line: &Line) -> Result<(), String> {
        line.only(&["gpus", "cpu", "mem"])?;
        let account = self.names.account(line.arg(0)?);
        let quota = if line.args.get(1) == Some(&"none") {
            None
        } else {
            Some(Quota {
                gpus_max: line.get("gpus").map(|v| parse_num("gpus", v)).transpose()?,
                cpu_millis_max: line.get("cpu").map(|v| parse_num("cpu", v)).transpose()?,
                memory_mib_max: line.get("mem").map(|v| parse_num("mem", v)).transpose()?,
            })
        };
        let text = format!("quota {}", line.args.join(" "));
        self.apply(&text, Event::SetQuota { account, quota })
    }

    /// `member PROJECT cohort=C gpus=N [cpu=N] [mem=N] [borrow=N] [lend=N] [borrow-cpu=N]
    /// [lend-cpu=N]`, or `member PROJECT none`: a project's place in a cohort.
    fn member(&mut self, line: &Line) -> Result<(), String> {
        line.only(&["cohort", "gpus", "cpu", "mem", "borrow", "lend", "borrow-cpu", "lend-cpu"])?;
        let project = self.names.account(line.arg(0)?);
        let num = |key: &str| line.get(key).map(|v| parse_num::<u64>(key, v)).transpose();
        let gpus = |key: &str| line.get(key).map(|v| parse_num::<u32>(key, v)).transpose();
        let nominal = if line.args.get(1) == Some(&"none") {
            None
        } else {
            let cohort = self.names.account(line.get("cohort").ok_or("member: cohort= is required")?);
            Some(NominalQuota {
                cohort,
                nominal: Quota { gpus_max: gpus("gpus")?, cpu_millis_max: num("cpu")?, memory_mib_max: num("mem")? },
                borrowing_limit: Quota {
                    gpus_max: gpus("borrow")?,
                    cpu_millis_max: num("borrow-cpu")?,
                    memory_mib_max: None,
                },
                lending_limit: Quota {
                    gpus_max: gpus("lend")?,
                    cpu_millis_max: num("lend-cpu")?,
                    memory_mib_max: None,
                },
            })
        };
        let text = format!("member {}", line.args.join(" "));
        self.apply(&text, Event::SetNominalQuota { project, nominal })
    }

    fn submit(&mut self, line: &Line) -> Result<(), String> {
        line.only(SUBMIT_KEYS)?;
        let (name, spec) = self.job_spec(line)?;
        self.apply(&format!("submit {name}"), Event::Submit(spec))
    }

    /// `restore NAME <submit keys> submitted=T [running=n1:0,1+n2:0,1 started=T
    /// [stopping=cancelled|runtime-limit|PREEMPTOR deadline=T]] [runtime-done=T]
    /// [preemptions=N]`: a job known before a driver restart.
    fn restore(&mut self, line: &Line) -> Result<(), String> {
        let mut keys = SUBMIT_KEYS.to_vec();
        keys.extend([
            "submitted",
            "running",
            "started",
            "stopping",
            "deadline",
            "runtime-done",
            "preemptions",
            "preempted",
        ]);
        line.only(&keys)?;
        let (name, spec) = self.job_spec(line)?;
        let stopping = match line.get("stopping") {
            None => None,
            Some("cancelled") => Some(RestoredStop::Stopped(StopCause::Cancelled)),
            Some("runtime-limit") => Some(RestoredStop::Stopped(StopCause::RuntimeLimit)),
            Some(preemptor) => Some(RestoredStop::Preempted {
                preemptor: self.names.job(preemptor)?,
                deadline: Time(parse_time(line.get("deadline").ok_or("restore: stopping= needs deadline=")?)?),
            }),
        };
        let running = match line.get("running") {
            None => None,
            Some(text) => {
                let started_at = Time(line.get("started").map_or(Ok(0), parse_time)?);
                Some(RestoredRun { placement: self.placement(text), started_at, stopping })
            }
        };
        let restored = RestoredJob {
            spec,
            submitted_at: Time(parse_time(line.get("submitted").ok_or("restore: submitted= is required")?)?),
            runtime_done_ms: line.get("runtime-done").map_or(Ok(0), parse_time)?,
            preemptions: line.get("preemptions").map_or(Ok(0), |v| parse_num("preemptions", v))?,
            preempted_at: line
                .get("preempted")
                .unwrap_or("")
                .split(',')
                .filter(|t| !t.is_empty())
                .map(|t| parse_time(t).map(Time))
                .collect::<Result<_, _>>()?,
            last_checkpoint: None,
            running,
        };
        self.apply(&format!("restore {name}"), Event::Restore(restored))
    }

    /// `restore-hold NAME n1:0,1+n2:2,3 victims=a,b`: a preemptor's hold after a restart.
    fn restore_hold(&mut self, line: &Line) -> Result<(), String> {
        line.only(&["victims"])?;
        let preemptor = self.names.job(line.arg(0)?)?;
        let placement = self.placement(line.arg(1)?);
        let victims = line
            .get("victims")
            .unwrap_or("")
            .split(',')
            .filter(|v| !v.is_empty())
            .map(|v| self.names.job(v))
            .collect::<Result<Vec<_>, _>>()?;
        let what = format!("restore-hold {}", line.args.join(" "));
        self.apply(&what, Event::RestoreHold(RestoredHold { preemptor, placement, victims }))
    }

    /// `n1:0,1+n2:2,3`: one replica per `+`, a node and its GPU indices.
    fn placement(&mut self, text: &str) -> Placement {
        let mut replicas = Vec::new();
        for replica in text.split('+') {
            let (node, gpus) = replica.split_once(':').unwrap_or((replica, ""));
            let indices = gpus.split(',').filter(|g| !g.is_empty()).filter_map(|g| g.parse().ok());
            let gpus = GpuSet::from_indices(indices).expect("a scenario's placement names each GPU once, below 64");
            replicas.push(ReplicaPlacement { node: self.names.node(node), gpus });
        }
        Placement::new(replicas)
    }

    fn job_spec(&mut self, line: &Line) -> Result<(String, JobSpec), String> {
        let name = line.arg(0)?;
        let id = self.names.new_job(name, line.get("id").map(|v| parse_num("id", v)).transpose()?)?;
        let num = |k: &str, default: u64| line.get(k).map_or(Ok(default), |v| parse_num::<u64>(k, v));
        let mut spec = JobSpec::new(
            id,
            line.get("prio").map_or(Ok(0), |v| parse_num("prio", v))?,
            match line.get("share") {
                // A share of one GPU, in thousandths (no whole GPUs unless named).
                Some(v) => Resources {
                    gpu_milli: parse_num("share", v)?,
                    ..Resources::new(num("gpus", 0)? as u32, num("cpu", 0)?, num("mem", 0)?)
                },
                None => Resources::new(num("gpus", 1)? as u32, num("cpu", 0)?, num("mem", 0)?),
            },
        );
        spec.replicas = num("replicas", 1)? as u32;
        spec.gpu_model = line.get("model").map(|m| self.names.model(m));
        spec.image = line.get("image").map(|i| self.names.image(i));
        spec.user = self.names.account(line.get("user").unwrap_or("default"));
        spec.project = self.names.account(line.get("project").unwrap_or("default"));
        spec.preemptible = line.get("preemptible").map_or(Ok(true), |v| parse_bool("preemptible", v))?;
        spec.preemption_policy = match line.get("policy").unwrap_or("preempt") {
            "preempt" => PreemptionPolicy::PreemptLowerPriority,
            "never" => PreemptionPolicy::Never,
            other => return Err(format!("unknown preemption policy {other}")),
        };
        spec.grace_ms = line.get("grace").map_or(Ok(30_000), parse_time)?;
        spec.checkpoint_interval_ms = line.get("ckpt").map(parse_time).transpose()?;
        spec.max_runtime_ms = line.get("max-runtime").map(parse_time).transpose()?;
        spec.max_total_runtime_ms = line.get("max-total-runtime").map(parse_time).transpose()?;
        spec.runtime_estimate_ms = line.get("estimate").map(parse_time).transpose()?;
        spec.min_run_before_preemption_ms = line.get("min-run").map_or(Ok(0), parse_time)?;
        spec.preemptions_per_hour_max =
            line.get("preemptions-per-hour").map(|v| parse_num("preemptions-per-hour", v)).transpose()?;
        spec.overrides_protection =
            line.get("overrides-protection").map_or(Ok(false), |v| parse_bool("overrides-protection", v))?;
        spec.preemption_delay_ms = line.get("preemption-delay").map_or(Ok(0), parse_time)?;
        Ok((name.to_string(), spec))
    }

    fn cycle(&mut self) -> Result<(), String> {
        let now = self.now;
        self.sched();
        let s = self.sched.as_mut().expect("created");
        self.oracle.before_cycle(s, now)?;
        let outcome = s.cycle(now);
        let _ = writeln!(self.out, "cycle {now}");
        for d in &outcome.decisions {
            let _ = writeln!(self.out, "  {}", self.names.decision(d));
        }
        for id in &outcome.taken_back {
            let _ = writeln!(self.out, "  start taken back {}", self.names.j(*id));
        }
        let pending: Vec<JobId> = s.pending().collect();
        for id in pending {
            let reasons: Vec<String> = s.why(id).iter().map(|r| self.names.reason(r)).collect();
            let reasons = if reasons.is_empty() { "-".to_string() } else { reasons.join(", ") };
            let _ = writeln!(self.out, "  pending {}: {reasons}", self.names.j(id));
        }
        self.oracle.after_cycle(s, &outcome).map_err(|e| self.names.rename(&e))
    }
}

#[test]
fn gpu_lists_compress_runs() {
    assert_eq!(gpu_list(&[0, 1, 2, 3]), "0-3");
    assert_eq!(gpu_list(&[0, 1, 4, 5, 6, 7]), "0,1,4-7");
    assert_eq!(gpu_list(&[]), "");
}

#[test]
fn names_replace_ids_in_messages() {
    let mut names = Names::default();
    names.new_job("a", None).unwrap();
    names.new_job("b", Some(12)).unwrap();
    names.node("n1");
    assert_eq!(names.rename("job#12 and job#0 on node#0, job#99"), "b and a on n1, job#99");
}
