//! The engine of `kforge import`: which files a path names ([`plan`]), and running the exporter
//! (`kernelbench/export.py`, embedded in the binary so it works carried alone) over them
//! ([`import`]).
//!
//! One Python process serves the whole batch, since importing torch takes seconds. It reports
//! one JSON event per line on stdout; a problem that cannot be exported comes back as a skip with
//! a one-line reason and the batch goes on. If the interpreter itself dies on a problem (a
//! segfault in native code) or stops answering, that problem is reported as skipped and a fresh
//! process takes the rest.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, BufReader};

use super::spec::BundleDevice;
use crate::paths;
use crate::proc::{self, Exit, ProcError};

/// The exporter, as built into this binary.
pub const EXPORTER_SOURCE: &str = include_str!("../../kernelbench/export.py");

/// How long the exporter may take to import torch (and, on a GPU, measure its bandwidth and
/// peak rates) before it reports ready.
pub const STARTUP_TIMEOUT: Duration = Duration::from_secs(300);
/// Extra time past the exporter's own per-problem alarm before kforge kills it: the alarm
/// cannot interrupt native code, the kill can.
pub const KILL_GRACE: Duration = Duration::from_secs(60);
/// Default per-problem limit without and with baselines (torch.compile takes tens of seconds).
pub const PROBLEM_TIMEOUT: Duration = Duration::from_secs(300);
pub const PROBLEM_TIMEOUT_WITH_BASELINES: Duration = Duration::from_secs(900);

const EVENT_PREFIX: &str = "KFORGE_EVENT ";
const STDERR_TAIL_BYTES: usize = 16 * 1024;

/// One problem file and the bundle it becomes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ProblemFile {
    pub path: PathBuf,
    /// Bundle name: the stem, or `level<N>/<stem>` inside a KernelBench checkout.
    pub name: String,
    pub level: Option<u32>,
}

#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    #[error("{path}: no such file or folder")]
    NotFound { path: String },
    #[error("{path}: not a Python problem file (.py)")]
    NotPython { path: String },
    #[error("{path}: no problem files (*.py){detail}")]
    NoProblems { path: String, detail: String },
    #[error(
        "{first} and {second} would both become bundle `{name}`; import them separately with different --out"
    )]
    DuplicateName {
        name: String,
        first: String,
        second: String,
    },
    #[error("--size {0}: expected NAME=NUMBER, e.g. --size batch_size=16")]
    BadSize(String),
    #[error("cannot prepare the exporter in a temporary folder: {0}")]
    Workdir(#[source] std::io::Error),
    #[error(transparent)]
    Spawn(#[from] ProcError),
    #[error("the exporter ({python}) failed before importing anything ({exit}): {detail}")]
    ExporterFailed {
        python: String,
        exit: String,
        detail: String,
    },
    #[error("the exporter refused the job: {0}")]
    Refused(String),
}

/// Whether to measure baselines: `Auto` measures when the exporter sees a GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum BaselineMode {
    Auto,
    On,
    Off,
}

#[derive(Debug, Clone)]
pub struct ImportOptions {
    /// Bundles go to `<out>/<name>/`.
    pub out: PathBuf,
    /// `--size NAME=VALUE` overrides of module-level constants.
    pub sizes: Vec<(String, String)>,
    /// Trace on this device; `None` lets the exporter take the GPU when torch sees one.
    pub device: Option<BundleDevice>,
    pub baselines: BaselineMode,
    pub rebaseline: bool,
    /// Per problem; the exporter skips a problem that takes longer.
    pub problem_timeout: Duration,
}

/// What the exporter reports once torch is imported.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ExporterInfo {
    pub torch: String,
    pub python: String,
    pub device: BundleDevice,
    pub gpu: Option<String>,
    pub baselines: bool,
    pub baselines_reason: Option<String>,
    pub bandwidth_bytes_per_s: Option<f64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ImportStatus {
    Imported,
    Unchanged,
    Skipped,
}

/// One problem's outcome.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ImportResult {
    /// The problem file as the user named it.
    pub file: String,
    pub name: String,
    pub status: ImportStatus,
    /// Why it was skipped (one line).
    #[serde(default)]
    pub reason: Option<String>,
    #[serde(default)]
    pub bundle: Option<PathBuf>,
    #[serde(default)]
    pub inputs: Option<usize>,
    #[serde(default)]
    pub outputs: Option<usize>,
    #[serde(default)]
    pub flops: Option<u64>,
    #[serde(default)]
    pub min_bytes: Option<u64>,
    #[serde(default)]
    pub stochastic: Option<bool>,
    #[serde(default)]
    pub notes: Vec<String>,
    #[serde(default)]
    pub baseline: Option<BaselineSummary>,
    #[serde(default)]
    pub seconds: Option<f64>,
}

/// The baseline part of a result (the full record is `baselines/<gpu>.json`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BaselineSummary {
    /// `measured`, `reused`, `skipped` or `failed`.
    pub status: String,
    #[serde(default)]
    pub reason: Option<String>,
    #[serde(default)]
    pub eager_ms: Option<f64>,
    #[serde(default)]
    pub compile_ms: Option<f64>,
    #[serde(default)]
    pub reference_ms: Option<f64>,
    #[serde(default)]
    pub floor_ms: Option<f64>,
    #[serde(default)]
    pub floor_bound: Option<String>,
    #[serde(default)]
    pub compile_error: Option<String>,
}

/// The whole batch.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ImportReport {
    pub exporter: Option<ExporterInfo>,
    pub results: Vec<ImportResult>,
    /// `--size` names that no problem of the batch defines.
    pub unused_sizes: Vec<String>,
}

impl ImportReport {
    pub fn count(&self, status: ImportStatus) -> usize {
        self.results.iter().filter(|r| r.status == status).count()
    }
}

#[derive(Debug, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
enum Event {
    Ready(ExporterInfo),
    Start {
        index: usize,
    },
    Result {
        index: usize,
        #[serde(flatten)]
        result: Box<ImportResult>,
    },
    Done {
        unused_sizes: Vec<String>,
    },
    Fatal {
        message: String,
    },
}

// ---------------------------------------------------------------------------------------------
// Which files

/// The problem files `paths` name, in import order. A KernelBench checkout (a folder with
/// `level<N>/` folders, directly or under `KernelBench/`) is imported level by level; `level`
/// keeps only that level there, and labels problems of other folders.
pub fn plan(paths: &[PathBuf], level: Option<u32>) -> Result<Vec<ProblemFile>, ImportError> {
    let mut files = Vec::new();
    for path in paths {
        if path.is_file() {
            files.push(single_file(path, level)?);
        } else if path.is_dir() {
            files.extend(folder(path, level)?);
        } else {
            return Err(ImportError::NotFound {
                path: paths::display(path),
            });
        }
    }
    let mut seen: Vec<&ProblemFile> = Vec::new();
    for file in &files {
        if let Some(first) = seen.iter().find(|f| f.name == file.name) {
            return Err(ImportError::DuplicateName {
                name: file.name.clone(),
                first: paths::display(&first.path),
                second: paths::display(&file.path),
            });
        }
        seen.push(file);
    }
    Ok(files)
}

/// `level3` → 3.
fn level_of(dir: &Path) -> Option<u32> {
    dir.file_name()?
        .to_str()?
        .strip_prefix("level")?
        .parse()
        .ok()
}

fn stem(path: &Path) -> String {
    path.file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default()
}

fn single_file(path: &Path, level: Option<u32>) -> Result<ProblemFile, ImportError> {
    if path.extension().and_then(|e| e.to_str()) != Some("py") {
        return Err(ImportError::NotPython {
            path: paths::display(path),
        });
    }
    // A file inside a checkout's level folder keeps the name the whole checkout would give it.
    let folder_level = path.parent().and_then(level_of);
    let name = match folder_level {
        Some(n) => format!("level{n}/{}", stem(path)),
        None => stem(path),
    };
    Ok(ProblemFile {
        path: path.to_path_buf(),
        name,
        level: level.or(folder_level),
    })
}

fn folder(dir: &Path, level: Option<u32>) -> Result<Vec<ProblemFile>, ImportError> {
    let shown = paths::display(dir);
    let mut level_dirs: Vec<(u32, PathBuf)> = Vec::new();
    for root in [dir.to_path_buf(), dir.join("KernelBench")] {
        for entry in read_dir_sorted(&root) {
            if entry.is_dir()
                && let Some(n) = level_of(&entry)
            {
                level_dirs.push((n, entry));
            }
        }
        if !level_dirs.is_empty() {
            break;
        }
    }
    let mut files = Vec::new();
    if !level_dirs.is_empty() {
        level_dirs.sort();
        let found: Vec<String> = level_dirs
            .iter()
            .map(|(n, _)| format!("level{n}"))
            .collect();
        for (n, level_dir) in &level_dirs {
            if level.is_some_and(|wanted| wanted != *n) {
                continue;
            }
            files.extend(python_files(level_dir).into_iter().map(|path| ProblemFile {
                name: format!("level{n}/{}", stem(&path)),
                path,
                level: Some(*n),
            }));
        }
        if files.is_empty() {
            return Err(ImportError::NoProblems {
                path: shown,
                detail: match level {
                    Some(n) => format!(" in level{n} (found {})", found.join(", ")),
                    None => " in its level folders".to_string(),
                },
            });
        }
        return Ok(files);
    }
    let folder_level = level_of(dir);
    for path in python_files(dir) {
        files.push(ProblemFile {
            name: match folder_level {
                Some(n) => format!("level{n}/{}", stem(&path)),
                None => stem(&path),
            },
            path,
            level: level.or(folder_level),
        });
    }
    if files.is_empty() {
        return Err(ImportError::NoProblems {
            path: shown,
            detail: String::new(),
        });
    }
    Ok(files)
}

fn read_dir_sorted(dir: &Path) -> Vec<PathBuf> {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .collect();
    entries.sort();
    entries
}

/// `*.py` in `dir` (not `__init__.py` or other `_`/`.` files), KernelBench's numbered names in
/// numeric order (`2_x.py` before `10_y.py`).
fn python_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = read_dir_sorted(dir)
        .into_iter()
        .filter(|p| {
            p.is_file()
                && p.extension().and_then(|e| e.to_str()) == Some("py")
                && !stem(p).starts_with(['_', '.'])
        })
        .collect();
    files.sort_by_key(|p| {
        let name = stem(p);
        let digits: String = name.chars().take_while(char::is_ascii_digit).collect();
        (digits.parse::<u64>().unwrap_or(u64::MAX), name)
    });
    files
}

/// Checks `NAME=VALUE` from `--size`: a Python identifier and a number.
pub fn parse_size(text: &str) -> Result<(String, String), ImportError> {
    let bad = || ImportError::BadSize(text.to_string());
    let (name, value) = text.split_once('=').ok_or_else(bad)?;
    let (name, value) = (name.trim(), value.trim());
    let identifier = name
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    let number = value.parse::<i64>().is_ok() || value.parse::<f64>().is_ok_and(f64::is_finite);
    if !identifier || !number {
        return Err(bad());
    }
    Ok((name.to_string(), value.to_string()))
}

// ---------------------------------------------------------------------------------------------
// Running the exporter

/// Exports `files` with `python`, calling `on_result` as each problem finishes.
pub async fn import(
    python: &Path,
    files: &[ProblemFile],
    options: &ImportOptions,
    mut on_result: impl FnMut(&ImportResult),
) -> Result<ImportReport, ImportError> {
    for (name, value) in &options.sizes {
        parse_size(&format!("{name}={value}"))?;
    }
    let workdir = tempfile::Builder::new()
        .prefix("kforge-export-")
        .tempdir()
        .map_err(ImportError::Workdir)?;
    let exporter = workdir.path().join("export.py");
    std::fs::write(&exporter, EXPORTER_SOURCE).map_err(ImportError::Workdir)?;
    let out = std::path::absolute(&options.out).map_err(ImportError::Workdir)?;

    let mut report = ImportReport::default();
    let mut unused: Option<BTreeSet<String>> = None;
    let mut offset = 0;
    while offset < files.len() {
        let batch = &files[offset..];
        let job = workdir.path().join("job.json");
        let job_text = job_json(batch, files.len() == 1, &out, options);
        std::fs::write(&job, job_text).map_err(ImportError::Workdir)?;
        let session = run_session(
            python,
            &exporter,
            &job,
            workdir.path(),
            options.problem_timeout + KILL_GRACE,
            &mut |result| {
                on_result(result);
                report.results.push(result.clone());
            },
        )
        .await?;
        if report.exporter.is_none() {
            report.exporter = session.ready.clone();
        }
        if let Some(message) = session.fatal {
            return Err(ImportError::Refused(message));
        }
        match session.ending {
            Ending::Done(names) => {
                let names: BTreeSet<String> = names.into_iter().collect();
                unused = Some(match unused {
                    Some(before) => before.intersection(&names).cloned().collect(),
                    None => names,
                });
                break;
            }
            Ending::Died(why) => {
                let Some(current) = session.in_progress else {
                    return Err(ImportError::ExporterFailed {
                        python: paths::display(python),
                        exit: why,
                        detail: last_line(&session.stderr_tail),
                    });
                };
                let file = &batch[current];
                let tail = last_line(&session.stderr_tail);
                let result = ImportResult {
                    file: paths::display(&file.path),
                    name: file.name.clone(),
                    status: ImportStatus::Skipped,
                    reason: Some(if tail.is_empty() {
                        format!("the exporter died on it ({why})")
                    } else {
                        format!("the exporter died on it ({why}); its last words: {tail}")
                    }),
                    bundle: None,
                    inputs: None,
                    outputs: None,
                    flops: None,
                    min_bytes: None,
                    stochastic: None,
                    notes: Vec::new(),
                    baseline: None,
                    seconds: None,
                };
                on_result(&result);
                report.results.push(result);
                offset += current + 1;
            }
        }
    }
    report.unused_sizes = unused.map(|u| u.into_iter().collect()).unwrap_or_default();
    Ok(report)
}

fn job_json(batch: &[ProblemFile], single: bool, out: &Path, options: &ImportOptions) -> String {
    let problems: Vec<serde_json::Value> = batch
        .iter()
        .map(|f| {
            serde_json::json!({
                "path": std::path::absolute(&f.path).unwrap_or_else(|_| f.path.clone()),
                "display": paths::display(&f.path),
                "name": f.name,
                "level": f.level,
            })
        })
        .collect();
    let sizes: serde_json::Map<String, serde_json::Value> = options
        .sizes
        .iter()
        .map(|(k, v)| (k.clone(), serde_json::Value::String(v.clone())))
        .collect();
    serde_json::json!({
        "problems": problems,
        "out": out,
        "sizes": sizes,
        "device": options.device.map(BundleDevice::as_str),
        "baselines": options.baselines,
        "rebaseline": options.rebaseline,
        "problem_timeout_s": options.problem_timeout.as_secs(),
        "single": single,
    })
    .to_string()
}

enum Ending {
    /// The exporter went through the whole batch; the `--size` names no problem used.
    Done(Vec<String>),
    /// It exited, crashed or was killed early: how.
    Died(String),
}

struct Session {
    ready: Option<ExporterInfo>,
    fatal: Option<String>,
    /// Index in the batch of the problem started but not finished.
    in_progress: Option<usize>,
    ending: Ending,
    stderr_tail: String,
}

/// One exporter process: streams its events until it finishes, dies, or stays silent longer
/// than its limit (then its whole process group is killed).
async fn run_session(
    python: &Path,
    exporter: &Path,
    job: &Path,
    workdir: &Path,
    problem_limit: Duration,
    on_result: &mut dyn FnMut(&ImportResult),
) -> Result<Session, ImportError> {
    let command = proc::Command::new(python)
        .arg(exporter)
        .arg("--job")
        .arg(job)
        .cwd(workdir)
        .env("PYTHONUNBUFFERED", "1")
        .env("PYTHONDONTWRITEBYTECODE", "1")
        // Hub libraries fail fast instead of trying the network (export.py also blocks sockets).
        .env("HF_HUB_OFFLINE", "1")
        .env("TRANSFORMERS_OFFLINE", "1");
    let program = paths::display(python);
    let mut child = command
        .to_tokio()
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|source| ProcError::Spawn {
            program: program.clone(),
            source,
        })?;
    let pid = child.id();
    let stderr = tokio::spawn(stderr_tail(child.stderr.take()));
    let mut session = Session {
        ready: None,
        fatal: None,
        in_progress: None,
        ending: Ending::Died(String::new()),
        stderr_tail: String::new(),
    };
    let mut stalled = None;
    if let Some(stdout) = child.stdout.take() {
        let mut lines = BufReader::new(stdout).lines();
        loop {
            let limit = if session.ready.is_none() {
                STARTUP_TIMEOUT
            } else {
                problem_limit
            };
            let line = match tokio::time::timeout(limit, lines.next_line()).await {
                Ok(Ok(Some(line))) => line,
                Ok(Ok(None)) | Ok(Err(_)) => break,
                Err(_) => {
                    stalled = Some(limit);
                    break;
                }
            };
            let Some(json) = line.strip_prefix(EVENT_PREFIX) else {
                continue;
            };
            let event: Event = match serde_json::from_str(json) {
                Ok(e) => e,
                Err(e) => {
                    tracing::warn!("unreadable exporter event ({e}): {json}");
                    continue;
                }
            };
            match event {
                Event::Ready(info) => session.ready = Some(info),
                Event::Start { index } => session.in_progress = Some(index),
                Event::Result { index, result } => {
                    if session.in_progress != Some(index) {
                        tracing::warn!("exporter reported problem {index} without starting it");
                    }
                    session.in_progress = None;
                    on_result(&result);
                }
                Event::Done { unused_sizes } => {
                    session.ending = Ending::Done(unused_sizes);
                }
                Event::Fatal { message } => session.fatal = Some(message),
            }
        }
    }
    if stalled.is_some() {
        proc::kill_group(pid);
    }
    let exit = match tokio::time::timeout(Duration::from_secs(30), child.wait()).await {
        Ok(Ok(status)) => Some(exit_of(status)),
        Ok(Err(source)) => {
            return Err(ProcError::Wait { program, source }.into());
        }
        Err(_) => None,
    };
    // Grandchildren (torch.compile workers) must not outlive the batch.
    proc::kill_group(pid);
    session.stderr_tail = stderr.await.unwrap_or_default();
    if !matches!(session.ending, Ending::Done(_)) {
        session.ending = Ending::Died(match (stalled, exit) {
            (Some(limit), _) => format!(
                "no answer for {} s, killed (hung in native code?)",
                limit.as_secs()
            ),
            (None, Some(exit)) => exit.to_string(),
            (None, None) => "closed its output and did not exit".to_string(),
        });
    }
    Ok(session)
}

fn exit_of(status: std::process::ExitStatus) -> Exit {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => Exit::Code(code),
        (None, Some(signal)) => Exit::Signal(signal),
        (None, None) => Exit::Code(-1),
    }
}

/// The last `STDERR_TAIL_BYTES` of the exporter's stderr (each line also goes to the debug
/// log: it is where the problems' own prints land).
async fn stderr_tail<R: AsyncRead + Unpin>(reader: Option<R>) -> String {
    let Some(reader) = reader else {
        return String::new();
    };
    let mut tail: Vec<u8> = Vec::new();
    let mut reader = BufReader::new(reader);
    let mut line = Vec::new();
    loop {
        line.clear();
        match (&mut reader)
            .take(64 * 1024)
            .read_until(b'\n', &mut line)
            .await
        {
            Ok(0) | Err(_) => break,
            Ok(_) => {
                tracing::debug!(target: "kforge::export", "{}", String::from_utf8_lossy(&line).trim_end());
                tail.extend_from_slice(&line);
                if tail.len() > STDERR_TAIL_BYTES {
                    tail.drain(..tail.len() - STDERR_TAIL_BYTES);
                }
            }
        }
    }
    String::from_utf8_lossy(&tail).into_owned()
}

fn last_line(text: &str) -> String {
    text.lines()
        .rev()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or_default()
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn touch(path: &Path) {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, "").unwrap();
    }

    fn names(files: &[ProblemFile]) -> Vec<(String, Option<u32>)> {
        files.iter().map(|f| (f.name.clone(), f.level)).collect()
    }

    #[test]
    fn a_checkout_is_imported_level_by_level_in_numeric_order() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("KernelBench");
        for file in [
            "level2/1_Conv2d_ReLU.py",
            "level1/10_Matmul.py",
            "level1/2_Softmax.py",
            "level1/__init__.py",
            "level1/notes.txt",
        ] {
            touch(&root.join(file));
        }
        let files = plan(&[dir.path().to_path_buf()], None).unwrap();
        assert_eq!(
            names(&files),
            [
                ("level1/2_Softmax".to_string(), Some(1)),
                ("level1/10_Matmul".to_string(), Some(1)),
                ("level2/1_Conv2d_ReLU".to_string(), Some(2)),
            ]
        );
        let only_two = plan(&[dir.path().to_path_buf()], Some(2)).unwrap();
        assert_eq!(
            names(&only_two),
            [("level2/1_Conv2d_ReLU".to_string(), Some(2))]
        );
        let err = plan(&[dir.path().to_path_buf()], Some(4)).unwrap_err();
        assert!(err.to_string().contains("level1, level2"), "{err}");
    }

    #[test]
    fn a_file_in_a_level_folder_keeps_its_checkout_name() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("level3/5_MLP.py");
        touch(&file);
        assert_eq!(
            names(&plan(&[file], None).unwrap()),
            [("level3/5_MLP".to_string(), Some(3))]
        );
        let flat = dir.path().join("mine/softmax_rows.py");
        touch(&flat);
        assert_eq!(
            names(&plan(&[flat.parent().unwrap().to_path_buf()], Some(1)).unwrap()),
            [("softmax_rows".to_string(), Some(1))]
        );
    }

    #[test]
    fn bad_paths_are_errors_that_name_them() {
        let dir = tempfile::tempdir().unwrap();
        let err = plan(&[dir.path().join("missing.py")], None).unwrap_err();
        assert!(matches!(err, ImportError::NotFound { .. }), "{err}");
        let txt = dir.path().join("a.txt");
        touch(&txt);
        assert!(matches!(
            plan(&[txt], None).unwrap_err(),
            ImportError::NotPython { .. }
        ));
        let empty = dir.path().join("empty");
        std::fs::create_dir(&empty).unwrap();
        assert!(matches!(
            plan(&[empty], None).unwrap_err(),
            ImportError::NoProblems { .. }
        ));
        let (a, b) = (dir.path().join("a/x.py"), dir.path().join("b/x.py"));
        touch(&a);
        touch(&b);
        let err = plan(&[a, b], None).unwrap_err();
        assert!(err.to_string().contains("bundle `x`"), "{err}");
    }

    #[test]
    fn sizes_must_be_named_numbers() {
        assert_eq!(
            parse_size("batch_size=16").unwrap(),
            ("batch_size".to_string(), "16".to_string())
        );
        assert!(parse_size("eps = 1e-5").is_ok());
        for bad in ["batch_size", "=3", "dim=abc", "2x=3", "dim=nan", "a-b=1"] {
            assert!(parse_size(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn exporter_events_parse() {
        let line = r#"{"event": "result", "index": 3, "file": "p.py", "name": "p", "seconds": 0.2, "status": "skipped", "reason": "syntax error at line 7: invalid syntax"}"#;
        match serde_json::from_str::<Event>(line).unwrap() {
            Event::Result { index, result } => {
                assert_eq!(index, 3);
                assert_eq!(result.status, ImportStatus::Skipped);
                assert_eq!(
                    result.reason.as_deref(),
                    Some("syntax error at line 7: invalid syntax")
                );
            }
            other => panic!("{other:?}"),
        }
    }
}
