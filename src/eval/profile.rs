//! Profiling one call of a candidate (or of the PyTorch reference) with Nsight Compute: ncu runs
//! the worker in profile mode (`kforge worker --request FILE --result FILE`), which warms up and
//! then calls once between cuProfilerStart and cuProfilerStop. The CSV export is parsed, rolled
//! up across kernels, diagnosed, and rendered as the Judge's view; the `.ncu-rep` is kept.
//!
//! A profile never changes a verdict: a missing ncu, refused counters, a crash under ncu or a
//! timeout all come back as [`ProfileUnavailable`] for the caller to record.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Instant;

use serde::{Deserialize, Serialize};

use super::protocol::{WorkerOutcome, WorkerRequest};
use crate::ncu::{self, ProfileUnavailable, SectionSet};

/// What a successful profile gives the Judge and the user.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ProfileResult {
    /// The rendered metric table and diagnosis the Judge reads.
    pub judge_view: String,
    pub diagnosis: ncu::Diagnosis,
    /// Kernels in the call with their duration shares.
    pub kernels: Vec<ncu::KernelShare>,
    pub launches: usize,
    /// The kept report, for Nsight Compute's UI (`ncu --import` re-exports its CSV).
    pub report: PathBuf,
    /// The parsed export, every metric of every launch.
    pub metrics: ncu::NcuReport,
    pub seconds: f64,
}

/// A profile as result documents (`ncu` of `kforge eval --profile`) and run directories
/// (`ncu.json`) keep it: the Judge's view and diagnosis, or why there is none.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ProfileRecord {
    pub profiled: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub judge_view: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub diagnosis: Option<ncu::Diagnosis>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub kernels: Vec<ncu::KernelShare>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub launches: Option<usize>,
    /// The `.ncu-rep`, as shown (home folder as `~`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub report: Option<String>,
    /// Every metric of every launch (kept in run directories, left out of result documents).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metrics: Option<ncu::NcuReport>,
    pub seconds: f64,
}

impl ProfileRecord {
    pub fn unavailable(reason: impl Into<String>) -> ProfileRecord {
        ProfileRecord {
            reason: Some(reason.into()),
            ..ProfileRecord::default()
        }
    }

    /// The record of a profile attempt that took `seconds` (used when it failed; a profile
    /// reports its own time).
    pub fn of(outcome: Result<ProfileResult, ProfileUnavailable>, seconds: f64) -> ProfileRecord {
        match outcome {
            Ok(profile) => ProfileRecord {
                profiled: true,
                judge_view: Some(profile.judge_view),
                reason: None,
                diagnosis: Some(profile.diagnosis),
                kernels: profile.kernels,
                launches: Some(profile.launches),
                report: Some(crate::paths::display(&profile.report)),
                metrics: Some(profile.metrics),
                seconds: profile.seconds,
            },
            Err(reason) => ProfileRecord {
                seconds,
                ..ProfileRecord::unavailable(reason.to_string())
            },
        }
    }

    /// The record without the full metrics, for a result document.
    pub fn summary(&self) -> ProfileRecord {
        ProfileRecord {
            metrics: None,
            ..self.clone()
        }
    }
}

/// Profiles `library` (None: the reference) on `bundle` with the given sections, writing the
/// report to `<report_stem>.ncu-rep`.
pub async fn profile(
    ncu_path: &Path,
    sections: &SectionSet,
    cache_dir: &Path,
    bundle: &Path,
    library: Option<&Path>,
    report_stem: &Path,
) -> Result<ProfileResult, ProfileUnavailable> {
    let started = Instant::now();
    let resolved = sections
        .resolve(cache_dir)
        .map_err(|e| ProfileUnavailable::NcuFailed {
            exit: "not run".into(),
            detail: format!("the metric sections could not be prepared: {e}"),
        })?;
    let scratch = tempfile::tempdir().map_err(|e| ProfileUnavailable::NcuFailed {
        exit: "not run".into(),
        detail: format!("no temporary folder: {e}"),
    })?;
    let request_file = scratch.path().join("request.json");
    let result_file = scratch.path().join("result.json");
    let request = WorkerRequest::Profile {
        id: 1,
        bundle: bundle.to_path_buf(),
        library: library.map(Path::to_path_buf),
        warmups: 3,
        seed: 1000,
    };
    std::fs::write(
        &request_file,
        serde_json::to_string(&request).unwrap_or_default(),
    )
    .map_err(|e| ProfileUnavailable::NcuFailed {
        exit: "not run".into(),
        detail: format!("cannot write the worker request: {e}"),
    })?;
    let target = std::env::current_exe().map_err(|e| ProfileUnavailable::NcuFailed {
        exit: "not run".into(),
        detail: format!("cannot find this executable: {e}"),
    })?;
    let target_args: Vec<OsString> = vec![
        "worker".into(),
        "--request".into(),
        request_file.clone().into(),
        "--result".into(),
        result_file.clone().into(),
    ];
    let commands = ncu::profile_commands(&ncu::ProfileSpec {
        ncu: ncu_path,
        sections: &resolved,
        report_stem,
        target: &target,
        target_args: &target_args,
        profile_timeout: ncu::command::DEFAULT_PROFILE_TIMEOUT,
        import_timeout: ncu::command::DEFAULT_IMPORT_TIMEOUT,
        max_launches: Some(ncu::command::DEFAULT_MAX_LAUNCHES),
    });
    let collected = ncu::command::collect(&commands).await;
    // The worker's own verdict on the profiled call explains a failure better than ncu's.
    let worker: Option<WorkerOutcome> = std::fs::read_to_string(&result_file)
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok());
    if let Some(failure) = worker.as_ref().and_then(|w| w.failure.as_ref()) {
        return Err(ProfileUnavailable::TargetFailed {
            detail: format!(
                "{:?} during {}: {}",
                failure.kind, failure.stage, failure.message
            ),
        });
    }
    let run = collected?;
    let rollup = ncu::rollup(&run.report);
    let diagnosis = ncu::diagnose(&rollup);
    Ok(ProfileResult {
        judge_view: ncu::render_for_judge(&rollup, &diagnosis),
        kernels: rollup.kernels.clone(),
        launches: run.report.kernels.len(),
        diagnosis,
        report: run.report_path,
        metrics: run.report,
        seconds: started.elapsed().as_secs_f64(),
    })
}
