//! What a run asks of the hardware: evaluate a kernel (compile, verify, time, and profile it when
//! correct) and profile the reference once. [`MachineEvaluator`] does it on this machine: compiles
//! run side by side (nvcc is a separate process), while everything that touches the GPU — the
//! worker's verify-and-time and the ncu profile — holds one lock, so two measurements never share
//! the GPU. Tests put a simulated evaluator behind the same trait.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::time::Instant;

use tokio::sync::Mutex;

use crate::eval::client::WorkerClient;
use crate::eval::compile::Compiler;
use crate::eval::protocol::{ProtocolOptions, WorkerRequest};
use crate::eval::{CandidateResult, Status};
use crate::gpu::GpuInfo;
use crate::ncu::SectionSet;
use crate::problem::ProblemBundle;

pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// The Judge's view of one profiled call, or why there is none. Stored as `ncu.json`.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct ProfileRecord {
    pub profiled: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub judge_view: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The full profile (metrics of every launch, diagnosis), when profiled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<serde_json::Value>,
    pub seconds: f64,
}

impl ProfileRecord {
    pub fn unavailable(reason: impl Into<String>) -> ProfileRecord {
        ProfileRecord {
            profiled: false,
            judge_view: None,
            reason: Some(reason.into()),
            detail: None,
            seconds: 0.0,
        }
    }
}

/// One evaluated kernel, with where its time went.
#[derive(Debug, Clone)]
pub struct Evaluated {
    pub result: CandidateResult,
    /// Set for correct kernels when profiling is on.
    pub profile: Option<ProfileRecord>,
    /// Seconds spent waiting for the GPU lock (another node was being measured).
    pub queued_seconds: f64,
}

/// The hardware side of a run.
pub trait Evaluator: Send + Sync {
    /// Compiles, verifies and times `source`; profiles it when correct. Files the evaluation
    /// wants to keep (the ncu report) go to `node_dir`.
    fn evaluate<'a>(
        &'a self,
        source: &'a str,
        node_dir: &'a Path,
    ) -> BoxFuture<'a, Result<Evaluated, String>>;
    /// Profiles the PyTorch reference (the root's view for the Judge).
    fn profile_reference<'a>(&'a self, node_dir: &'a Path) -> BoxFuture<'a, ProfileRecord>;
    /// The GPU candidates run on; `None` when this machine can only compile.
    fn gpu(&self) -> Option<&GpuInfo>;
    /// The nvcc target.
    fn arch(&self) -> String;
}

/// Profiling settings of a run.
#[derive(Debug, Clone)]
pub struct ProfileSettings {
    pub ncu: PathBuf,
    pub sections: SectionSet,
    pub sections_cache: PathBuf,
}

/// This machine: nvcc, the GPU worker and ncu.
pub struct MachineEvaluator {
    pub compiler: Compiler,
    pub bundle: ProblemBundle,
    pub options: ProtocolOptions,
    pub gpu: Option<GpuInfo>,
    /// The worker, behind the GPU lock (`None`: compile-only).
    pub worker: Mutex<Option<WorkerClient>>,
    /// `None`: no profiles (no ncu, or turned off); the reason is in `profile_off`.
    pub profile: Option<ProfileSettings>,
    pub profile_off: String,
}

impl MachineEvaluator {
    async fn profile_library(&self, library: Option<&Path>, node_dir: &Path) -> ProfileRecord {
        let Some(settings) = &self.profile else {
            return ProfileRecord::unavailable(self.profile_off.clone());
        };
        let started = Instant::now();
        match crate::eval::profile::profile(
            &settings.ncu,
            &settings.sections,
            &settings.sections_cache,
            &self.bundle.dir,
            library,
            &node_dir.join("ncu"),
        )
        .await
        {
            Ok(profile) => ProfileRecord {
                profiled: true,
                judge_view: Some(profile.judge_view.clone()),
                reason: None,
                detail: Some(serde_json::json!({
                    "diagnosis": profile.diagnosis,
                    "kernels": profile.kernels,
                    "launches": profile.launches,
                    "metrics": profile.metrics,
                })),
                seconds: started.elapsed().as_secs_f64(),
            },
            Err(reason) => ProfileRecord {
                seconds: started.elapsed().as_secs_f64(),
                ..ProfileRecord::unavailable(reason.to_string())
            },
        }
    }
}

impl Evaluator for MachineEvaluator {
    fn evaluate<'a>(
        &'a self,
        source: &'a str,
        node_dir: &'a Path,
    ) -> BoxFuture<'a, Result<Evaluated, String>> {
        Box::pin(async move {
            let started = Instant::now();
            // Outside the GPU lock: compiles of several nodes run while one is measured.
            let compiled = self
                .compiler
                .compile(source)
                .await
                .map_err(|e| e.to_string())?;
            let waited = Instant::now();
            let mut worker = self.worker.lock().await;
            let queued_seconds = waited.elapsed().as_secs_f64();
            let outcome = match (worker.as_mut(), compiled.ok, compiled.library.clone()) {
                (Some(worker), true, Some(library)) => Some(
                    worker
                        .request(WorkerRequest::Evaluate {
                            id: 0,
                            bundle: self.bundle.dir.clone(),
                            library,
                            options: self.options.clone(),
                        })
                        .await,
                ),
                _ => None,
            };
            let library = compiled.library.clone();
            let result =
                crate::eval::decide(&self.bundle, compiled, outcome, &self.options, started);
            let profile = match (result.status, library) {
                (Status::Correct, Some(library)) => {
                    Some(self.profile_library(Some(&library), node_dir).await)
                }
                _ => None,
            };
            drop(worker);
            Ok(Evaluated {
                result,
                profile,
                queued_seconds,
            })
        })
    }

    fn profile_reference<'a>(&'a self, node_dir: &'a Path) -> BoxFuture<'a, ProfileRecord> {
        Box::pin(async move {
            if self.gpu.is_none() {
                return ProfileRecord::unavailable("compile-only: no GPU on this machine");
            }
            let _gpu = self.worker.lock().await;
            self.profile_library(None, node_dir).await
        })
    }

    fn gpu(&self) -> Option<&GpuInfo> {
        self.gpu.as_ref()
    }

    fn arch(&self) -> String {
        self.compiler.arch.to_string()
    }
}
