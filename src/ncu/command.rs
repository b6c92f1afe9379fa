//! The ncu command lines kforge runs, and what their failures mean.
//!
//! Profiling one candidate call is two runs of ncu:
//! 1. `ncu --profile-from-start off --clock-control none --target-processes all --replay-mode
//!    kernel --section-folder DIR --section ID... [--launch-count N] --force-overwrite --export
//!    REPORT WORKER ARGS...`.
//!    The worker calls the candidate once after warm-up between the driver's `cuProfilerStart` and
//!    `cuProfilerStop`, so ncu profiles exactly the launches of that call, the candidate's own
//!    and any library's, and nothing of loading, verifying or timing (`--profile-from-start
//!    off`). Clocks stay as the GPU runs them (`--clock-control none`), as the timing protocol
//!    does. Kernel replay re-runs each launch once per counter pass, restoring memory in between.
//!    The report (`REPORT.ncu-rep`) is kept for Nsight Compute's UI.
//! 2. `ncu --import REPORT.ncu-rep --csv --page raw --print-units base` prints the CSV that
//!    [`crate::ncu::parse`] reads (base units: bytes, nanoseconds, no auto-scaling).
//!
//! Both go through [`crate::proc::Command`] with a timeout. A profile that cannot be had (no ncu,
//! counters not permitted, a sandbox without the profiler library, no kernel in the range, a
//! timeout) is a [`ProfileUnavailable`] the evaluator records beside the timing and ptxas
//! results; it never changes a verdict and never ends a run.
//!
//! The failure texts classified here are ncu 2025.3's (seen on the H200 host and in its docs):
//! `==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU
//! Performance Counters...`, `Failed to initialize the profiler: LibraryNotLoaded` (gVisor
//! sandboxes), `==WARNING== No kernels were profiled.` (exit status 0, no report written), and
//! `==ERROR== The application returned an error code (N).`

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::ncu::parse::{self, NcuReport, Page};
use crate::ncu::sections::ResolvedSections;
use crate::proc::{Command, Exit, Output, ProcError};

/// Kernel replay of ≈30 metrics over a handful of launches took 2–4 s on the H200; a call with
/// many launches or long kernels can take much longer, and the profile must still end.
pub const DEFAULT_PROFILE_TIMEOUT: Duration = Duration::from_secs(180);
/// Exporting a report is fast (0.6 s for four launches); this only guards against a hang.
pub const DEFAULT_IMPORT_TIMEOUT: Duration = Duration::from_secs(60);
/// A call that launches more kernels than this is profiled for its first ones only, so one
/// candidate with a kernel per element cannot stall the search for hours.
pub const DEFAULT_MAX_LAUNCHES: u32 = 200;

/// What to profile and where to keep the report.
#[derive(Debug, Clone)]
pub struct ProfileSpec<'a> {
    /// The ncu executable (found with `crate::tools::locate(Tool::Ncu, ..)`).
    pub ncu: &'a Path,
    pub sections: &'a ResolvedSections,
    /// The report's path without the `.ncu-rep` extension ncu adds (`<node>/profile`).
    pub report_stem: &'a Path,
    /// The worker (or any program) that brackets the call with cuProfilerStart/Stop.
    pub target: &'a Path,
    pub target_args: &'a [OsString],
    pub profile_timeout: Duration,
    pub import_timeout: Duration,
    /// `--launch-count`: None profiles every launch in the range.
    pub max_launches: Option<u32>,
}

/// The two commands of one profile, and the report the first writes.
#[derive(Debug, Clone)]
pub struct ProfileCommands {
    pub profile: Command,
    pub import: Command,
    /// `<report_stem>.ncu-rep`.
    pub report: PathBuf,
    /// The profile command's timeout (for the reason given when it runs out).
    pub profile_timeout: Duration,
}

/// The ncu commands for `spec`. Environment the target needs (LD_LIBRARY_PATH for libtorch,
/// CUDA_VISIBLE_DEVICES) passes through ncu: set it on [`ProfileCommands::profile`].
pub fn profile_commands(spec: &ProfileSpec<'_>) -> ProfileCommands {
    let report = report_path(spec.report_stem);
    let mut profile = Command::new(spec.ncu)
        .args([
            "--profile-from-start",
            "off",
            "--clock-control",
            "none",
            "--target-processes",
            "all",
            "--replay-mode",
            "kernel",
        ])
        .args(spec.sections.ncu_args());
    if let Some(count) = spec.max_launches {
        profile = profile.arg("--launch-count").arg(count.to_string());
    }
    let profile = profile
        .arg("--force-overwrite")
        .arg("--export")
        .arg(spec.report_stem)
        .arg(spec.target)
        .args(spec.target_args.iter().cloned())
        .timeout(spec.profile_timeout);
    ProfileCommands {
        import: import_command(spec.ncu, &report, Page::Raw, spec.import_timeout),
        profile,
        report,
        profile_timeout: spec.profile_timeout,
    }
}

/// `ncu --import REPORT --csv --page raw|details --print-units base`.
pub fn import_command(ncu: &Path, report: &Path, page: Page, timeout: Duration) -> Command {
    Command::new(ncu)
        .arg("--import")
        .arg(report)
        .args(["--csv", "--page"])
        .arg(page.to_string())
        .args(["--print-units", "base"])
        .timeout(timeout)
}

fn report_path(stem: &Path) -> PathBuf {
    let mut name = stem.as_os_str().to_os_string();
    name.push(".ncu-rep");
    PathBuf::from(name)
}

/// Why there is no profile; the evaluator stores it in the candidate's result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[serde(tag = "reason", rename_all = "snake_case")]
pub enum ProfileUnavailable {
    #[error("ncu is not available ({detail}); install Nsight Compute or set tools.ncu")]
    NcuMissing { detail: String },
    #[error(
        "this user may not read the GPU's performance counters (ERR_NVGPUCTRPERM); run as root, \
         or load the NVIDIA driver with NVreg_RestrictProfilingToAdminUsers=0"
    )]
    CountersNotPermitted,
    #[error(
        "ncu could not load its profiling library (LibraryNotLoaded), as in gVisor sandboxes; \
         profiling needs a VM or bare metal"
    )]
    ProfilerLibraryNotLoaded,
    #[error("ncu profiled no kernels: the call launched none between cuProfilerStart and Stop")]
    NoKernelsProfiled,
    #[error("ncu did not finish within {seconds} s")]
    TimedOut { seconds: u64 },
    #[error("the profiled program failed under ncu ({detail})")]
    TargetFailed { detail: String },
    #[error("ncu failed ({exit}): {detail}")]
    NcuFailed { exit: String, detail: String },
    #[error("the ncu report could not be read: {detail}")]
    ReportUnreadable { detail: String },
}

/// A child that could not even start: ncu is missing (or not executable).
pub fn classify_spawn_error(error: &ProcError) -> ProfileUnavailable {
    ProfileUnavailable::NcuMissing {
        detail: error.to_string(),
    }
}

/// What went wrong in a finished profile run, or None when it produced a report to import.
pub fn classify_profile_output(output: &Output, timeout: Duration) -> Option<ProfileUnavailable> {
    if output.exit == Exit::TimedOut {
        return Some(ProfileUnavailable::TimedOut {
            seconds: u64::try_from(timeout.as_millis().div_ceil(1000)).unwrap_or(u64::MAX),
        });
    }
    let text = output.combined();
    if text.contains("ERR_NVGPUCTRPERM") {
        return Some(ProfileUnavailable::CountersNotPermitted);
    }
    if text.contains("LibraryNotLoaded") {
        return Some(ProfileUnavailable::ProfilerLibraryNotLoaded);
    }
    if text.contains("No kernels were profiled") {
        return Some(ProfileUnavailable::NoKernelsProfiled);
    }
    if let Some(code) = application_error(&text) {
        return Some(ProfileUnavailable::TargetFailed {
            detail: format!("it exited with status {code}"),
        });
    }
    if !output.success() {
        return Some(ProfileUnavailable::NcuFailed {
            exit: output.exit.to_string(),
            detail: error_lines(&text),
        });
    }
    None
}

/// N in "The application returned an error code (N)".
fn application_error(text: &str) -> Option<String> {
    let rest = text
        .split("The application returned an error code (")
        .nth(1)?;
    Some(rest.split(')').next().unwrap_or_default().to_string())
}

/// ncu's `==ERROR==` lines, or the end of its output when it printed none.
fn error_lines(text: &str) -> String {
    let errors: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("==ERROR=="))
        .map(str::trim)
        .collect();
    if !errors.is_empty() {
        return errors.join(" | ");
    }
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    lines[lines.len().saturating_sub(5)..].join(" | ")
}

/// A profile that worked.
#[derive(Debug, Clone)]
pub struct ProfileRun {
    pub report: NcuReport,
    /// The `.ncu-rep` file, kept for Nsight Compute's UI.
    pub report_path: PathBuf,
    pub profile_wall: Duration,
    pub import_wall: Duration,
}

/// Runs both commands and parses the export. Every failure is a [`ProfileUnavailable`].
pub async fn collect(commands: &ProfileCommands) -> Result<ProfileRun, ProfileUnavailable> {
    let profiled = commands
        .profile
        .run()
        .await
        .map_err(|e| classify_spawn_error(&e))?;
    if let Some(reason) = classify_profile_output(&profiled, commands.profile_timeout) {
        return Err(reason);
    }
    if !commands.report.is_file() {
        return Err(ProfileUnavailable::ReportUnreadable {
            detail: format!(
                "ncu wrote no report at {}",
                crate::paths::display(&commands.report)
            ),
        });
    }
    let imported = commands
        .import
        .run()
        .await
        .map_err(|e| classify_spawn_error(&e))?;
    if !imported.success() {
        return Err(ProfileUnavailable::ReportUnreadable {
            detail: format!(
                "ncu --import: {} ({})",
                error_lines(&imported.combined()),
                imported.exit
            ),
        });
    }
    let report = parse::parse_raw_csv(&imported.stdout).map_err(|e| {
        ProfileUnavailable::ReportUnreadable {
            detail: e.to_string(),
        }
    })?;
    if report.is_empty() {
        return Err(ProfileUnavailable::NoKernelsProfiled);
    }
    Ok(ProfileRun {
        report,
        report_path: commands.report.clone(),
        profile_wall: profiled.elapsed,
        import_wall: imported.elapsed,
    })
}
