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
pub use crate::eval::profile::ProfileRecord;
use crate::eval::protocol::ProtocolOptions;
use crate::eval::{CandidateResult, Status};
use crate::gpu::GpuInfo;
use crate::ncu::SectionSet;
use crate::problem::ProblemBundle;

/// Why nothing is verified, timed or profiled on a machine without a GPU, as records and
/// prompts say it.
pub const COMPILE_ONLY: &str = "compile-only: no GPU on this machine";

pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// One evaluated kernel.
#[derive(Debug, Clone)]
pub struct Evaluated {
    pub result: CandidateResult,
    /// Set for correct kernels when profiling is on.
    pub profile: Option<ProfileRecord>,
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
        let outcome = crate::eval::profile::profile(
            &settings.ncu,
            &settings.sections,
            &settings.sections_cache,
            &self.bundle.dir,
            library,
            &node_dir.join("ncu"),
        )
        .await;
        ProfileRecord::of(outcome, started.elapsed().as_secs_f64())
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
            let library = compiled.library.clone();
            let mut worker = self.worker.lock().await;
            let result = crate::eval::verify_and_time(
                worker.as_mut(),
                &self.bundle,
                compiled,
                &self.options,
                started,
            )
            .await;
            let profile = match (result.status, library) {
                (Status::Correct, Some(library)) => {
                    Some(self.profile_library(Some(&library), node_dir).await)
                }
                _ => None,
            };
            drop(worker);
            Ok(Evaluated { result, profile })
        })
    }

    fn profile_reference<'a>(&'a self, node_dir: &'a Path) -> BoxFuture<'a, ProfileRecord> {
        Box::pin(async move {
            if self.gpu.is_none() {
                return ProfileRecord::unavailable(COMPILE_ONLY);
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
