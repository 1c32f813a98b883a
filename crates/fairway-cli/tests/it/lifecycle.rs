//! One owner per data directory, nothing run twice, clean shutdown, and the lifecycle rules
//! users rely on: exits after a stop request, a restart during a grace period, children left
//! behind while the server was down.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use fairway_server::api::JobState;

use crate::server::{Api, InProcess, admin_token, kill_jobs_under, processes_with, serve_with, trainer_job};

const FAIRWAY: &str = env!("CARGO_BIN_EXE_fairway");

fn api_of(base: &str, data_dir: &Path) -> Api {
    Api::new(base.to_owned(), Some(admin_token(data_dir)))
}

fn sigterm(pid: u32) {
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), nix::sys::signal::Signal::SIGTERM).unwrap();
}

#[test]
fn a_second_server_on_the_same_data_directory_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let mut first = serve_with(dir.path(), &["--gpus", "1"], None);
    let out = Command::new(FAIRWAY)
        .args(["serve", "--gpus", "1", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(dir.path())
        .env("XDG_STATE_HOME", dir.path().join("state"))
        .stdout(Stdio::null())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "a second server started: {err}");
    assert!(err.contains(&format!("pid {}", first.child.id())) && err.contains("in use"), "{err}");
    first.child.kill().unwrap();
    first.child.wait().unwrap();
}

#[test]
fn sigterm_stops_the_server_in_seconds_and_jobs_are_readopted() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = serve_with(dir.path(), &["--gpus", "1"], None);
    let api = api_of(&server.base, dir.path());
    let id = api.submit(&trainer_job("long", "p", "medium", 1, 300, 100))[0];
    api.wait_state(id, JobState::Running);
    let started = Instant::now();
    sigterm(server.child.id());
    let status = server.child.wait().unwrap();
    assert!(status.success(), "{status:?}");
    assert!(started.elapsed() < Duration::from_secs(5), "took {:?} to stop", started.elapsed());
    assert_eq!(processes_with(&dir.path().display().to_string()).len(), 1, "the job's shim still runs");
    let mut again = serve_with(dir.path(), &["--gpus", "1"], None);
    let api = api_of(&again.base, dir.path());
    let job = api.job(id);
    assert_eq!((job.job.state, job.job.restart_count), (JobState::Running, 0), "re-adopted, not restarted");
    again.child.kill().unwrap();
    again.child.wait().unwrap();
    kill_jobs_under(dir.path());
}

/// A job that saves and exits 0 on SIGTERM, the usual pattern; `complete`: it says it is done
/// through its completion file first.
fn polite(name: &str, priority: &str, complete: bool) -> String {
    let mark = if complete { "touch $FAIRWAY_COMPLETION_FILE; " } else { "" };
    format!(
        "name: {name}\ntenant: {{ project: p }}\npriority: {priority}\nresources: {{ gpus: 1 }}\nshell: true\n\
         command: [\"trap 'echo saving; {mark}exit 0' TERM; echo up; while true; do sleep 0.05; done\"]\n\
         preemption_grace_seconds: 10\n"
    )
}

#[test]
fn an_exit_after_a_stop_request_is_that_stop_unless_the_job_says_it_completed() {
    let server = InProcess::start("1", "");
    let api = &server.api;
    let low = api.submit(&polite("trap-and-exit-0", "low", false))[0];
    api.wait_for("the low job to run", |api| api.log(low).contains("up").then_some(()));
    let high = api.submit(&trainer_job("urgent", "q", "high", 1, 2, 10))[0];
    api.wait_state(high, JobState::Succeeded);
    let low_job = api.wait_for("the low job to be back", |api| {
        let j = api.job(low);
        j.events.iter().any(|e| e.kind == "requeued").then_some(j)
    });
    assert_eq!(low_job.job.preemptions, 1, "an exit 0 after SIGTERM is a preemption, not a success");
    api.wait_for("the low job to run again", |api| (api.job(low).job.restart_count == 1).then_some(()));
    // Cancelled and exiting 0: cancelled, not succeeded.
    api.json("POST", &format!("/v1/jobs/{low}/cancel"), None);
    api.wait_state(low, JobState::Cancelled);

    // A job that says it completed before exiting 0 on SIGTERM succeeded.
    let done = api.submit(&polite("completes", "low", true))[0];
    api.wait_for("it to run", |api| api.log(done).contains("up").then_some(()));
    api.json("POST", &format!("/v1/jobs/{done}/cancel"), None);
    let job = api.wait_state(done, JobState::Succeeded);
    assert_eq!(job.job.exit_code, Some(0));
}

#[test]
fn a_restart_during_a_grace_period_keeps_its_deadline() {
    let dir = tempfile::tempdir().unwrap();
    let mut first = serve_with(dir.path(), &["--gpus", "1"], None);
    let api = api_of(&first.base, dir.path());
    // A victim that ignores SIGTERM: it is killed at its deadline, 6 s after the notice.
    let stubborn = "name: stubborn\ntenant: { project: p }\npriority: low\nresources: { gpus: 1 }\nshell: true\n\
                    command: [\"trap '' TERM; echo up; while true; do sleep 0.05; done\"]\n\
                    preemption_grace_seconds: 6\n";
    let victim = api.submit(stubborn)[0];
    api.wait_for("the victim to run", |api| api.log(victim).contains("up").then_some(()));
    let high = api.submit(&trainer_job("urgent", "q", "high", 1, 2, 10))[0];
    let noticed = api.wait_for("the preemption", |api| {
        api.job(victim).events.iter().find(|e| e.kind == "preempted").map(|e| e.at_ms)
    });
    first.child.kill().unwrap();
    first.child.wait().unwrap();
    std::thread::sleep(Duration::from_secs(3));
    let mut second = serve_with(dir.path(), &["--gpus", "1"], None);
    let api = api_of(&second.base, dir.path());
    let job = api.job(victim);
    assert_eq!(job.job.state, JobState::Preempting, "still on its way out after the restart");
    api.wait_state(high, JobState::Succeeded);
    let job = api.job(victim);
    let requeued = job.events.iter().find(|e| e.kind == "requeued").expect("requeued once killed").clone();
    let waited = requeued.at_ms - noticed;
    assert!((5_500..8_500).contains(&waited), "killed {waited} ms after the notice, not at its 6 s deadline");
    assert!(requeued.message.contains("killed after its grace period"), "{requeued:?}");
    assert_eq!(job.job.preemptions, 1);
    second.child.kill().unwrap();
    second.child.wait().unwrap();
    kill_jobs_under(dir.path());
}

#[test]
fn what_a_job_left_running_while_the_server_was_down_is_killed_at_restart() {
    let dir = tempfile::tempdir().unwrap();
    let marker = format!("{}.{}", std::process::id(), 3013);
    let mut first = serve_with(dir.path(), &["--gpus", "1"], None);
    let api = api_of(&first.base, dir.path());
    // The job's shell leaves a child behind (in its own session, out of the job's group)
    // and exits 2 s later, while the server is down.
    let job = format!(
        "name: leaky\ntenant: {{ project: p }}\nresources: {{ gpus: 1 }}\nshell: true\n\
         command: [\"setsid sleep {marker} & echo started; sleep 2\"]\n"
    );
    let id = api.submit(&job)[0];
    api.wait_for("the job to start", |api| api.log(id).contains("started").then_some(()));
    first.child.kill().unwrap();
    first.child.wait().unwrap();
    std::thread::sleep(Duration::from_secs(5));
    assert_eq!(processes_with(&format!("sleep {marker}")).len(), 1, "the leftover runs while the server is down");
    let mut second = serve_with(dir.path(), &["--gpus", "1"], None);
    let api = api_of(&second.base, dir.path());
    api.wait_state(id, JobState::Succeeded);
    assert!(processes_with(&format!("sleep {marker}")).is_empty(), "the leftover survived the restart");
    second.child.kill().unwrap();
    second.child.wait().unwrap();
    kill_jobs_under(dir.path());
}

#[test]
fn a_relative_data_directory_means_the_same_place_from_anywhere() {
    let root = tempfile::tempdir().unwrap();
    let workdir = root.path().join("a");
    let elsewhere = root.path().join("b");
    std::fs::create_dir_all(&workdir).unwrap();
    std::fs::create_dir_all(&elsewhere).unwrap();
    let mut server = serve_with(Path::new("fairway-data"), &["--gpus", "1"], Some(&workdir));
    let data = workdir.join("fairway-data");
    let api = api_of(&server.base, &data);
    // A job in another working directory can still write its checkpoint.
    let job = format!(
        "name: ckpt\ntenant: {{ project: p }}\nresources: {{ gpus: 1 }}\nshell: true\nworking_dir: {:?}\n\
         command: [\"echo $FAIRWAY_CHECKPOINT_DIR; touch $FAIRWAY_CHECKPOINT_DIR/saved && echo saved\"]\n",
        elsewhere.display()
    );
    let id = api.submit(&job)[0];
    api.wait_state(id, JobState::Succeeded);
    let log = api.log(id);
    assert!(log.starts_with('/') && log.contains("saved"), "{log}");
    server.child.kill().unwrap();
    server.child.wait().unwrap();
    // From another directory, the same store by another path: the finished job stays
    // finished, nothing runs again.
    let mut again = serve_with(Path::new("../a/fairway-data"), &["--gpus", "1"], Some(&elsewhere));
    let api = api_of(&again.base, &data);
    std::thread::sleep(Duration::from_millis(500));
    let job = api.job(id);
    assert_eq!((job.job.state, job.job.restart_count), (JobState::Succeeded, 0));
    again.child.kill().unwrap();
    again.child.wait().unwrap();
}

/// A small tmpfs, unmounted (lazily) when dropped. Mounting needs root, as CI has: the
/// test says so plainly rather than skip.
struct SmallDisk {
    dir: tempfile::TempDir,
}

impl SmallDisk {
    fn mount(size: &str) -> SmallDisk {
        let dir = tempfile::tempdir().unwrap();
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir.path())
            .output()
            .expect("mount(8) runs");
        assert!(
            out.status.success(),
            "this test mounts a small tmpfs to fill it, which needs root (CI runs as root): {}",
            String::from_utf8_lossy(&out.stderr)
        );
        SmallDisk { dir }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Writes a file until the disk is full.
    fn fill(&self) -> std::path::PathBuf {
        use std::io::Write;
        let path = self.path().join("filler");
        let mut file = std::fs::File::create(&path).unwrap();
        let block = vec![0u8; 64 * 1024];
        while file.write_all(&block).is_ok() {}
        let _ = file.sync_all();
        path
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(self.dir.path()).status();
    }
}

/// A job as the API shows it: id, state, and (node, GPUs) per replica.
type JobFacts = (i64, JobState, Vec<(String, Vec<u32>)>);

/// What the API says of every job.
fn snapshot(api: &Api) -> Vec<JobFacts> {
    let mut jobs: Vec<_> = api
        .jobs("limit=10000")
        .into_iter()
        .map(|j| (j.id, j.state, j.placement.into_iter().map(|r| (r.node, r.gpus)).collect()))
        .collect();
    jobs.sort();
    jobs
}

/// The nodes' view of who holds which GPU equals the jobs' view of where they run.
fn assert_nodes_agree_with_jobs(api: &Api) {
    let (_, nodes) = api.json("GET", "/v1/nodes", None);
    let mut by_nodes: Vec<(String, u64, i64)> = Vec::new();
    for node in nodes["nodes"].as_array().unwrap() {
        for gpu in node["gpus"].as_array().unwrap() {
            if let Some(job) = gpu["job"].as_i64() {
                by_nodes.push((node["name"].as_str().unwrap().to_owned(), gpu["index"].as_u64().unwrap(), job));
            }
        }
    }
    let mut by_jobs: Vec<(String, u64, i64)> = Vec::new();
    for job in api.jobs("state=running,preempting,stopping&limit=10000") {
        for replica in &job.placement {
            by_jobs.extend(replica.gpus.iter().map(|g| (replica.node.clone(), u64::from(*g), job.id)));
        }
    }
    by_nodes.sort();
    by_jobs.sort();
    assert_eq!(by_nodes, by_jobs, "nodes and jobs disagree on who holds which GPU");
}

#[test]
fn a_full_disk_stops_changes_and_the_server_recovers_when_it_is_freed() {
    let disk = SmallDisk::mount("6m");
    let data = disk.path().join("data");
    let mut server = serve_with(&data, &["--gpus", "2"], None);
    let api = api_of(&server.base, &data);
    let sleeper = |name: &str| {
        format!(
            "name: {name}\ntenant: {{ project: p }}\nresources: {{ gpus: 1 }}\nshell: true\ncommand: [\"sleep 60\"]\n"
        )
    };
    let running = api.submit(&sleeper("running"))[0];
    let short = api
        .submit("name: short\ntenant: { project: p }\nresources: { gpus: 1 }\nshell: true\ncommand: [\"sleep 2\"]\n")
        [0];
    api.wait_state(running, JobState::Running);
    api.wait_state(short, JobState::Running);

    // 1. The disk fills. Submissions go on until the store can no longer take one; every
    //    acknowledged one must survive, and the first refusal says why.
    let filler = disk.fill();
    let mut acknowledged = Vec::new();
    let refusal = loop {
        let (status, body) =
            api.request("POST", "/v1/jobs", Some(sleeper(&format!("q-{}", acknowledged.len())).into_bytes()));
        match status {
            201 => acknowledged
                .push(serde_json::from_slice::<serde_json::Value>(&body).unwrap()["jobs"][0]["id"].as_i64().unwrap()),
            _ => break (status, String::from_utf8_lossy(&body).into_owned()),
        }
        assert!(acknowledged.len() < 5_000, "the store never reported the full disk");
    };
    assert_eq!(refusal.0, 503, "{refusal:?}");
    assert!(refusal.1.contains("store_unavailable"), "{refusal:?}");
    let (_, health) = api.json("GET", "/healthz", None);
    assert_eq!(health["status"], "degraded", "{health}");
    assert!(health["problem"].as_str().unwrap().contains("cannot write the store"), "{health}");
    // Changes are refused and leave things as they were; reads work.
    let (status, _) = api.json("POST", &format!("/v1/jobs/{running}/cancel"), None);
    assert_eq!(status, 503);
    assert_eq!(api.job(running).job.state, JobState::Running);
    // The short job ends while the disk is full.
    std::thread::sleep(Duration::from_secs(3));

    // 2. The disk is freed: the server recovers by itself.
    std::fs::remove_file(filler).unwrap();
    api.wait_for("the server to recover", |api| {
        let (_, health) = api.json("GET", "/healthz", None);
        (health["status"] == "ok").then_some(())
    });
    for &id in &acknowledged {
        assert_eq!(api.request("GET", &format!("/v1/jobs/{id}"), None).0, 200, "acknowledged job {id} lost");
    }
    // It ended while the disk was full: its shim kept trying to record the exit until it
    // could, so it succeeded rather than being judged lost.
    api.wait_state(short, JobState::Succeeded);
    assert_eq!(api.job(running).job.state, JobState::Running, "the running job kept running");
    api.wait_for("every pending job to have a reason", |api| {
        api.jobs("state=pending&limit=10000").iter().all(|j| !j.reasons.is_empty()).then_some(())
    });
    assert_nodes_agree_with_jobs(&api);
    // Changes work again: a cancel, a submission.
    assert_eq!(api.json("POST", &format!("/v1/jobs/{running}/cancel"), None).0, 200);
    api.wait_state(running, JobState::Cancelled);
    api.submit(&sleeper("after"));

    // 3. What the server holds equals what a restart builds from the store.
    std::thread::sleep(Duration::from_millis(500));
    let before = snapshot(&api);
    server.child.kill().unwrap();
    server.child.wait().unwrap();
    let mut again = serve_with(&data, &["--gpus", "2"], None);
    let api = api_of(&again.base, &data);
    assert_eq!(snapshot(&api), before, "memory and store were out of step");
    assert_nodes_agree_with_jobs(&api);
    again.child.kill().unwrap();
    again.child.wait().unwrap();
    kill_jobs_under(&data);
}

#[test]
fn a_gang_that_no_longer_fits_after_a_restart_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let mut first = serve_with(dir.path(), &["--gpus", "2x4"], None);
    let api = api_of(&first.base, dir.path());
    // A quota of 0 keeps the gang pending while the cluster still could hold it.
    api.json("PUT", "/v1/quotas/project/p", Some(r#"{"gpus_max": 0}"#));
    let gang =
        "name: gang\ntenant: { project: p }\nresources: { gpus: 4 }\nreplicas: 2\nshell: true\ncommand: [\"true\"]\n";
    let id = api.submit(gang)[0];
    api.wait_for("the quota to hold it", |api| {
        api.job(id).job.reasons.first().map(|r| r.code == "over_quota")?.then_some(())
    });
    first.child.kill().unwrap();
    first.child.wait().unwrap();
    // Half the nodes are gone: the gang can never start, and says so rather than waiting.
    let mut second = serve_with(dir.path(), &["--gpus", "4"], None);
    let api = api_of(&second.base, dir.path());
    let reason =
        api.wait_for("a never_fits reason", |api| api.job(id).job.reasons.into_iter().find(|r| r.code == "never_fits"));
    assert!(reason.message.contains("2 replicas of 4 GPUs") && reason.message.contains("at most 1"), "{reason:?}");
    second.child.kill().unwrap();
    second.child.wait().unwrap();
}

/// The shim of `replica` of the job's first run, stopped with its job (SIGKILL to its group).
fn kill_replica(data_dir: &Path, id: i64, replica: usize) {
    let dir = data_dir.join(format!("jobs/{id}/runs/0/replica-{replica}"));
    let shims = processes_with(&format!("__shim {}", dir.display()));
    assert_eq!(shims.len(), 1, "one shim for {}", dir.display());
    nix::sys::signal::killpg(nix::unistd::Pid::from_raw(shims[0] as i32), nix::sys::signal::Signal::SIGKILL).unwrap();
    let gone = Instant::now();
    while !processes_with(&format!("__shim {}", dir.display())).is_empty() {
        assert!(gone.elapsed() < Duration::from_secs(10), "the shim outlived SIGKILL");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Processes whose command line is exactly `sleep <marker>` (not a shell that will run it).
fn sleeping(marker: &str) -> usize {
    let wanted = format!("sleep\0{marker}\0");
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter(|e| std::fs::read(e.path().join("cmdline")).is_ok_and(|c| c == wanted.as_bytes()))
        .count()
}

/// A gang whose first run sleeps until killed and whose later runs succeed at once: each
/// replica leaves a mark in the checkpoint directory the first time.
fn gang_job(marker: &str, replicas: u32) -> String {
    format!(
        "name: gang\ntenant: {{ project: p }}\nresources: {{ gpus: 1 }}\nreplicas: {replicas}\nshell: true\n\
         command: [\"m=$FAIRWAY_CHECKPOINT_DIR/ran-$FAIRWAY_REPLICA_INDEX; [ -e $m ] && exit 0; touch $m; exec sleep {marker}\"]\n"
    )
}

/// The server died while launching a gang: one replica ran, the other's launch never
/// happened. The run never started as a whole, so the replica that ran is stopped and the
/// gang runs again, counting neither a failure nor a restart.
#[test]
fn a_gang_launched_in_part_before_the_server_died_runs_again_whole() {
    let dir = tempfile::tempdir().unwrap();
    let marker = format!("{}.{}", std::process::id(), 3017);
    let mut first = serve_with(dir.path(), &["--gpus", "2"], None);
    let api = api_of(&first.base, dir.path());
    let id = api.submit(&gang_job(&marker, 2))[0];
    api.wait_for("both replicas to run", |_| (sleeping(&marker) == 2).then_some(()));
    first.child.kill().unwrap();
    first.child.wait().unwrap();
    // What the old server leaves when it dies between the replicas' launches.
    kill_replica(dir.path(), id, 1);
    std::fs::remove_dir_all(dir.path().join(format!("jobs/{id}/runs/0/replica-1"))).unwrap();
    let mut second = serve_with(dir.path(), &["--gpus", "2"], None);
    let api = api_of(&second.base, dir.path());
    let job = api.wait_state(id, JobState::Succeeded);
    assert_eq!((job.job.failures, job.job.restart_count), (0, 0), "{:?}", job.events);
    assert!(sleeping(&marker) == 0, "the replica that ran was not stopped");
    second.child.kill().unwrap();
    second.child.wait().unwrap();
    kill_jobs_under(dir.path());
}

/// The server died after writing a replica's `launch.json` but before starting its shim:
/// the job never ran, so it runs now, and is not judged lost.
#[test]
fn a_launch_the_server_did_not_finish_is_not_judged_lost() {
    let dir = tempfile::tempdir().unwrap();
    let marker = format!("{}.{}", std::process::id(), 3019);
    let mut first = serve_with(dir.path(), &["--gpus", "1"], None);
    let api = api_of(&first.base, dir.path());
    let id = api.submit(&gang_job(&marker, 1))[0];
    api.wait_for("the job to run", |_| (sleeping(&marker) == 1).then_some(()));
    first.child.kill().unwrap();
    first.child.wait().unwrap();
    kill_replica(dir.path(), id, 0);
    // Only what the server writes before it starts the shim is left.
    let replica = dir.path().join(format!("jobs/{id}/runs/0/replica-0"));
    for entry in std::fs::read_dir(&replica).unwrap().flatten() {
        if ![fairway_exec::LAUNCH_FILE, fairway_exec::SHIM_LOG_FILE].contains(&entry.file_name().to_str().unwrap()) {
            std::fs::remove_file(entry.path()).unwrap();
        }
    }
    std::fs::remove_file(dir.path().join(format!("jobs/{id}/checkpoint/ran-0"))).unwrap();
    let mut second = serve_with(dir.path(), &["--gpus", "1"], None);
    let api = api_of(&second.base, dir.path());
    api.wait_for("the job to run again", |_| (sleeping(&marker) == 1).then_some(()));
    let job = api.job(id);
    assert_eq!((job.job.state, job.job.failures, job.job.restart_count), (JobState::Running, 0, 0), "{:?}", job.events);
    second.child.kill().unwrap();
    second.child.wait().unwrap();
    kill_jobs_under(dir.path());
}

/// One replica of a gang failed while the server was down, the other still runs: the gang
/// has failed, and the survivor is stopped rather than adopted alone.
#[test]
fn a_replica_that_failed_while_the_server_was_down_fails_its_gang() {
    let dir = tempfile::tempdir().unwrap();
    let marker = format!("{}.{}", std::process::id(), 3023);
    let mut first = serve_with(dir.path(), &["--gpus", "2"], None);
    let api = api_of(&first.base, dir.path());
    let job = format!(
        "name: gang\ntenant: {{ project: p }}\nresources: {{ gpus: 1 }}\nreplicas: 2\nshell: true\n\
         preemption_grace_seconds: 1\n\
         command: [\"[ $FAIRWAY_REPLICA_INDEX = 1 ] && {{ sleep 1; exit 3; }}; exec sleep {marker}\"]\n"
    );
    let id = api.submit(&job)[0];
    api.wait_for("the replica that lives on to run", |_| (sleeping(&marker) == 1).then_some(()));
    // The server launches the replicas one after the other: under load replica 0 may sleep
    // before replica 1's shim has started it, and a server killed then never launched it.
    let replica_1 = dir.path().join(format!("jobs/{id}/runs/0/replica-1"));
    api.wait_for("replica 1 to start", |_| replica_1.join(fairway_exec::JOB_STARTED_FILE).exists().then_some(()));
    first.child.kill().unwrap();
    first.child.wait().unwrap();
    let exit = replica_1.join(fairway_exec::EXIT_FILE);
    let waited = Instant::now();
    while !exit.exists() {
        assert!(waited.elapsed() < Duration::from_secs(30), "replica 1 did not exit");
        std::thread::sleep(Duration::from_millis(50));
    }
    let mut second = serve_with(dir.path(), &["--gpus", "2"], None);
    let api = api_of(&second.base, dir.path());
    let job = api.wait_state(id, JobState::Failed);
    assert_eq!(job.job.exit_code, Some(3), "{:?}", job.events);
    assert!(sleeping(&marker) == 0, "the replica left alone still runs");
    second.child.kill().unwrap();
    second.child.wait().unwrap();
    kill_jobs_under(dir.path());
}

/// Shares of one GPU: two jobs asking for 600 and 400 thousandths run side by side on the one
/// GPU of the node, each told its device (the same index) and its share; a third share finds
/// no room and says how much one GPU has free. A restarted server adopts both runs where
/// they are, and the third still waits; when the 400 share ends, the third takes its place.
#[test]
fn shares_of_one_gpu_run_side_by_side_and_survive_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let marker = format!("{}.{}", std::process::id(), 3031);
    let share = |name: &str, milli: u32| {
        format!(
            "name: {name}\ntenant: {{ project: p }}\nresources: {{ gpu_milli: {milli} }}\nshell: true\n\
             command: [\"echo \\\"$CUDA_VISIBLE_DEVICES $FAIRWAY_GPU_SHARE_MILLI\\\" > $FAIRWAY_CHECKPOINT_DIR/seen; \
             exec sleep {marker}\"]\n"
        )
    };
    let mut first = serve_with(dir.path(), &["--gpus", "1"], None);
    let api = api_of(&first.base, dir.path());
    let big = api.submit(&share("big", 600))[0];
    let small = api.submit(&share("small", 400))[0];
    api.wait_for("both shares to run", |_| (sleeping(&marker) == 2).then_some(()));
    let seen = |id: i64| std::fs::read_to_string(dir.path().join(format!("jobs/{id}/checkpoint/seen"))).unwrap();
    assert_eq!(seen(big).trim(), "0 600");
    assert_eq!(seen(small).trim(), "0 400");
    for id in [big, small] {
        let job = api.job(id);
        assert_eq!(job.job.placement.len(), 1);
        assert_eq!(job.job.placement[0].gpus, vec![0], "{:?}", job.job.placement);
        assert_eq!(job.spec["resources"]["gpu_milli"], serde_json::json!(if id == big { 600 } else { 400 }));
    }
    // The node view lists both shares on GPU 0, the larger as its job.
    let (_, nodes) = api.json("GET", "/v1/nodes", None);
    let gpu0 = &nodes["nodes"][0]["gpus"][0];
    assert_eq!(gpu0["job"], serde_json::json!(big), "{nodes}");
    let shares = serde_json::json!([{"job": big, "gpu_milli": 600}, {"job": small, "gpu_milli": 400}]);
    assert_eq!(gpu0["shares"], shares, "{nodes}");
    // The project holds one GPU in thousandths, which quotas count exactly.
    let (_, quotas) = api.json("GET", "/v1/quotas", None);
    let p = quotas["quotas"].as_array().unwrap().iter().find(|q| q["account"] == "p").expect("p holds GPUs");
    assert_eq!((p["gpu_milli_used"].as_u64(), p["gpus_used"].as_u64()), (Some(1000), Some(1)), "{quotas}");
    let third = api.submit(&share("third", 300))[0];
    let (_, why) = api.json("GET", &format!("/v1/jobs/{third}/why"), None);
    let text = why.to_string();
    assert!(text.contains("300/1000 of one GPU") && text.contains("0/1000"), "{text}");

    first.child.kill().unwrap();
    first.child.wait().unwrap();
    let mut second = serve_with(dir.path(), &["--gpus", "1"], None);
    let api = api_of(&second.base, dir.path());
    assert_eq!(api.wait_state(big, JobState::Running).job.restart_count, 0);
    assert_eq!(api.wait_state(small, JobState::Running).job.restart_count, 0);
    assert_eq!(api.job(third).job.state, JobState::Pending);
    assert_eq!(sleeping(&marker), 2, "the runs were adopted, not started again");

    api.json("POST", &format!("/v1/jobs/{small}/cancel"), None);
    api.wait_state(small, JobState::Cancelled);
    api.wait_state(third, JobState::Running);
    let path = dir.path().join(format!("jobs/{third}/checkpoint/seen"));
    let line = api.wait_for("the third share to see its GPU", |_| {
        std::fs::read_to_string(&path).ok().filter(|s| s.ends_with('\n'))
    });
    assert_eq!(line.trim(), "0 300");
    let (_, quotas) = api.json("GET", "/v1/quotas", None);
    let p = quotas["quotas"].as_array().unwrap().iter().find(|q| q["account"] == "p").expect("p holds GPUs");
    assert_eq!((p["gpu_milli_used"].as_u64(), p["gpus_used"].as_u64()), (Some(900), Some(1)), "{quotas}");
    second.child.kill().unwrap();
    second.child.wait().unwrap();
    kill_jobs_under(dir.path());
}
