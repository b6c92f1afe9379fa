//! The one way kforge starts a child process (nvcc, ncu, python3, the GPU worker).
//!
//! Every child gets a cleared environment plus an allow-list (so API keys never reach nvcc, a
//! Python exporter or a candidate kernel), no stdin unless asked, its own process group (a
//! timeout kills the whole group, grandchildren included), a wall-clock timeout and a cap on the
//! output kept. stdout and stderr are drained concurrently so a chatty child never blocks on a
//! full pipe.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};

/// Variables a child may inherit. Nothing else of the parent's environment passes, so a secret
/// in the parent (OPENAI_API_KEY, ANTHROPIC_API_KEY, tokens) can never reach untrusted code.
pub const INHERITED_ENV: &[&str] = &[
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "LANG",
    "LC_ALL",
    "LC_CTYPE",
    "TMPDIR",
    "TERM",
    "LD_LIBRARY_PATH",
    "CUDA_VISIBLE_DEVICES",
    "CUDA_DEVICE_ORDER",
    "CUDA_HOME",
    "CUDA_PATH",
    // Multi-GPU hosts here require NVLink multicast to stay off in every process.
    "NCCL_NVLS_ENABLE",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST",
    "NVSHMEM_DISABLE_NVLS",
];

/// Default cap on each of stdout and stderr (bytes kept; the rest is read and dropped).
pub const DEFAULT_OUTPUT_CAP: usize = 4 * 1024 * 1024;

/// What to run and under which limits.
#[derive(Debug, Clone)]
pub struct Command {
    program: PathBuf,
    args: Vec<OsString>,
    env: BTreeMap<String, OsString>,
    cwd: Option<PathBuf>,
    timeout: Duration,
    output_cap: usize,
    stdin: Option<Vec<u8>>,
}

/// How a child ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case", tag = "kind", content = "value")]
pub enum Exit {
    Code(i32),
    Signal(i32),
    TimedOut,
}

/// A finished child: how it ended and what it printed (lossy UTF-8, capped).
#[derive(Debug, Clone)]
pub struct Output {
    pub exit: Exit,
    pub stdout: String,
    pub stderr: String,
    pub stdout_truncated: bool,
    pub stderr_truncated: bool,
    pub elapsed: Duration,
}

impl Output {
    pub fn success(&self) -> bool {
        self.exit == Exit::Code(0)
    }

    /// stdout then stderr, for tools that mix the two (nvcc, ncu).
    pub fn combined(&self) -> String {
        let mut text = self.stdout.clone();
        if !text.is_empty() && !text.ends_with('\n') && !self.stderr.is_empty() {
            text.push('\n');
        }
        text.push_str(&self.stderr);
        text
    }
}

impl std::fmt::Display for Exit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Exit::Code(code) => write!(f, "exit code {code}"),
            Exit::Signal(signal) => {
                write!(f, "killed by signal {signal} ({})", signal_name(*signal))
            }
            Exit::TimedOut => write!(f, "timed out"),
        }
    }
}

/// A child that could not be started or waited on.
#[derive(Debug, thiserror::Error)]
pub enum ProcError {
    #[error("could not start {program}: {source}")]
    Spawn {
        program: String,
        #[source]
        source: std::io::Error,
    },
    #[error("lost track of {program}: {source}")]
    Wait {
        program: String,
        #[source]
        source: std::io::Error,
    },
}

impl Command {
    pub fn new(program: impl Into<PathBuf>) -> Self {
        let mut env = BTreeMap::new();
        for name in INHERITED_ENV {
            if let Some(value) = std::env::var_os(name) {
                env.insert((*name).to_string(), value);
            }
        }
        Command {
            program: program.into(),
            args: Vec::new(),
            env,
            cwd: None,
            timeout: Duration::from_secs(60),
            output_cap: DEFAULT_OUTPUT_CAP,
            stdin: None,
        }
    }

    pub fn arg(mut self, arg: impl Into<OsString>) -> Self {
        self.args.push(arg.into());
        self
    }

    pub fn args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<OsString>,
    {
        self.args.extend(args.into_iter().map(Into::into));
        self
    }

    /// Sets a variable for the child (beyond the allow-list).
    pub fn env(mut self, name: impl Into<String>, value: impl Into<OsString>) -> Self {
        self.env.insert(name.into(), value.into());
        self
    }

    /// Removes an inherited variable.
    pub fn env_remove(mut self, name: &str) -> Self {
        self.env.remove(name);
        self
    }

    /// Prepends a folder to the child's PATH.
    pub fn path_prepend(mut self, dir: &Path) -> Self {
        let mut paths = vec![dir.to_path_buf()];
        if let Some(existing) = self.env.get("PATH") {
            paths.extend(std::env::split_paths(existing));
        }
        if let Ok(joined) = std::env::join_paths(paths) {
            self.env.insert("PATH".into(), joined);
        }
        self
    }

    pub fn cwd(mut self, dir: impl Into<PathBuf>) -> Self {
        self.cwd = Some(dir.into());
        self
    }

    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    pub fn output_cap(mut self, bytes: usize) -> Self {
        self.output_cap = bytes;
        self
    }

    pub fn stdin(mut self, bytes: impl Into<Vec<u8>>) -> Self {
        self.stdin = Some(bytes.into());
        self
    }

    pub fn program(&self) -> &Path {
        &self.program
    }

    /// The command line as a user could paste it (for logs and compile reports).
    pub fn display_line(&self) -> String {
        let mut words = vec![self.program.to_string_lossy().into_owned()];
        words.extend(self.args.iter().map(|a| a.to_string_lossy().into_owned()));
        shell_words::join(words)
    }

    /// The tokio command with the environment and process-group policy applied; for callers that
    /// keep a long-lived child (the worker) instead of waiting for it here.
    pub fn to_tokio(&self) -> tokio::process::Command {
        let mut command = tokio::process::Command::new(&self.program);
        command
            .args(&self.args)
            .env_clear()
            .envs(&self.env)
            .process_group(0)
            .kill_on_drop(true);
        if let Some(dir) = &self.cwd {
            command.current_dir(dir);
        }
        command
    }

    /// Runs the child to completion (or to its timeout).
    pub async fn run(&self) -> Result<Output, ProcError> {
        let started = Instant::now();
        let program = self.program.display().to_string();
        let mut command = self.to_tokio();
        command
            .stdin(if self.stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = command.spawn().map_err(|source| ProcError::Spawn {
            program: program.clone(),
            source,
        })?;
        let pid = child.id();
        if let (Some(bytes), Some(mut stdin)) = (self.stdin.clone(), child.stdin.take()) {
            // A child that exits without reading its stdin is not an error of ours.
            tokio::spawn(async move {
                let _ = stdin.write_all(&bytes).await;
            });
        }
        let stdout = tokio::spawn(read_capped(child.stdout.take(), self.output_cap));
        let stderr = tokio::spawn(read_capped(child.stderr.take(), self.output_cap));

        let exit = match tokio::time::timeout(self.timeout, child.wait()).await {
            Ok(status) => {
                let status = status.map_err(|source| ProcError::Wait {
                    program: program.clone(),
                    source,
                })?;
                exit_of(status)
            }
            Err(_) => {
                kill_group(pid);
                let _ = child.kill().await;
                Exit::TimedOut
            }
        };
        // The group may still hold the pipes open (a grandchild); stop it so reads end.
        kill_group(pid);
        let (stdout, stdout_truncated) = stdout.await.unwrap_or_default();
        let (stderr, stderr_truncated) = stderr.await.unwrap_or_default();
        Ok(Output {
            exit,
            stdout,
            stderr,
            stdout_truncated,
            stderr_truncated,
            elapsed: started.elapsed(),
        })
    }
}

/// Sends SIGKILL to the child's process group (the child leads it: `process_group(0)`).
pub fn kill_group(pid: Option<u32>) {
    if let Some(pid) = pid.and_then(|p| i32::try_from(p).ok()) {
        // SAFETY: killpg only sends a signal; a stale group id yields ESRCH, which we ignore.
        unsafe {
            libc::killpg(pid, libc::SIGKILL);
        }
    }
}

fn exit_of(status: std::process::ExitStatus) -> Exit {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => Exit::Code(code),
        (None, Some(signal)) => Exit::Signal(signal),
        (None, None) => Exit::Code(-1),
    }
}

async fn read_capped<R: AsyncRead + Unpin>(reader: Option<R>, cap: usize) -> (String, bool) {
    let Some(mut reader) = reader else {
        return (String::new(), false);
    };
    let mut kept = Vec::new();
    let mut chunk = vec![0u8; 64 * 1024];
    let mut truncated = false;
    loop {
        match reader.read(&mut chunk).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                let room = cap.saturating_sub(kept.len());
                if n > room {
                    truncated = true;
                }
                kept.extend_from_slice(&chunk[..n.min(room)]);
            }
        }
    }
    (String::from_utf8_lossy(&kept).into_owned(), truncated)
}

/// The conventional name of a POSIX signal number.
pub fn signal_name(signal: i32) -> &'static str {
    match signal {
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGABRT => "SIGABRT",
        libc::SIGKILL => "SIGKILL",
        libc::SIGBUS => "SIGBUS",
        libc::SIGFPE => "SIGFPE",
        libc::SIGILL => "SIGILL",
        libc::SIGTERM => "SIGTERM",
        libc::SIGINT => "SIGINT",
        libc::SIGPIPE => "SIGPIPE",
        _ => "signal",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(script: &str) -> Command {
        Command::new("/bin/sh").arg("-c").arg(script)
    }

    #[tokio::test]
    async fn captures_both_streams_and_exit_code() {
        let out = sh("echo out; echo err >&2; exit 3").run().await.unwrap();
        assert_eq!(out.exit, Exit::Code(3));
        assert_eq!(out.stdout, "out\n");
        assert_eq!(out.stderr, "err\n");
    }

    #[tokio::test]
    async fn environment_is_cleared_except_allow_list() {
        // SAFETY: tests in this module do not read this variable concurrently.
        unsafe { std::env::set_var("KFORGE_TEST_SECRET_KEY", "sk-should-not-leak") };
        let out = sh("env").run().await.unwrap();
        assert!(!out.stdout.contains("sk-should-not-leak"), "{}", out.stdout);
        let out = sh("echo $EXTRA").env("EXTRA", "given").run().await.unwrap();
        assert_eq!(out.stdout.trim(), "given");
    }

    #[tokio::test]
    async fn timeout_kills_the_whole_group() {
        // The grandchild `sleep` holds stdout; without a group kill the read would never end.
        let out = sh("sleep 30 & sleep 30")
            .timeout(Duration::from_millis(200))
            .run()
            .await
            .unwrap();
        assert_eq!(out.exit, Exit::TimedOut);
        assert!(out.elapsed < Duration::from_secs(10));
    }

    #[tokio::test]
    async fn output_is_capped_but_drained() {
        let out = sh("head -c 1000000 /dev/zero | tr '\\0' x")
            .output_cap(1000)
            .run()
            .await
            .unwrap();
        assert!(out.success());
        assert_eq!(out.stdout.len(), 1000);
        assert!(out.stdout_truncated);
    }

    #[tokio::test]
    async fn signal_is_reported() {
        let out = sh("kill -SEGV $$").run().await.unwrap();
        assert_eq!(out.exit, Exit::Signal(libc::SIGSEGV));
        assert!(out.exit.to_string().contains("SIGSEGV"));
    }

    #[tokio::test]
    async fn missing_program_is_a_spawn_error() {
        let err = Command::new("/nonexistent/tool").run().await.unwrap_err();
        assert!(matches!(err, ProcError::Spawn { .. }));
    }
}
