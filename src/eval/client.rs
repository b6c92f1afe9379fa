//! The parent's side of the GPU worker: starts `kforge worker` through the one subprocess
//! runner's environment policy (cleared env, own process group, kill on drop), sends requests,
//! follows stage events and enforces the time limits. Whatever happens to the worker — a
//! signal, an `exit()`, a hang, garbage on the pipe — becomes a [`Failure`] naming the stage;
//! the worker is then restarted for the next request. Nothing here panics or returns an error
//! for a candidate's misbehaviour.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout};

use super::protocol::{Failure, FailureKind, Stage, WorkerEvent, WorkerOutcome, WorkerRequest};
use crate::proc;

/// Time limits for one request.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Limits {
    /// Worker start (libtorch and CUDA initialisation).
    pub start: Duration,
    /// Loading the problem or the candidate library.
    pub load: Duration,
    /// Any one run stage (a trial, the warm-up, the timing loop).
    pub run: Duration,
    /// The whole request.
    pub total: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            start: Duration::from_secs(120),
            load: Duration::from_secs(60),
            run: Duration::from_secs(60),
            total: Duration::from_secs(600),
        }
    }
}

/// How to start a worker: normally this binary with `worker`; tests substitute a script.
#[derive(Debug, Clone)]
pub struct WorkerCommand {
    pub program: PathBuf,
    pub args: Vec<String>,
}

impl WorkerCommand {
    /// This executable's own `worker` subcommand.
    pub fn this_binary() -> std::io::Result<Self> {
        Ok(WorkerCommand {
            program: std::env::current_exe()?,
            args: vec!["worker".into()],
        })
    }
}

const STDERR_TAIL_LINES: usize = 40;

struct Running {
    child: Child,
    stdin: ChildStdin,
    stdout: Lines<BufReader<ChildStdout>>,
    stderr_tail: Arc<Mutex<VecDeque<String>>>,
    stderr_task: Option<tokio::task::JoinHandle<()>>,
    pid: Option<u32>,
    gpu: Option<crate::gpu::GpuInfo>,
}

impl Running {
    /// After the worker died: lets the stderr task read to the end (bounded, in case a
    /// grandchild still holds the pipe), so the tail holds the last words.
    async fn drain_stderr(&mut self) {
        if let Some(task) = self.stderr_task.take() {
            let _ = tokio::time::timeout(Duration::from_secs(2), task).await;
        }
    }

    fn stderr_tail(&self) -> String {
        self.stderr_tail
            .lock()
            .map(|t| t.iter().cloned().collect::<Vec<_>>().join("\n"))
            .unwrap_or_default()
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        proc::kill_group(self.pid);
    }
}

/// A restartable worker process.
pub struct WorkerClient {
    command: WorkerCommand,
    limits: Limits,
    running: Option<Running>,
    next_id: u64,
    /// How many times a worker had to be (re)started.
    pub starts: u32,
}

enum Read {
    Event(WorkerEvent),
    Garbage(String),
    Closed,
    TimedOut,
}

impl WorkerClient {
    pub fn new(command: WorkerCommand, limits: Limits) -> Self {
        WorkerClient {
            command,
            limits,
            running: None,
            next_id: 1,
            starts: 0,
        }
    }

    /// The GPU the current worker reported at start, if any.
    pub fn gpu(&self) -> Option<&crate::gpu::GpuInfo> {
        self.running.as_ref().and_then(|r| r.gpu.as_ref())
    }

    async fn read(stdout: &mut Lines<BufReader<ChildStdout>>, limit: Duration) -> Read {
        match tokio::time::timeout(limit, stdout.next_line()).await {
            Err(_) => Read::TimedOut,
            Ok(Ok(None)) | Ok(Err(_)) => Read::Closed,
            Ok(Ok(Some(line))) => match serde_json::from_str::<WorkerEvent>(&line) {
                Ok(event) => Read::Event(event),
                Err(_) => Read::Garbage(line),
            },
        }
    }

    /// Starts a worker and waits for its `ready` line.
    async fn start(&mut self) -> Result<(), Failure> {
        self.starts += 1;
        let mut command = proc::Command::new(&self.command.program)
            .args(self.command.args.iter().cloned())
            .to_tokio();
        command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = command.spawn().map_err(|e| Failure {
            stage: Stage::Start,
            kind: FailureKind::Worker,
            message: format!(
                "cannot start the worker ({}): {e}",
                self.command.program.display()
            ),
            trial: None,
            stderr_tail: None,
        })?;
        let pid = child.id();
        let stderr_tail = Arc::new(Mutex::new(VecDeque::new()));
        let mut stderr_task = None;
        if let Some(stderr) = child.stderr.take() {
            let tail = Arc::clone(&stderr_tail);
            // Drained on its own task so a chatty candidate never blocks on a full pipe.
            stderr_task = Some(tokio::spawn(async move {
                let mut lines = BufReader::new(stderr).lines();
                while let Ok(Some(line)) = lines.next_line().await {
                    if let Ok(mut t) = tail.lock() {
                        if t.len() == STDERR_TAIL_LINES {
                            t.pop_front();
                        }
                        t.push_back(line.chars().take(500).collect());
                    }
                }
            }));
        }
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            return Err(Failure {
                stage: Stage::Start,
                kind: FailureKind::Worker,
                message: "the worker's pipes could not be opened".into(),
                trial: None,
                stderr_tail: None,
            });
        };
        let mut running = Running {
            child,
            stdin,
            stdout: BufReader::new(stdout).lines(),
            stderr_tail,
            stderr_task,
            pid,
            gpu: None,
        };
        match Self::read(&mut running.stdout, self.limits.start).await {
            Read::Event(WorkerEvent::Ready { gpu, .. }) => {
                running.gpu = gpu;
                self.running = Some(running);
                Ok(())
            }
            Read::Event(WorkerEvent::Done { outcome, .. }) => {
                running.drain_stderr().await;
                let mut failure = outcome.failure.unwrap_or_else(|| Failure {
                    stage: Stage::Start,
                    kind: FailureKind::Worker,
                    message: "the worker stopped at start".into(),
                    trial: None,
                    stderr_tail: None,
                });
                failure.stderr_tail = Some(running.stderr_tail());
                Err(failure)
            }
            other => {
                let message = match other {
                    Read::TimedOut => format!(
                        "the worker did not start within {} s",
                        self.limits.start.as_secs()
                    ),
                    Read::Garbage(line) => {
                        format!("the worker printed something unexpected at start: {line}")
                    }
                    _ => {
                        let status = running.child.wait().await.ok();
                        running.drain_stderr().await;
                        format!("the worker died at start ({})", describe_status(status))
                    }
                };
                Err(Failure {
                    stage: Stage::Start,
                    kind: FailureKind::Worker,
                    message,
                    trial: None,
                    stderr_tail: Some(running.stderr_tail()),
                })
            }
        }
    }

    /// Sends one request and waits for its outcome under the limits. The id is assigned here.
    pub async fn request(&mut self, mut request: WorkerRequest) -> WorkerOutcome {
        let id = self.next_id;
        self.next_id += 1;
        match &mut request {
            WorkerRequest::Evaluate { id: slot, .. } | WorkerRequest::Profile { id: slot, .. } => {
                *slot = id
            }
        }
        if self.running.is_none()
            && let Err(failure) = self.start().await
        {
            return WorkerOutcome {
                failure: Some(failure),
                ..WorkerOutcome::default()
            };
        }
        let Some(running) = self.running.as_mut() else {
            return WorkerOutcome::default();
        };
        let gpu = running.gpu.clone();
        let line = match serde_json::to_string(&request) {
            Ok(l) => l,
            Err(e) => {
                return outcome_failure(
                    Stage::Start,
                    FailureKind::Worker,
                    e.to_string(),
                    None,
                    None,
                    gpu,
                );
            }
        };
        if running
            .stdin
            .write_all(format!("{line}\n").as_bytes())
            .await
            .is_err()
            || running.stdin.flush().await.is_err()
        {
            let tail = running.stderr_tail();
            self.running = None;
            return outcome_failure(
                Stage::Start,
                FailureKind::Crashed,
                "the worker went away before the request was sent".into(),
                None,
                Some(tail),
                gpu,
            );
        }
        let deadline = tokio::time::Instant::now() + self.limits.total;
        let mut stage = Stage::LoadProblem;
        let mut trial = None;
        loop {
            let stage_limit = match stage {
                Stage::LoadProblem | Stage::LoadCandidate | Stage::Start | Stage::Compile => {
                    self.limits.load
                }
                _ => self.limits.run,
            };
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            let limit = stage_limit.min(left);
            match Self::read(&mut running.stdout, limit).await {
                Read::Event(WorkerEvent::Stage {
                    id: got,
                    stage: s,
                    trial: t,
                }) if got == id => {
                    stage = s;
                    trial = t;
                }
                Read::Event(WorkerEvent::Done { id: got, outcome }) if got == id => {
                    let mut outcome = *outcome;
                    if outcome.fatal {
                        if let Some(f) = outcome.failure.as_mut() {
                            f.stderr_tail = Some(running.stderr_tail());
                        }
                        self.running = None;
                    }
                    return outcome;
                }
                Read::Event(_) => {}
                Read::Garbage(line) if line.starts_with("{\"event\":\"done\"") => {
                    // An answer we cannot read must not look like a hang.
                    let error = serde_json::from_str::<WorkerEvent>(&line)
                        .err()
                        .map(|e| e.to_string())
                        .unwrap_or_default();
                    return outcome_failure(
                        stage,
                        FailureKind::Worker,
                        format!("the worker's answer could not be read ({error})"),
                        trial,
                        None,
                        gpu,
                    );
                }
                Read::Garbage(line) => {
                    tracing::debug!("ignoring a non-protocol line from the worker: {line}");
                }
                Read::TimedOut => {
                    let tail = running.stderr_tail();
                    let which = if left <= stage_limit {
                        "the whole evaluation"
                    } else {
                        "this stage"
                    };
                    let secs = limit.as_secs_f64();
                    self.running = None;
                    return outcome_failure(
                        stage,
                        FailureKind::Timeout,
                        format!(
                            "no progress during {stage} for {secs:.0} s (limit for {which}); the worker was killed"
                        ),
                        trial,
                        Some(tail),
                        gpu,
                    );
                }
                Read::Closed => {
                    let status = running.child.wait().await.ok();
                    running.drain_stderr().await;
                    let tail = running.stderr_tail();
                    self.running = None;
                    let (kind, message) = match status.and_then(|s| {
                        use std::os::unix::process::ExitStatusExt;
                        s.signal().map(Err).or(s.code().map(Ok))
                    }) {
                        Some(Err(signal)) => (
                            FailureKind::Crashed,
                            format!(
                                "the worker was killed by signal {signal} ({}) during {stage}",
                                proc::signal_name(signal)
                            ),
                        ),
                        Some(Ok(code)) => (
                            FailureKind::Exited,
                            format!(
                                "the worker exited with code {code} during {stage} (the candidate ended the process, e.g. exit())"
                            ),
                        ),
                        None => (
                            FailureKind::Crashed,
                            format!("the worker vanished during {stage}"),
                        ),
                    };
                    return outcome_failure(stage, kind, message, trial, Some(tail), gpu);
                }
            }
        }
    }
}

fn describe_status(status: Option<std::process::ExitStatus>) -> String {
    use std::os::unix::process::ExitStatusExt;
    match status {
        Some(s) => match (s.code(), s.signal()) {
            (Some(c), _) => format!("exit code {c}"),
            (_, Some(sig)) => format!("signal {sig} ({})", proc::signal_name(sig)),
            _ => "unknown status".into(),
        },
        None => "status unknown".into(),
    }
}

fn outcome_failure(
    stage: Stage,
    kind: FailureKind,
    message: String,
    trial: Option<u32>,
    stderr_tail: Option<String>,
    gpu: Option<crate::gpu::GpuInfo>,
) -> WorkerOutcome {
    WorkerOutcome {
        failure: Some(Failure {
            stage,
            kind,
            message,
            trial,
            stderr_tail: stderr_tail.filter(|t| !t.is_empty()),
        }),
        gpu,
        ..WorkerOutcome::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eval::protocol::ProtocolOptions;
    use std::os::unix::fs::PermissionsExt;

    /// A fake worker: a shell script speaking (or breaking) the protocol.
    fn fake(dir: &std::path::Path, body: &str) -> WorkerClient {
        let path = dir.join("worker.sh");
        std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        WorkerClient::new(
            WorkerCommand {
                program: path,
                args: vec![],
            },
            Limits {
                start: Duration::from_secs(5),
                load: Duration::from_millis(500),
                run: Duration::from_millis(500),
                total: Duration::from_secs(5),
            },
        )
    }

    fn request() -> WorkerRequest {
        WorkerRequest::Evaluate {
            id: 0,
            bundle: "b".into(),
            library: "l".into(),
            options: ProtocolOptions::default(),
        }
    }

    const READY: &str = r#"echo '{"event":"ready","pid":1,"gpu":null}'"#;

    #[tokio::test]
    async fn a_well_behaved_worker_answers() {
        let dir = tempfile::tempdir().unwrap();
        let mut client = fake(
            dir.path(),
            &format!(
                r#"{READY}; read line; echo '{{"event":"stage","id":1,"stage":"trial","trial":0}}'; echo '{{"event":"done","id":1,"outcome":{{"failure":null,"trials":[],"timing":null,"fatal":false,"gpu":null}}}}'; read line"#
            ),
        );
        let outcome = client.request(request()).await;
        assert!(outcome.failure.is_none(), "{outcome:?}");
        assert_eq!(client.starts, 1);
    }

    #[tokio::test]
    async fn a_worker_that_dies_mid_call_is_reported_with_stage_and_signal() {
        let dir = tempfile::tempdir().unwrap();
        let mut client = fake(
            dir.path(),
            &format!(
                r#"{READY}; read line; echo '{{"event":"stage","id":1,"stage":"trial","trial":2}}'; echo 'Segmentation fault in candidate' >&2; kill -SEGV $$"#
            ),
        );
        let outcome = client.request(request()).await;
        let failure = outcome.failure.unwrap();
        assert_eq!(failure.kind, FailureKind::Crashed);
        assert_eq!(failure.stage, Stage::Trial);
        assert_eq!(failure.trial, Some(2));
        assert!(failure.message.contains("SIGSEGV"), "{}", failure.message);
        // The next request starts a fresh worker.
        let _ = client.request(request()).await;
        assert_eq!(client.starts, 2);
    }

    #[tokio::test]
    async fn a_worker_that_exits_zero_is_an_exit_not_a_success() {
        let dir = tempfile::tempdir().unwrap();
        let mut client = fake(
            dir.path(),
            &format!(
                r#"{READY}; read line; echo '{{"event":"stage","id":1,"stage":"trial","trial":0}}'; exit 0"#
            ),
        );
        let failure = client.request(request()).await.failure.unwrap();
        assert_eq!(failure.kind, FailureKind::Exited);
        assert!(failure.message.contains("code 0"), "{}", failure.message);
    }

    #[tokio::test]
    async fn a_worker_that_hangs_is_killed_at_the_stage_limit() {
        let dir = tempfile::tempdir().unwrap();
        let mut client = fake(
            dir.path(),
            &format!(
                r#"{READY}; read line; echo '{{"event":"stage","id":1,"stage":"timing"}}'; sleep 30"#
            ),
        );
        let started = std::time::Instant::now();
        let failure = client.request(request()).await.failure.unwrap();
        assert_eq!(failure.kind, FailureKind::Timeout);
        assert_eq!(failure.stage, Stage::Timing);
        assert!(started.elapsed() < Duration::from_secs(4));
    }

    #[tokio::test]
    async fn a_worker_that_never_starts_is_a_worker_failure() {
        let dir = tempfile::tempdir().unwrap();
        let mut client = fake(
            dir.path(),
            "echo 'libtorch_cuda.so: cannot open shared object file' >&2; exit 127",
        );
        let failure = client.request(request()).await.failure.unwrap();
        assert_eq!(failure.stage, Stage::Start);
        assert_eq!(failure.kind, FailureKind::Worker);
        assert!(
            failure
                .stderr_tail
                .unwrap_or_default()
                .contains("libtorch_cuda")
        );
    }

    #[tokio::test]
    async fn an_unreadable_answer_is_a_worker_failure_not_a_hang() {
        let dir = tempfile::tempdir().unwrap();
        let mut client = fake(
            dir.path(),
            &format!(
                r#"{READY}; read line; echo '{{"event":"done","id":1,"outcome":{{"failure":null,"trials":[{{"bad":null}}]}}}}'; sleep 30"#
            ),
        );
        let started = std::time::Instant::now();
        let failure = client.request(request()).await.failure.unwrap();
        assert_eq!(failure.kind, FailureKind::Worker);
        assert!(
            failure.message.contains("could not be read"),
            "{}",
            failure.message
        );
        assert!(started.elapsed() < Duration::from_secs(2));
    }

    #[tokio::test]
    async fn garbage_lines_are_ignored() {
        let dir = tempfile::tempdir().unwrap();
        let mut client = fake(
            dir.path(),
            &format!(
                r#"{READY}; read line; echo 'hello from printf'; echo '{{"event":"done","id":1,"outcome":{{"failure":null,"trials":[],"timing":null,"fatal":false,"gpu":null}}}}'; read line"#
            ),
        );
        assert!(client.request(request()).await.failure.is_none());
    }
}
