//! Summary statistics, JSON output, terminal table and report files, on hand-computed runs.

use std::path::{Path, PathBuf};

use fairway_sim::metrics::{
    JobRecord, RunResult, SCHEMA_VERSION, SimReport, SubmitEta, UtilSample, nearest_rank, summarize,
};
use fairway_sim::report::{MAX_PLOT_POINTS, render_table, write_report};

const MS_PER_HOUR: f64 = 3_600_000.0;

#[allow(clippy::too_many_arguments)]
fn job(
    name: &str,
    tier: &str,
    tenant: &str,
    gpus: u32,
    submit_ms: u64,
    first_start_ms: Option<u64>,
    finish_ms: Option<u64>,
    work_ms: u64,
) -> JobRecord {
    JobRecord {
        name: name.into(),
        tier: tier.into(),
        tenant: tenant.into(),
        gpu_milli: u64::from(gpus) * 1000,
        submit_ms,
        first_start_ms,
        finish_ms,
        work_ms,
        preemptions: 0,
        lost_gpu_ms: 0,
        queued_ms: first_start_ms.unwrap_or(100_000).saturating_sub(submit_ms),
        eta_at_submit: SubmitEta::NotMeasured,
        image_waits_ms: Vec::new(),
        image_wait_gpu_ms: 0,
    }
}

fn run(policy: &str, capacity_gpus: u32, records: Vec<JobRecord>, util: &[(u64, u32)]) -> RunResult {
    RunResult {
        policy: policy.to_owned(),
        placement: "fairway".to_owned(),
        capacity_gpus,
        records,
        util: util
            .iter()
            .map(|&(t_ms, gpus)| UtilSample { t_ms, gpu_milli_allocated: u64::from(gpus) * 1000 })
            .collect(),
        events_processed: 10,
        cycles: 5,
        end_ms: 100_000,
        core_counters: fairway_core::Counters::default(),
    }
}

/// Two jobs: `j1` (high, tenant a) waits 1 s and runs 60 s; `j2` (low, tenant b) waits
/// 61 s, is preempted once (0.5 GPU-hours lost) and is still running at the end.
fn tiny(policy: &str) -> RunResult {
    let j1 = job("j1", "high", "a", 2, 0, Some(1_000), Some(61_000), 60_000);
    let mut j2 = job("j2", "low", "b", 4, 0, Some(61_000), None, 30_000);
    j2.preemptions = 1;
    j2.lost_gpu_ms = 1_800_000;
    run(policy, 4, vec![j1, j2], &[(0, 0), (1_000, 2), (61_000, 4)])
}

/// 20 started jobs of tier "high" with waits 1..=20 s (submitted in scrambled order) and
/// 60 s of work each, plus one job that never started.
fn twenty_waits() -> RunResult {
    let mut records = Vec::new();
    for i in 0..20u64 {
        let k = (i * 7) % 20 + 1; // a permutation of 1..=20
        let submit = i * 100;
        let start = submit + k * 1_000;
        records.push(job(&format!("j{i}"), "high", "t", 1, submit, Some(start), Some(start + 60_000), 60_000));
    }
    records.push(job("never", "high", "t", 1, 50, None, None, 60_000));
    run("fifo", 8, records, &[])
}

#[test]
fn nearest_rank_percentiles() {
    let v: Vec<u64> = (1..=20).collect();
    assert_eq!(nearest_rank(&v, 50), Some(10));
    assert_eq!(nearest_rank(&v, 95), Some(19));
    assert_eq!(nearest_rank(&v, 99), Some(20));
    assert_eq!(nearest_rank(&v, 100), Some(20));
    assert_eq!(nearest_rank(&v, 0), Some(1));
    assert_eq!(nearest_rank(&[3u64, 7, 9], 50), Some(7)); // ceil(1.5) = rank 2
    assert_eq!(nearest_rank(&[5u64], 99), Some(5));
    assert_eq!(nearest_rank::<u64>(&[], 50), None);
}

#[test]
fn waits_percentiles_and_never_started() {
    let s = summarize(&twenty_waits());
    let high = &s.tiers["high"];
    assert_eq!(high, &s.all);
    assert_eq!((high.jobs, high.started, high.finished, high.never_started), (21, 20, 20, 1));
    let w = &high.wait_seconds;
    // Mean of 1..=20 s over the 20 started jobs only; the never-started job is excluded.
    assert_eq!(w.mean, Some(10.5));
    assert_eq!(w.p50, Some(10.0));
    assert_eq!(w.p95, Some(19.0));
    assert_eq!(w.p99, Some(20.0));
    assert_eq!(w.max, Some(20.0));
    // JCT = wait + 60 s.
    let j = &high.jct_seconds;
    assert_eq!(j.mean, Some(70.5));
    assert_eq!(j.p50, Some(70.0));
    assert_eq!(j.p95, Some(79.0));
    assert_eq!(j.p99, Some(80.0));
}

#[test]
fn slowdown_is_jct_over_work_of_finished_jobs() {
    let s = summarize(&twenty_waits());
    let sd = &s.all.slowdown;
    assert_eq!(sd.p50, Some(70_000.0 / 60_000.0));
    assert_eq!(sd.p95, Some(79_000.0 / 60_000.0));
    let mean = sd.mean.unwrap();
    assert!((mean - 70.5 / 60.0).abs() < 1e-12, "{mean}");

    // Unfinished jobs and zero-work jobs are not part of the slowdown.
    let r = run(
        "p",
        4,
        vec![
            job("a", "x", "t", 1, 0, Some(10_000), Some(40_000), 10_000), // 4.0
            job("b", "x", "t", 1, 0, Some(0), None, 10_000),
            job("c", "x", "t", 1, 0, Some(0), Some(5_000), 0),
        ],
        &[],
    );
    let s = summarize(&r);
    assert_eq!(s.all.finished, 2);
    assert_eq!(s.all.slowdown.mean, Some(4.0));
    assert_eq!(s.all.slowdown.p95, Some(4.0));
    assert_eq!(s.all.jct_seconds.mean, Some(22.5));
}

#[test]
fn utilization_on_a_step_function() {
    // capacity 8; allocation 0 until 1 s, 4 until 3 s, 8 until 5 s, 2 until the end (10 s).
    let util = [(0, 0), (1_000, 4), (3_000, 8), (5_000, 2)];
    let records = vec![
        job("a", "x", "t", 4, 1_000, Some(1_000), Some(7_000), 6_000),
        job("b", "x", "t", 4, 2_000, Some(3_000), Some(5_000), 2_000),
    ];
    let mut r = run("p", 8, records, &util);
    r.end_ms = 10_000;
    let c = summarize(&r).cluster;
    // Busy window [1 s, 7 s]: 4×2000 + 8×2000 + 2×2000 GPU-ms over 8 GPUs × 6000 ms.
    assert_eq!(c.gpu_utilization, Some(28_000.0 / 48_000.0));
    assert_eq!(c.makespan_seconds, 6.0);
    // Allocation over the whole run, to end_ms: 8000 + 16000 + 2×5000.
    assert_eq!(c.gpu_hours_allocated, 34_000.0 / MS_PER_HOUR);
    assert_eq!(c.gpu_hours_useful, (4.0 * 6_000.0 + 4.0 * 2_000.0) / MS_PER_HOUR);
    assert_eq!(c.capacity_gpus, 8);

    // An unfinished job stretches the busy window to end_ms.
    r.records[1].finish_ms = None;
    let c = summarize(&r).cluster;
    assert_eq!(c.gpu_utilization, Some(34_000.0 / 72_000.0));
    assert_eq!(c.makespan_seconds, 9.0);
    assert_eq!(c.gpu_hours_useful, 24_000.0 / MS_PER_HOUR);
}

#[test]
fn empty_groups_give_null_statistics() {
    // A tier whose only job never started.
    let r = run(
        "p",
        4,
        vec![job("a", "high", "t", 1, 0, Some(0), Some(1_000), 1_000), job("b", "low", "t", 1, 0, None, None, 1_000)],
        &[(0, 1), (1_000, 0)],
    );
    let s = summarize(&r);
    let low = &s.tiers["low"];
    assert_eq!((low.jobs, low.started, low.finished, low.never_started), (1, 0, 0, 1));
    assert_eq!(low.wait_seconds.mean, None);
    assert_eq!(low.wait_seconds.max, None);
    assert_eq!(low.jct_seconds.p99, None);
    assert_eq!(low.slowdown.p50, None);
    assert!(!s.tiers.contains_key("medium"));

    // A run without jobs: everything is 0 or null, never NaN.
    let mut empty = run("p", 0, vec![], &[]);
    empty.end_ms = 0;
    let s = summarize(&empty);
    assert_eq!(s.all.jobs, 0);
    assert!(s.tiers.is_empty() && s.tenants.is_empty());
    assert_eq!(s.cluster.gpu_utilization, None);
    assert_eq!(s.cluster.makespan_seconds, 0.0);
    let json = serde_json::to_string(&s).unwrap();
    assert!(!json.contains("NaN") && !json.contains("inf"), "{json}");
    assert!(json.contains(r#""wait_seconds":{"mean":null,"p50":null,"p95":null,"p99":null,"max":null}"#));
    assert!(json.contains(r#""gpu_utilization":null"#));
    assert!(json.contains(r#""gpu_hours_lost":0.0"#));
}

/// Four jobs of one tier: estimates 30 s late (waited 2 min), exact (started at once), 60 s
/// early (waited 10 min), and none; a fifth not measured; a sixth never started.
#[test]
fn eta_errors_against_the_starts() {
    let mut late = job("late", "high", "a", 1, 0, Some(120_000), Some(200_000), 80_000);
    late.eta_at_submit = SubmitEta::At(150_000);
    let mut exact = job("exact", "high", "a", 1, 0, Some(0), Some(10_000), 10_000);
    exact.eta_at_submit = SubmitEta::At(0);
    let mut early = job("early", "high", "a", 1, 0, Some(600_000), Some(700_000), 100_000);
    early.eta_at_submit = SubmitEta::At(540_000);
    let mut none = job("none", "high", "a", 1, 0, Some(5_000), Some(6_000), 1_000);
    none.eta_at_submit = SubmitEta::Unknown;
    let unmeasured = job("unmeasured", "high", "a", 1, 0, Some(5_000), Some(6_000), 1_000);
    let mut never = job("never", "high", "a", 1, 0, None, None, 1_000);
    never.eta_at_submit = SubmitEta::At(50_000);
    let s = summarize(&run("p", 4, vec![late, exact, early, none, unmeasured, never], &[(0, 0)]));
    let e = &s.tiers["high"].eta;
    assert_eq!((e.jobs, e.without_estimate, e.waited), (4, 1, 2));
    // Errors 0, 30, 60 s: nearest-rank p50 is 30, p90 60.
    assert_eq!((e.error_seconds.p50, e.error_seconds.p90), (Some(30.0), Some(60.0)));
    // Against the waits of those that waited a minute or more: 30/120 and 60/600.
    assert_eq!((e.error_of_wait.p50, e.error_of_wait.p90), (Some(0.1), Some(0.25)));
    // (+30 + 0 − 60) / 3.
    assert_eq!(e.bias_seconds_mean, Some(-10.0));
    let table = render_table(&SimReport::from_runs("s", 1, &[run("p", 4, s_records(), &[(0, 0)])]));
    assert!(table.contains("Start-time estimates"), "{table}");
}

fn s_records() -> Vec<JobRecord> {
    let mut j = job("j", "high", "a", 1, 0, Some(0), Some(1), 1);
    j.eta_at_submit = SubmitEta::At(0);
    vec![j]
}

#[test]
fn groups_by_tenant() {
    let mut records = vec![
        job("a1", "high", "zeta", 2, 0, Some(2_000), Some(10_000), 8_000),
        job("b1", "low", "alpha", 1, 0, Some(4_000), Some(10_000), 6_000),
        job("a2", "low", "zeta", 2, 0, None, None, 8_000),
        job("b2", "high", "alpha", 1, 0, Some(0), Some(1_000), 1_000),
    ];
    records[0].preemptions = 2;
    records[0].lost_gpu_ms = 7_200_000;
    records[1].preemptions = 1;
    records[1].lost_gpu_ms = 1_800_000;
    let s = summarize(&run("p", 4, records, &[]));
    assert_eq!(s.tenants.keys().collect::<Vec<_>>(), ["alpha", "zeta"]);
    assert_eq!(s.tiers.keys().collect::<Vec<_>>(), ["high", "low"]);
    let alpha = &s.tenants["alpha"];
    assert_eq!((alpha.jobs, alpha.started, alpha.finished), (2, 2, 2));
    assert_eq!(alpha.wait_seconds.mean, Some(2.0));
    assert_eq!(alpha.preemptions, 1);
    assert_eq!(alpha.gpu_hours_lost, 0.5);
    let zeta = &s.tenants["zeta"];
    assert_eq!((zeta.jobs, zeta.started, zeta.never_started), (2, 1, 1));
    assert_eq!(zeta.wait_seconds.p99, Some(2.0));
    assert_eq!(zeta.preemptions, 2);
    assert_eq!(zeta.gpu_hours_lost, 2.0);
    assert_eq!(s.cluster.preemptions_total, 3);
    assert_eq!(s.cluster.gpu_hours_lost, 2.5);
    assert_eq!(s.all.gpu_hours_lost, 2.5);
    assert_eq!(s.tiers["high"].jobs, 2);
}

const TINY_JSON: &str = r#"{
  "schema_version": 2,
  "scenario": "tiny",
  "seed": 7,
  "policies": [
    {
      "policy": "fifo",
      "placement": "fairway",
      "all": {
        "jobs": 2,
        "started": 2,
        "finished": 1,
        "never_started": 0,
        "wait_seconds": {
          "mean": 31.0,
          "p50": 1.0,
          "p95": 61.0,
          "p99": 61.0,
          "max": 61.0
        },
        "queued_seconds": {
          "mean": 31.0,
          "p50": 1.0,
          "p95": 61.0,
          "p99": 61.0,
          "max": 61.0
        },
        "preemptions_per_job": {
          "p50": 0,
          "p99": 1,
          "max": 1
        },
        "jct_seconds": {
          "mean": 61.0,
          "p50": 61.0,
          "p95": 61.0,
          "p99": 61.0
        },
        "slowdown": {
          "mean": 1.017,
          "p50": 1.017,
          "p95": 1.017
        },
        "preemptions": 1,
        "gpu_hours_lost": 0.5,
        "eta": {
          "jobs": 0,
          "without_estimate": 0,
          "error_seconds": {
            "p50": null,
            "p90": null
          },
          "waited": 0,
          "error_of_wait": {
            "p50": null,
            "p90": null
          },
          "bias_seconds_mean": null
        },
        "images": {
          "starts": 0,
          "starts_waited": 0,
          "wait_seconds": {
            "mean": null,
            "p50": null,
            "p95": null,
            "p99": null,
            "max": null
          },
          "gpu_hours_waiting": 0.0
        }
      },
      "tiers": {
        "high": {
          "jobs": 1,
          "started": 1,
          "finished": 1,
          "never_started": 0,
          "wait_seconds": {
            "mean": 1.0,
            "p50": 1.0,
            "p95": 1.0,
            "p99": 1.0,
            "max": 1.0
          },
          "queued_seconds": {
            "mean": 1.0,
            "p50": 1.0,
            "p95": 1.0,
            "p99": 1.0,
            "max": 1.0
          },
          "preemptions_per_job": {
            "p50": 0,
            "p99": 0,
            "max": 0
          },
          "jct_seconds": {
            "mean": 61.0,
            "p50": 61.0,
            "p95": 61.0,
            "p99": 61.0
          },
          "slowdown": {
            "mean": 1.017,
            "p50": 1.017,
            "p95": 1.017
          },
          "preemptions": 0,
          "gpu_hours_lost": 0.0,
          "eta": {
            "jobs": 0,
            "without_estimate": 0,
            "error_seconds": {
              "p50": null,
              "p90": null
            },
            "waited": 0,
            "error_of_wait": {
              "p50": null,
              "p90": null
            },
            "bias_seconds_mean": null
          },
          "images": {
            "starts": 0,
            "starts_waited": 0,
            "wait_seconds": {
              "mean": null,
              "p50": null,
              "p95": null,
              "p99": null,
              "max": null
            },
            "gpu_hours_waiting": 0.0
          }
        },
        "low": {
          "jobs": 1,
          "started": 1,
          "finished": 0,
          "never_started": 0,
          "wait_seconds": {
            "mean": 61.0,
            "p50": 61.0,
            "p95": 61.0,
            "p99": 61.0,
            "max": 61.0
          },
          "queued_seconds": {
            "mean": 61.0,
            "p50": 61.0,
            "p95": 61.0,
            "p99": 61.0,
            "max": 61.0
          },
          "preemptions_per_job": {
            "p50": 1,
            "p99": 1,
            "max": 1
          },
          "jct_seconds": {
            "mean": null,
            "p50": null,
            "p95": null,
            "p99": null
          },
          "slowdown": {
            "mean": null,
            "p50": null,
            "p95": null
          },
          "preemptions": 1,
          "gpu_hours_lost": 0.5,
          "eta": {
            "jobs": 0,
            "without_estimate": 0,
            "error_seconds": {
              "p50": null,
              "p90": null
            },
            "waited": 0,
            "error_of_wait": {
              "p50": null,
              "p90": null
            },
            "bias_seconds_mean": null
          },
          "images": {
            "starts": 0,
            "starts_waited": 0,
            "wait_seconds": {
              "mean": null,
              "p50": null,
              "p95": null,
              "p99": null,
              "max": null
            },
            "gpu_hours_waiting": 0.0
          }
        }
      },
      "tenants": {
        "a": {
          "jobs": 1,
          "started": 1,
          "finished": 1,
          "never_started": 0,
          "wait_seconds": {
            "mean": 1.0,
            "p50": 1.0,
            "p95": 1.0,
            "p99": 1.0,
            "max": 1.0
          },
          "queued_seconds": {
            "mean": 1.0,
            "p50": 1.0,
            "p95": 1.0,
            "p99": 1.0,
            "max": 1.0
          },
          "preemptions_per_job": {
            "p50": 0,
            "p99": 0,
            "max": 0
          },
          "jct_seconds": {
            "mean": 61.0,
            "p50": 61.0,
            "p95": 61.0,
            "p99": 61.0
          },
          "slowdown": {
            "mean": 1.017,
            "p50": 1.017,
            "p95": 1.017
          },
          "preemptions": 0,
          "gpu_hours_lost": 0.0,
          "eta": {
            "jobs": 0,
            "without_estimate": 0,
            "error_seconds": {
              "p50": null,
              "p90": null
            },
            "waited": 0,
            "error_of_wait": {
              "p50": null,
              "p90": null
            },
            "bias_seconds_mean": null
          },
          "images": {
            "starts": 0,
            "starts_waited": 0,
            "wait_seconds": {
              "mean": null,
              "p50": null,
              "p95": null,
              "p99": null,
              "max": null
            },
            "gpu_hours_waiting": 0.0
          }
        },
        "b": {
          "jobs": 1,
          "started": 1,
          "finished": 0,
          "never_started": 0,
          "wait_seconds": {
            "mean": 61.0,
            "p50": 61.0,
            "p95": 61.0,
            "p99": 61.0,
            "max": 61.0
          },
          "queued_seconds": {
            "mean": 61.0,
            "p50": 61.0,
            "p95": 61.0,
            "p99": 61.0,
            "max": 61.0
          },
          "preemptions_per_job": {
            "p50": 1,
            "p99": 1,
            "max": 1
          },
          "jct_seconds": {
            "mean": null,
            "p50": null,
            "p95": null,
            "p99": null
          },
          "slowdown": {
            "mean": null,
            "p50": null,
            "p95": null
          },
          "preemptions": 1,
          "gpu_hours_lost": 0.5,
          "eta": {
            "jobs": 0,
            "without_estimate": 0,
            "error_seconds": {
              "p50": null,
              "p90": null
            },
            "waited": 0,
            "error_of_wait": {
              "p50": null,
              "p90": null
            },
            "bias_seconds_mean": null
          },
          "images": {
            "starts": 0,
            "starts_waited": 0,
            "wait_seconds": {
              "mean": null,
              "p50": null,
              "p95": null,
              "p99": null,
              "max": null
            },
            "gpu_hours_waiting": 0.0
          }
        }
      },
      "cluster": {
        "capacity_gpus": 4,
        "gpu_utilization": 0.69,
        "gpu_utilization_useful": 0.3,
        "gpu_hours_allocated": 0.077,
        "gpu_hours_useful": 0.033,
        "gpu_hours_lost": 0.5,
        "preemptions_total": 1,
        "reclaims_total": 0,
        "makespan_seconds": 100.0,
        "events_processed": 10,
        "cycles": 5,
        "preemptors_moved": 0,
        "starts_taken_back": 0
      }
    }
  ]
}
"#;

#[test]
fn json_snapshot_of_a_tiny_report() {
    let report = SimReport::from_runs("tiny", 7, &[tiny("fifo")]);
    assert_eq!(SCHEMA_VERSION, 2);
    assert_eq!(report.to_json(), TINY_JSON);
    // Plain serde serialisation gives the same document.
    assert_eq!(serde_json::to_string_pretty(&report).unwrap() + "\n", TINY_JSON);
    // Full precision is kept in memory; rounding happens at serialisation only.
    assert_eq!(report.policies[0].all.slowdown.p50, Some(61_000.0 / 60_000.0));
}

#[test]
fn json_rounds_to_three_decimals() {
    let mut r = tiny("fifo");
    r.records[0].finish_ms = Some(61_000 + 2); // JCT 61.002 s
    r.records[1].lost_gpu_ms = 1; // 2.78e-7 GPU-hours: rounds to zero
    let json = serde_json::to_string(&summarize(&r)).unwrap();
    assert!(json.contains(r#""jct_seconds":{"mean":61.002,"#), "{json}");
    assert!(json.contains(r#""preemptions_total":1"#), "{json}");
    assert!(json.contains(r#""gpu_hours_lost":0.0,"preemptions_total""#), "{json}");
}

const TINY_TABLE: &str = "\
Scenario: tiny  seed: 7

All jobs (wait and JCT in minutes)
policy    jobs  never started  wait mean  wait p50  wait p95  wait p99  queued mean  JCT mean  slowdown p50  preempted p50/p99/max
--------  ----  -------------  ---------  --------  --------  --------  -----------  --------  ------------  ---------------------
fifo         2              0       0.52      0.02      1.02      1.02         0.52      1.02          1.02                  0/1/1
priority     2              0       0.52      0.02      1.02      1.02         0.52      1.02          1.02                  0/1/1

Tier high (wait and JCT in minutes)
policy    jobs  never started  wait mean  wait p50  wait p95  wait p99  queued mean  JCT mean  slowdown p50  preempted p50/p99/max
--------  ----  -------------  ---------  --------  --------  --------  -----------  --------  ------------  ---------------------
fifo         1              0       0.02      0.02      0.02      0.02         0.02      1.02          1.02                  0/0/0
priority     1              0       0.02      0.02      0.02      0.02         0.02      1.02          1.02                  0/0/0

Tier low (wait and JCT in minutes)
policy    jobs  never started  wait mean  wait p50  wait p95  wait p99  queued mean  JCT mean  slowdown p50  preempted p50/p99/max
--------  ----  -------------  ---------  --------  --------  --------  -----------  --------  ------------  ---------------------
fifo         1              0       1.02      1.02      1.02      1.02         1.02         -             -                  1/1/1
priority     1              0       1.02      1.02      1.02      1.02         1.02         -             -                  1/1/1

Tenants: mean wait in minutes by policy
tenant        jobs  fifo  priority
------------  ----  ----  --------
a                1  0.02      0.02
b                1  1.02      1.02
worst tenant        1.02      1.02

Cluster
policy    placement  GPU util useful %  GPU util allocated %  preemptions  GPU-h allocated  GPU-h useful  GPU-h lost  makespan h
--------  ---------  -----------------  --------------------  -----------  ---------------  ------------  ----------  ----------
fifo      fairway                 30.0                  69.0            1             0.08          0.03        0.50        0.03
priority  fairway                 30.0                  69.0            1             0.08          0.03        0.50        0.03
";

/// The tenants' table: each tenant's mean wait under each policy, by hand (waits of 60, 120
/// and 300 s; a tenant with no job under one policy shows `-` there), the worst tenant's
/// per policy; with more tenants than it lists, those with the most jobs and a note.
#[test]
fn the_tenants_table_compares_each_tenants_mean_wait_across_policies() {
    let first = vec![
        job("a1", "low", "ads", 1, 0, Some(60_000), Some(70_000), 10_000),
        job("a2", "low", "ads", 1, 0, Some(180_000), Some(190_000), 10_000),
        job("n1", "low", "nlp", 1, 0, Some(300_000), Some(310_000), 10_000),
    ];
    let second = vec![
        job("a1", "low", "ads", 1, 0, Some(120_000), Some(130_000), 10_000),
        job("a2", "low", "ads", 1, 0, Some(120_000), Some(130_000), 10_000),
    ];
    let report = SimReport::from_runs("t", 1, &[run("fair", 4, first, &[]), run("plain", 4, second, &[])]);
    let table = render_table(&report);
    let block = table.split("\n\n").find(|b| b.starts_with("Tenants:")).expect(&table);
    let want = "\
Tenants: mean wait in minutes by policy
tenant        jobs  fair  plain
------------  ----  ----  -----
ads              2  2.00   2.00
nlp              1  5.00      -
worst tenant        5.00   2.00";
    assert_eq!(block.trim_end(), want);

    // One tenant: no such table.
    let alone = SimReport::from_runs("t", 1, &[run("p", 4, vec![job("x", "low", "ads", 1, 0, Some(0), None, 1)], &[])]);
    assert!(!render_table(&alone).contains("Tenants:"));

    // 31 tenants, tenant i with i + 1 jobs: the 30 with the most are listed, not t00.
    let many: Vec<JobRecord> = (0..31)
        .flat_map(|i| {
            (0..=i).map(move |k| job(&format!("j{i}-{k}"), "low", &format!("t{i:02}"), 1, 0, Some(0), None, 1))
        })
        .collect();
    let table = render_table(&SimReport::from_runs("t", 1, &[run("p", 64, many, &[])]));
    let block = table.split("\n\n").find(|b| b.starts_with("Tenants:")).expect(&table);
    assert!(block.lines().next().unwrap().ends_with("(30 with the most jobs; 1 more in the JSON)"), "{block}");
    assert_eq!(block.lines().count(), 1 + 2 + 30 + 1, "{block}");
    assert!(!block.contains("t00") && block.contains("t01") && block.contains("t30"), "{block}");
}

#[test]
fn render_table_rows() {
    let report = SimReport::from_runs("tiny", 7, &[tiny("fifo"), tiny("priority")]);
    let table = render_table(&report);
    assert_eq!(table, TINY_TABLE);
    assert!(!table.contains('\x1b'));
    assert!(table.lines().all(|l| l == l.trim_end()));
}

#[test]
fn render_table_marks_policies_missing_a_tier() {
    let mut other = tiny("priority");
    other.records.retain(|r| &*r.tier == "high");
    let report = SimReport::from_runs("tiny", 7, &[tiny("fifo"), other]);
    let table = render_table(&report);
    let low_block = table.split("Tier low").nth(1).unwrap();
    let priority_row = low_block.lines().find(|l| l.starts_with("priority")).unwrap();
    assert_eq!(
        priority_row.split_whitespace().collect::<Vec<_>>(),
        ["priority", "0", "0", "-", "-", "-", "-", "-", "-", "-", "0/0/0"]
    );
}

fn out_dir(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("fairway-sim-report").join(name);
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

fn two_policies() -> (SimReport, Vec<RunResult>) {
    let fifo = tiny("fifo");
    let mut fairway = tiny("fairway");
    fairway.records[1].first_start_ms = Some(20_000);
    let runs = vec![fifo, fairway];
    (SimReport::from_runs("tiny", 7, &runs), runs)
}

#[test]
fn write_report_creates_files_deterministically() {
    let (report, runs) = two_policies();
    let a = out_dir("a");
    let b = out_dir("b");
    let written_a = write_report(&a, &report, &runs).unwrap();
    let written_b = write_report(&b, &report, &runs).unwrap();
    let names: Vec<String> = written_a.iter().map(|p| p.file_name().unwrap().to_string_lossy().into_owned()).collect();
    assert_eq!(names, ["report.md", "wait-cdf-high.svg", "wait-cdf-low.svg", "gpu-utilization.svg"]);
    for (pa, pb) in written_a.iter().zip(&written_b) {
        assert_eq!(pa.parent().unwrap(), a);
        let bytes_a = std::fs::read(pa).unwrap();
        assert_eq!(bytes_a, std::fs::read(pb).unwrap(), "{} differs", pa.display());
    }
    // A second call into the same directory overwrites with identical bytes.
    let first = std::fs::read(&written_a[1]).unwrap();
    write_report(&a, &report, &runs).unwrap();
    assert_eq!(std::fs::read(&written_a[1]).unwrap(), first);

    for svg_path in &written_a[1..] {
        let svg = std::fs::read_to_string(svg_path).unwrap();
        assert!(svg.starts_with("<svg"), "{}", svg_path.display());
        assert!(svg.trim_end().ends_with("</svg>"), "{}", svg_path.display());
        assert!(svg.contains(">\nfifo\n</text>") || svg.contains(">fifo<"), "{svg}");
        assert!(svg.contains("fairway"), "{}", svg_path.display());
        assert_eq!(svg.matches("<text").count(), svg.matches("</text>").count());
    }
    let cdf = std::fs::read_to_string(&written_a[1]).unwrap();
    assert!(cdf.contains("Wait time CDF - tier high"));
    assert!(cdf.contains("fraction of jobs started"));
    let util = std::fs::read_to_string(&written_a[3]).unwrap();
    assert!(util.contains("Allocated GPUs over time"));
    assert!(util.contains("GPUs allocated"));
    assert!(util.contains("capacity (4 GPUs)"));

    let md = std::fs::read_to_string(&written_a[0]).unwrap();
    assert!(md.starts_with("# Simulation report: tiny\n"));
    assert!(md.contains("- Seed: 7\n"));
    assert!(md.contains("## How to read this report"));
    for link in ["(wait-cdf-high.svg)", "(wait-cdf-low.svg)", "(gpu-utilization.svg)"] {
        assert!(md.contains(link), "{link}");
    }
    assert!(md.contains("## Tier high (wait and JCT in minutes)"));
    assert!(md.contains("| fairway |"), "{md}");
    assert!(md.contains("| policy  | jobs | never started |"), "{md}");
}

fn polyline_point_counts(svg: &str) -> Vec<usize> {
    svg.split("<polyline")
        .skip(1)
        .map(|el| {
            let points = el.split("points=\"").nth(1).unwrap();
            points[..points.find('"').unwrap()].split_whitespace().count()
        })
        .collect()
}

#[test]
fn long_series_are_downsampled() {
    // 10,000 allocation changes and 5,000 distinct waits.
    let mut r = tiny("fifo");
    r.end_ms = 100_000_000;
    r.util = (0..10_000u64).map(|i| UtilSample { t_ms: i * 10_000, gpu_milli_allocated: (i % 5) * 1000 }).collect();
    r.records = (0..5_000u64)
        .map(|i| job(&format!("j{i}"), "high", "t", 1, 0, Some(i * 1_000), Some(i * 1_000 + 1), 1))
        .collect();
    let report = SimReport::from_runs("long", 1, std::slice::from_ref(&r));
    let dir = out_dir("long");
    let written = write_report(&dir, &report, std::slice::from_ref(&r)).unwrap();
    for path in &written[1..] {
        let svg = std::fs::read_to_string(path).unwrap();
        let counts = polyline_point_counts(&svg);
        assert!(!counts.is_empty(), "{}", path.display());
        assert!(counts.iter().all(|&c| c <= MAX_PLOT_POINTS), "{}: {counts:?}", path.display());
        assert!(counts.iter().any(|&c| c > 100), "{}: {counts:?}", path.display());
    }
}

#[test]
fn tier_names_are_sanitised_in_file_names() {
    let mut r = tiny("fifo");
    r.records[0].tier = "gold/ä b".into();
    r.records[1].tier = "gold__ b".into();
    let report = SimReport::from_runs("odd", 1, std::slice::from_ref(&r));
    let dir = out_dir("odd");
    let written = write_report(&dir, &report, std::slice::from_ref(&r)).unwrap();
    let names: Vec<String> = written.iter().map(|p| p.file_name().unwrap().to_string_lossy().into_owned()).collect();
    assert_eq!(names, ["report.md", "wait-cdf-gold___b.svg", "wait-cdf-gold___b-2.svg", "gpu-utilization.svg"]);
}

#[test]
fn write_report_reports_io_errors_with_the_path() {
    let (report, runs) = two_policies();
    let dir = out_dir("blocked");
    std::fs::create_dir_all(dir.parent().unwrap()).unwrap();
    std::fs::write(&dir, "not a directory").unwrap();
    let err = write_report(&dir.join("sub"), &report, &runs).unwrap_err();
    assert!(err.to_string().contains("blocked"), "{err}");
    std::fs::remove_file(&dir).unwrap();
}

/// The digest covers every decision-bearing field: equal runs agree, and changing any one
/// job's start, finish, preemptions or lost work, or the utilisation curve, changes it.
#[test]
fn decisions_digest_sees_every_decision() {
    let base = tiny("fairway");
    assert_eq!(base.decisions_digest(), tiny("fairway").decisions_digest());
    // Names, tiers and the policy label are not decisions.
    let mut renamed = tiny("other");
    renamed.records[0].name = "renamed".into();
    assert_eq!(base.decisions_digest(), renamed.decisions_digest());
    let changes: [fn(&mut RunResult); 7] = [
        |r| r.records[0].first_start_ms = Some(2_000),
        |r| r.records[1].finish_ms = Some(90_000),
        |r| r.records[1].preemptions = 2,
        |r| r.records[1].lost_gpu_ms += 1,
        |r| r.util[1].t_ms += 1,
        |r| r.cycles += 1,
        // Two jobs swapping their starts is a different schedule.
        |r| {
            let (a, b) = (r.records[0].first_start_ms, r.records[1].first_start_ms);
            r.records[0].first_start_ms = b;
            r.records[1].first_start_ms = a;
        },
    ];
    for (i, change) in changes.iter().enumerate() {
        let mut changed = tiny("fairway");
        change(&mut changed);
        assert_ne!(base.decisions_digest(), changed.decisions_digest(), "change {i}");
    }
}

#[test]
fn a_spread_is_the_sample_mean_deviation_and_range() {
    use fairway_sim::sweep::Spread;
    let s = Spread::of(&[2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0]).unwrap();
    assert_eq!((s.mean, s.min, s.max, s.samples), (5.0, 2.0, 9.0, 8));
    // Sample standard deviation: sqrt(32 / 7).
    assert!((s.std - (32.0f64 / 7.0).sqrt()).abs() < 1e-12, "{}", s.std);
    assert_eq!(Spread::of(&[3.5]).unwrap().std, 0.0);
    assert!(Spread::of(&[]).is_none());
}

#[test]
fn a_sweep_gathers_each_policy_figure_over_the_reports() {
    use fairway_sim::sweep::SeedSweep;
    let mut a = tiny("fairway");
    let b = tiny("fairway");
    a.records[1].preemptions = 3;
    let reports: Vec<SimReport> = [a, b]
        .iter()
        .zip([7, 8])
        .map(|(r, seed)| SimReport::from_runs("tiny", seed, std::slice::from_ref(r)))
        .collect();
    let sweep = SeedSweep::from_reports(&[7, 8], &reports);
    assert_eq!(sweep.policies, ["fairway"]);
    let preemptions = sweep.figures.iter().find(|f| f.figure == "preemptions").unwrap();
    let s = preemptions.policies[0].unwrap();
    assert_eq!((s.mean, s.min, s.max, s.samples), (2.0, 1.0, 3.0, 2));
    let low_max = sweep.figures.iter().find(|f| f.figure == "low: preemptions per job, max").unwrap();
    assert_eq!(low_max.policies[0].unwrap().max, 3.0);
    // A tier's time to first start exists for every seed; the JSON says how many samples.
    let json = sweep.to_json();
    assert!(json.contains("\"high: wait to first start, mean\"") && json.contains("\"samples\": 2"), "{json}");
}
