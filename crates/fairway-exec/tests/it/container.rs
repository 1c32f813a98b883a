//! Container argv builders (exact), runtime detection, and the thin runners against fake CLIs.

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use crate::support::wait_for;
use fairway_exec::{
    CONTAINER_CHECKPOINT_DIR, ContainerRun, ContainerRuntime, RuntimeKind, container_argv, container_name,
    detect_runtime_in, image_present, pull_image, remove_container,
};

fn run(real_gpus: bool) -> ContainerRun {
    ContainerRun {
        name: container_name(12),
        image: "nvcr.io/nvidia/pytorch:24.01-py3".into(),
        gpu_indices: vec![2, 3],
        real_gpus,
        checkpoint_dir: Some(PathBuf::from("/var/lib/fairway/ckpt/12")),
        container_checkpoint_dir: CONTAINER_CHECKPOINT_DIR.into(),
        notice_file: Some(PathBuf::from("/var/lib/fairway/jobs/12/notice/preempt-notice.json")),
        // The host paths the server gives a plain process; inside they must be mounted paths.
        env: BTreeMap::from([
            ("CUDA_VISIBLE_DEVICES".to_owned(), "2,3".to_owned()),
            ("FAIRWAY_CHECKPOINT_DIR".to_owned(), "/var/lib/fairway/ckpt/12".to_owned()),
            ("FAIRWAY_COMPLETION_FILE".to_owned(), "/var/lib/fairway/ckpt/12/.fairway-complete".to_owned()),
            (
                "FAIRWAY_PREEMPT_NOTICE_FILE".to_owned(),
                "/var/lib/fairway/jobs/12/notice/preempt-notice.json".to_owned(),
            ),
        ]),
        argv: vec!["python".into(), "train.py".into()],
        workdir: Some("/workspace".into()),
    }
}

fn runtime(kind: RuntimeKind) -> ContainerRuntime {
    ContainerRuntime { kind, path: PathBuf::from(format!("/usr/bin/{}", kind.program())) }
}

#[test]
fn docker_argv_with_real_gpus() {
    assert_eq!(
        container_argv(&runtime(RuntimeKind::Docker), &run(true)),
        [
            "/usr/bin/docker",
            "run",
            "--rm",
            "--name",
            "fairway-job-12",
            "--init",
            "-e",
            "CUDA_VISIBLE_DEVICES=0,1",
            "-e",
            "FAIRWAY_CHECKPOINT_DIR=/fairway/checkpoint",
            "-e",
            "FAIRWAY_COMPLETION_FILE=/fairway/checkpoint/.fairway-complete",
            "-e",
            "FAIRWAY_PREEMPT_NOTICE_FILE=/fairway/notice/preempt-notice.json",
            "-v",
            "/var/lib/fairway/ckpt/12:/fairway/checkpoint",
            "-v",
            "/var/lib/fairway/jobs/12/notice:/fairway/notice:ro",
            "-w",
            "/workspace",
            "--gpus",
            "\"device=2,3\"",
            "--",
            "nvcr.io/nvidia/pytorch:24.01-py3",
            "python",
            "train.py",
        ]
    );
}

#[test]
fn podman_argv_with_real_gpus_uses_cdi_devices() {
    assert_eq!(
        container_argv(&runtime(RuntimeKind::Podman), &run(true)),
        [
            "/usr/bin/podman",
            "run",
            "--rm",
            "--name",
            "fairway-job-12",
            "--init",
            "-e",
            "CUDA_VISIBLE_DEVICES=0,1",
            "-e",
            "FAIRWAY_CHECKPOINT_DIR=/fairway/checkpoint",
            "-e",
            "FAIRWAY_COMPLETION_FILE=/fairway/checkpoint/.fairway-complete",
            "-e",
            "FAIRWAY_PREEMPT_NOTICE_FILE=/fairway/notice/preempt-notice.json",
            "-v",
            "/var/lib/fairway/ckpt/12:/fairway/checkpoint",
            "-v",
            "/var/lib/fairway/jobs/12/notice:/fairway/notice:ro",
            "-w",
            "/workspace",
            "--device",
            "nvidia.com/gpu=2",
            "--device",
            "nvidia.com/gpu=3",
            "--",
            "nvcr.io/nvidia/pytorch:24.01-py3",
            "python",
            "train.py",
        ]
    );
}

#[test]
fn simulated_gpus_get_no_gpu_flags_and_keep_the_env() {
    let mut minimal = run(false);
    minimal.checkpoint_dir = None;
    minimal.notice_file = None;
    minimal.workdir = None;
    minimal.argv.clear();
    assert_eq!(
        container_argv(&runtime(RuntimeKind::Docker), &minimal),
        [
            "/usr/bin/docker",
            "run",
            "--rm",
            "--name",
            "fairway-job-12",
            "--init",
            "-e",
            "CUDA_VISIBLE_DEVICES=2,3",
            // Nothing mounted: the paths are left as given.
            "-e",
            "FAIRWAY_CHECKPOINT_DIR=/var/lib/fairway/ckpt/12",
            "-e",
            "FAIRWAY_COMPLETION_FILE=/var/lib/fairway/ckpt/12/.fairway-complete",
            "-e",
            "FAIRWAY_PREEMPT_NOTICE_FILE=/var/lib/fairway/jobs/12/notice/preempt-notice.json",
            "--",
            "nvcr.io/nvidia/pytorch:24.01-py3",
        ]
    );
}

fn fake_cli(dir: &Path, name: &str, script: &str, mode: u32) -> PathBuf {
    let path = dir.join(name);
    fs::write(&path, format!("#!/bin/sh\n[ \"$1\" = __probe ] && exit 0\n{script}\n")).unwrap();
    fs::set_permissions(&path, fs::Permissions::from_mode(mode)).unwrap();
    if mode & 0o111 != 0 {
        // A process forked by another test thread while the file was open for writing holds
        // it until its exec, and executing the file meanwhile fails with ETXTBSY: wait that out.
        wait_for("the fake CLI to be executable", || {
            std::process::Command::new(&path).arg("__probe").status().map_err(|e| e.raw_os_error()) != Err(Some(26))
        });
    }
    path
}

#[test]
fn detection_prefers_docker_and_needs_an_executable() {
    let empty = tempfile::tempdir().unwrap();
    assert_eq!(detect_runtime_in(None), None);
    assert_eq!(detect_runtime_in(Some(empty.path().as_os_str())), None);

    let podman_dir = tempfile::tempdir().unwrap();
    let podman = fake_cli(podman_dir.path(), "podman", "exit 0", 0o755);
    let docker_dir = tempfile::tempdir().unwrap();
    fake_cli(docker_dir.path(), "docker", "exit 0", 0o644); // not executable: skipped
    let path_var = std::env::join_paths([empty.path(), docker_dir.path(), podman_dir.path()]).unwrap();
    assert_eq!(
        detect_runtime_in(Some(&path_var)),
        Some(ContainerRuntime { kind: RuntimeKind::Podman, path: podman.clone() })
    );

    let docker = fake_cli(docker_dir.path(), "docker", "exit 0", 0o755);
    assert_eq!(detect_runtime_in(Some(&path_var)), Some(ContainerRuntime { kind: RuntimeKind::Docker, path: docker }));
    assert_eq!(ContainerRuntime::from_configured(&podman).kind, RuntimeKind::Podman);
    assert_eq!(ContainerRuntime::from_configured(Path::new("/opt/bin/docker")).kind, RuntimeKind::Docker);
}

#[test]
fn runners_report_the_cli_outcome() {
    let dir = tempfile::tempdir().unwrap();
    let args_file = dir.path().join("args");
    let script = format!(
        r#"echo "$@" >> '{}'
case "$1 $2 $3" in
  "image inspect --") [ "$4" = present:1 ] ;;
  "pull -- denied:1") echo "Error response from daemon: pull access denied for denied" >&2; exit 1 ;;
  "rm -f "*) echo "Error: No such container: $3" >&2; exit 1 ;;
  *) exit 0 ;;
esac"#,
        args_file.display()
    );
    let cli = ContainerRuntime::from_configured(&fake_cli(dir.path(), "docker", &script, 0o755));
    assert!(image_present(&cli, "present:1"));
    assert!(!image_present(&cli, "absent:1"));
    pull_image(&cli, "ok:1").unwrap();
    let err = pull_image(&cli, "denied:1").unwrap_err().to_string();
    assert!(err.contains("pull -- denied:1 failed") && err.contains("pull access denied"), "{err}");
    remove_container(&cli, "fairway-job-12").unwrap();
    assert_eq!(
        fs::read_to_string(&args_file).unwrap(),
        "image inspect -- present:1\nimage inspect -- absent:1\npull -- ok:1\npull -- denied:1\nrm -f fairway-job-12\n"
    );
    let missing = ContainerRuntime { kind: RuntimeKind::Docker, path: dir.path().join("none") };
    assert!(pull_image(&missing, "x").is_err() && !image_present(&missing, "x"));
}
