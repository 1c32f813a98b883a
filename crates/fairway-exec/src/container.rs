//! Containers: find docker or podman, and build the `run` command line a job's shim executes.
//! Pure argv builders plus thin command runners; no daemon API.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::ExecError;

/// Where the job's checkpoint directory is mounted inside a container by default.
pub const CONTAINER_CHECKPOINT_DIR: &str = "/fairway/checkpoint";
/// Where the directory holding the job's preemption notice is mounted (read-only).
pub const CONTAINER_NOTICE_DIR: &str = "/fairway/notice";

/// Which container CLI.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RuntimeKind {
    /// Docker, GPUs through the NVIDIA container toolkit (`--gpus`).
    Docker,
    /// Podman, GPUs through CDI (`--device nvidia.com/gpu=N`).
    Podman,
}

impl RuntimeKind {
    /// The executable's usual name.
    pub fn program(self) -> &'static str {
        match self {
            RuntimeKind::Docker => "docker",
            RuntimeKind::Podman => "podman",
        }
    }
}

/// A container CLI to run.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ContainerRuntime {
    /// Docker or Podman: decides the GPU flags.
    pub kind: RuntimeKind,
    /// The executable.
    pub path: PathBuf,
}

impl ContainerRuntime {
    /// A configured runtime: the kind is Podman if the file name contains `podman`, else Docker.
    pub fn from_configured(path: &Path) -> Self {
        let is_podman = path.file_name().is_some_and(|n| n.to_string_lossy().contains("podman"));
        let kind = if is_podman { RuntimeKind::Podman } else { RuntimeKind::Docker };
        ContainerRuntime { kind, path: path.to_owned() }
    }
}

/// Looks for `docker`, then `podman`, on this process's `PATH`.
pub fn detect_runtime() -> Option<ContainerRuntime> {
    detect_runtime_in(std::env::var_os("PATH").as_deref())
}

/// Looks for `docker`, then `podman`, in the directories of `path_var` (a `PATH` value).
pub fn detect_runtime_in(path_var: Option<&OsStr>) -> Option<ContainerRuntime> {
    let dirs: Vec<PathBuf> = std::env::split_paths(path_var?).collect();
    [RuntimeKind::Docker, RuntimeKind::Podman].into_iter().find_map(|kind| {
        dirs.iter()
            .map(|dir| dir.join(kind.program()))
            .find(|p| is_executable(p))
            .map(|path| ContainerRuntime { kind, path })
    })
}

fn is_executable(path: &Path) -> bool {
    path.metadata().is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// The container name for a job: `fairway-job-<id>`.
pub fn container_name(job_id: u64) -> String {
    format!("fairway-job-{job_id}")
}

/// One job's container.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ContainerRun {
    /// `--name`, normally [`container_name`].
    pub name: String,
    /// The image reference.
    pub image: String,
    /// The node-local GPU indices assigned to the job.
    pub gpu_indices: Vec<u32>,
    /// Whether the GPUs are real (NVML) and should be passed into the container; simulated
    /// GPUs get no GPU flags.
    pub real_gpus: bool,
    /// The host checkpoint directory to mount, if any.
    pub checkpoint_dir: Option<PathBuf>,
    /// Where it is mounted in the container, normally [`CONTAINER_CHECKPOINT_DIR`].
    pub container_checkpoint_dir: String,
    /// The host file the server writes the preemption notice to, if any. Its directory is
    /// mounted read-only at [`CONTAINER_NOTICE_DIR`], so it should hold nothing else.
    pub notice_file: Option<PathBuf>,
    /// Environment inside the container (`-e K=V`, in key order).
    pub env: BTreeMap<String, String>,
    /// The command after the image; empty runs the image's entrypoint/cmd.
    pub argv: Vec<String>,
    /// `-w`, the working directory inside the container.
    pub workdir: Option<String>,
}

/// The full command line, runtime executable first:
/// `docker run --rm --name N --init -e K=V … -v HOST:CONTAINER … [-w DIR] [GPU flags] -- IMAGE ARGV…`.
///
/// Paths the job is given are paths inside the container: `FAIRWAY_CHECKPOINT_DIR` names
/// the mounted checkpoint directory and `FAIRWAY_PREEMPT_NOTICE_FILE` the notice in the
/// mounted notice directory, whatever host paths `env` held for them.
///
/// GPU flags only when `real_gpus`: Docker gets `--gpus "device=0,1"` (the double quotes are part
/// of the argument, since Docker splits an unquoted value at commas), Podman one
/// `--device nvidia.com/gpu=N` per GPU. The runtime renumbers the passed devices from 0, so with
/// real GPUs `CUDA_VISIBLE_DEVICES` inside becomes `0,…,k-1`, replacing a host-index value in `env`.
pub fn container_argv(runtime: &ContainerRuntime, run: &ContainerRun) -> Vec<String> {
    let mut argv: Vec<String> = vec![runtime.path.to_string_lossy().into_owned()];
    argv.extend(["run", "--rm", "--name", &run.name, "--init"].map(String::from));
    let mut env = run.env.clone();
    if run.checkpoint_dir.is_some() {
        env.insert("FAIRWAY_CHECKPOINT_DIR".to_owned(), run.container_checkpoint_dir.clone());
        // The completion mark lives in the checkpoint directory: inside, under its mount.
        if let Some(name) = env.get("FAIRWAY_COMPLETION_FILE").and_then(|f| Path::new(f).file_name()) {
            let inside = format!("{}/{}", run.container_checkpoint_dir, name.to_string_lossy());
            env.insert("FAIRWAY_COMPLETION_FILE".to_owned(), inside);
        }
    }
    let notice = run.notice_file.as_ref().and_then(|f| Some((f.parent()?, f.file_name()?)));
    if let Some((_, name)) = notice {
        env.insert(
            "FAIRWAY_PREEMPT_NOTICE_FILE".to_owned(),
            format!("{CONTAINER_NOTICE_DIR}/{}", name.to_string_lossy()),
        );
    }
    if run.real_gpus && !run.gpu_indices.is_empty() {
        let renumbered: Vec<String> = (0..run.gpu_indices.len()).map(|i| i.to_string()).collect();
        env.insert("CUDA_VISIBLE_DEVICES".to_owned(), renumbered.join(","));
    }
    for (key, value) in &env {
        argv.push("-e".to_owned());
        argv.push(format!("{key}={value}"));
    }
    if let Some(host) = &run.checkpoint_dir {
        argv.push("-v".to_owned());
        argv.push(format!("{}:{}", host.display(), run.container_checkpoint_dir));
    }
    if let Some((dir, _)) = notice {
        argv.push("-v".to_owned());
        argv.push(format!("{}:{CONTAINER_NOTICE_DIR}:ro", dir.display()));
    }
    if let Some(workdir) = &run.workdir {
        argv.push("-w".to_owned());
        argv.push(workdir.clone());
    }
    if run.real_gpus && !run.gpu_indices.is_empty() {
        match runtime.kind {
            RuntimeKind::Docker => {
                let devices: Vec<String> = run.gpu_indices.iter().map(u32::to_string).collect();
                argv.push("--gpus".to_owned());
                argv.push(format!("\"device={}\"", devices.join(",")));
            }
            RuntimeKind::Podman => {
                for index in &run.gpu_indices {
                    argv.push("--device".to_owned());
                    argv.push(format!("nvidia.com/gpu={index}"));
                }
            }
        }
    }
    // Everything after `--` is the image and its command, never an option of the runtime,
    // whatever the image string says (it is also validated as an image reference).
    argv.push("--".to_owned());
    argv.push(run.image.clone());
    argv.extend(run.argv.iter().cloned());
    argv
}

/// Runs `<runtime> pull <image>`, blocking until it ends; the error carries the end of stderr.
pub fn pull_image(runtime: &ContainerRuntime, image: &str) -> Result<(), ExecError> {
    run_runtime(runtime, &["pull", "--", image])
}

/// Whether `image` is present locally (`<runtime> image inspect <image>` succeeds).
pub fn image_present(runtime: &ContainerRuntime, image: &str) -> bool {
    Command::new(&runtime.path)
        .args(["image", "inspect", "--", image])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Removes the container `name`, killing it if it runs (`<runtime> rm -f <name>`). SIGKILL of
/// a shim kills the `docker run` client but not the container: the server must call this after
/// killing a container job. A container that does not exist is not an error.
pub fn remove_container(runtime: &ContainerRuntime, name: &str) -> Result<(), ExecError> {
    match run_runtime(runtime, &["rm", "-f", name]) {
        Err(ExecError::Container { detail, .. }) if detail.contains("No such container") => Ok(()),
        other => other,
    }
}

fn run_runtime(runtime: &ContainerRuntime, args: &[&str]) -> Result<(), ExecError> {
    let command = format!("{} {}", runtime.path.display(), args.join(" "));
    let output = Command::new(&runtime.path)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| ExecError::Container { command: command.clone(), detail: e.to_string() })?;
    if output.status.success() {
        return Ok(());
    }
    let stderr = String::from_utf8_lossy(&output.stderr);
    let lines: Vec<&str> = stderr.trim().lines().collect();
    let tail = lines[lines.len().saturating_sub(5)..].join("\n");
    Err(ExecError::Container { command, detail: format!("{}: {tail}", output.status) })
}
