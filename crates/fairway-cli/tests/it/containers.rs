//! Image jobs through a container runtime, end to end: a real server, real shims and
//! trainer processes, and a stand-in for the `docker` CLI (no container engine runs on this
//! machine or in CI). The stand-in records every call, answers `version` (the server's check
//! that a daemon answers), `image inspect`, `pull` and `rm -f`, and runs `docker run`'s
//! command in place of a container: it exports the `-e` variables and, as a bind mount
//! would, resolves paths under each `-v` target to the host directory mounted there, then
//! `exec`s the command, so signals reach it as they reach a container's init through
//! docker's signal proxy.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use fairway_server::api::JobState;

use crate::server::{InProcess, kill_jobs_under};

const FAIRWAY: &str = env!("CARGO_BIN_EXE_fairway");
const IMAGE: &str = "registry.example/trainer:1";

/// Writes the stand-in `docker` into `dir`, keeping its state (calls, pulled images) there.
fn fake_docker(dir: &Path) -> PathBuf {
    let script = format!(
        r#"#!/bin/sh
state='{state}'
echo "$*" >> "$state/calls"
key() {{ echo "$1" | tr '/:' '__'; }}
case "$1" in
  image) [ "$2" = inspect ] && [ "$3" = -- ] && [ -e "$state/images/$(key "$4")" ]; exit $? ;;
  pull) [ "$2" = -- ] && mkdir -p "$state/images" && touch "$state/images/$(key "$3")"; exit $? ;;
  version) echo 28.2.2; exit 0 ;;
  rm) exit 0 ;;
  run) shift ;;
  *) echo "unexpected: $*" >&2; exit 2 ;;
esac
mounts=""
while [ $# -gt 0 ]; do
  case "$1" in
    --rm|--init) shift ;;
    --name|-w|--gpus|--device) shift 2 ;;
    -e) export "$2"; shift 2 ;;
    -v) spec=$2; host=${{spec%%:*}}; rest=${{spec#*:}}; mounts="$mounts $host=${{rest%%:*}}"; shift 2 ;;
    --) shift; break ;;
    *) echo "unexpected argument $1 before -- and the image" >&2; exit 2 ;;
  esac
done
shift  # the image
inside() {{
  value=$1
  for m in $mounts; do
    host=${{m%%=*}}; target=${{m#*=}}
    case "$value" in "$target"*) value="$host${{value#"$target"}}" ;; esac
  done
  echo "$value"
}}
export FAIRWAY_CHECKPOINT_DIR="$(inside "$FAIRWAY_CHECKPOINT_DIR")"
export FAIRWAY_PREEMPT_NOTICE_FILE="$(inside "$FAIRWAY_PREEMPT_NOTICE_FILE")"
export FAIRWAY_COMPLETION_FILE="$(inside "$FAIRWAY_COMPLETION_FILE")"
exec "$@"
"#,
        state = dir.display()
    );
    let path = dir.join("docker");
    fs::write(&path, script).unwrap();
    fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).unwrap();
    path
}

fn calls(dir: &Path) -> Vec<String> {
    fs::read_to_string(dir.join("calls")).unwrap_or_default().lines().map(String::from).collect()
}

#[test]
fn image_jobs_run_through_the_container_runtime_with_the_same_lifecycle() {
    let docker_dir = tempfile::tempdir().unwrap();
    let docker = fake_docker(docker_dir.path());
    let config = format!("container_runtime: {:?}\nimages: [{IMAGE}]\n", docker.display());
    let server = InProcess::start("1", &config);
    let api = &server.api;

    // 1. The configured image is pulled at start-up and reported as present.
    api.wait_for("the image to be pulled", |api| {
        let (_, health) = api.json("GET", "/healthz", None);
        (health["images"][0]["status"] == "present").then_some(())
    });
    let (_, health) = api.json("GET", "/healthz", None);
    assert_eq!(
        (health["container_runtime"].as_str(), health["images"][0]["image"].as_str()),
        (Some("docker"), Some(IMAGE))
    );
    let image_calls: Vec<String> =
        calls(docker_dir.path()).into_iter().filter(|c| c.starts_with("image") || c.starts_with("pull")).collect();
    assert_eq!(image_calls, [format!("image inspect -- {IMAGE}"), format!("pull -- {IMAGE}")]);

    // 2. An image job runs as `docker run`, sees its mounted checkpoint directory and
    //    notice, is preempted by a plain high-priority job, and resumes from its checkpoint.
    let low = api.submit(&format!(
        "name: nightly\ntenant: {{ project: vision }}\npriority: low\nresources: {{ gpus: 1 }}\nimage: {IMAGE}\n\
         command: [{FAIRWAY:?}, example-trainer, --steps, \"60\", --checkpoint-every, \"5\", --step-ms, \"40\"]\n\
         preemption_grace_seconds: 20\n"
    ))[0];
    api.wait_for("the image job to checkpoint", |api| {
        api.log(low).contains("checkpoint saved at step 5").then_some(())
    });
    let high = api.submit(&format!(
        "name: ctr-model\ntenant: {{ project: ads }}\npriority: high\nresources: {{ gpus: 1 }}\n\
         command: [{FAIRWAY:?}, example-trainer, --steps, \"3\", --step-ms, \"10\"]\n"
    ))[0];
    api.wait_state(high, JobState::Succeeded);
    let done = api.wait_state(low, JobState::Succeeded);
    assert_eq!((done.job.preemptions, done.job.restart_count), (1, 1));
    let log = api.log(low);
    assert!(log.contains("got SIGTERM") && log.contains("preempt notice: deadline_unix_ms="), "{log}");
    assert!(log.lines().any(|l| l.starts_with("resumed from step") && l.ends_with("(restart 1)")), "{log}");

    let data = server.data_dir.path();
    let checkpoint = data.join(format!("jobs/{low}/checkpoint"));
    let notice_dir = data.join(format!("jobs/{low}/notice"));
    let runs: Vec<String> = calls(docker_dir.path())
        .into_iter()
        .filter(|c| c.starts_with(&format!("run --rm --name fairway-job-{low} ")))
        .collect();
    assert_eq!(runs.len(), 2, "one container per run: {runs:?}");
    for run in &runs {
        for needle in [
            "--init".to_owned(),
            "-e FAIRWAY_CHECKPOINT_DIR=/fairway/checkpoint".to_owned(),
            "-e FAIRWAY_PREEMPT_NOTICE_FILE=/fairway/notice/preempt-notice.json".to_owned(),
            format!("-v {}:/fairway/checkpoint", checkpoint.display()),
            format!("-v {}:/fairway/notice:ro", notice_dir.display()),
            // The image comes after `--`: whatever it says, the runtime never reads it as a flag.
            format!("-- {IMAGE} {FAIRWAY} example-trainer"),
        ] {
            assert!(run.contains(&needle), "{needle} missing from `docker {run}`");
        }
    }
    assert!(fs::read_dir(&checkpoint).unwrap().count() > 0, "the checkpoint landed in the host directory");
    assert!(
        !calls(docker_dir.path()).iter().any(|c| c.contains(&format!("fairway-job-{high}"))),
        "a plain job runs without docker"
    );

    // 3. A container that ignores SIGTERM is killed at the end of its grace period, and then
    //    removed: killing the docker client alone would leave it running.
    let stubborn = api.submit(&format!(
        "name: stubborn\ntenant: {{ project: vision }}\nresources: {{ gpus: 1 }}\nimage: {IMAGE}\nshell: true\n\
         command: [\"trap '' TERM; echo ready; sleep 60\"]\npreemption_grace_seconds: 1\n"
    ))[0];
    api.wait_for("the stubborn job to run", |api| api.log(stubborn).contains("ready").then_some(()));
    api.json("POST", &format!("/v1/jobs/{stubborn}/cancel"), None);
    let cancelled = api.wait_state(stubborn, JobState::Cancelled);
    let last = cancelled.events.last().unwrap();
    assert!(last.message.contains("killed after its grace period"), "{last:?}");
    api.wait_for("its container to be removed", |_| {
        calls(docker_dir.path()).contains(&format!("rm -f fairway-job-{stubborn}")).then_some(())
    });
    kill_jobs_under(data);
}

#[test]
fn image_jobs_are_refused_without_a_runtime_unless_they_may_run_plain() {
    let server = InProcess::start("1", "container_runtime: none\n");
    let api = &server.api;
    let job = |extra: &str| {
        format!(
            "name: x\ntenant: {{ project: p }}\nresources: {{ gpus: 1 }}\nimage: {IMAGE}\n{extra}\
             command: [{FAIRWAY:?}, example-trainer, --steps, \"1\", --step-ms, \"1\"]\n"
        )
    };
    let (status, body) = api.json("POST", "/v1/jobs", Some(&job("")));
    assert_eq!((status, body["error"]["code"].as_str()), (422, Some("unsupported")), "{body}");
    let detail = &body["error"]["details"][0];
    assert!(detail.to_string().contains("image") && detail.to_string().contains("container runtime"), "{body}");
    assert!(api.jobs("").is_empty(), "nothing was stored");
    let id = api.submit(&job("image_optional: true\n"))[0];
    let done = api.wait_state(id, JobState::Succeeded);
    assert_eq!(done.job.exit_code, Some(0));
    let (_, health) = api.json("GET", "/healthz", None);
    assert!(health["container_runtime"].is_null(), "{health}");
}
