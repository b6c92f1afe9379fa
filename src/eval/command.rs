//! `kforge eval` and `kforge export`: the user-facing commands over the evaluator. Sets up the
//! compiler for this machine (the GPU's architecture, or `eval.arch` without a GPU) and a
//! worker when a GPU is present; without one, evaluation is compile-only and says so.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;

use super::client::{Limits, WorkerClient, WorkerCommand};
use super::compile::Compiler;
use super::profile::ProfileRecord;
use super::protocol::ProtocolOptions;
use super::{CandidateResult, Status};
use crate::config::Settings;
use crate::nvcc::{Arch, Nvcc};
use crate::problem::ProblemBundle;
use crate::tools::{self, Tool};

/// The compiler for this machine: nvcc located by the usual rules, the first GPU's
/// architecture (or `eval.arch` when there is none, or `arch_override`).
pub async fn machine_compiler(
    settings: &Settings,
    gpu: Option<&crate::gpu::GpuInfo>,
    arch_override: Option<&str>,
) -> anyhow::Result<Compiler> {
    let located = tools::locate(Tool::Nvcc, settings)
        .context("nvcc is needed to compile candidates (run scripts/setup.sh or set tools.nvcc)")?;
    let nvcc = Nvcc::new(&located.path);
    let version = nvcc.version().await.map_err(|e| {
        anyhow::anyhow!(
            "nvcc at {} is unusable: {e}",
            crate::paths::display(&located.path)
        )
    })?;
    let arch = match (arch_override, gpu) {
        (Some(a), _) => Arch::parse(a)?,
        (None, Some(g)) => {
            Arch::from_compute_capability(g.compute_capability.0, g.compute_capability.1)
        }
        (None, None) => Arch::parse(&settings.eval.arch)?,
    };
    Ok(Compiler {
        nvcc,
        nvcc_version: version.full,
        arch,
        cache_dir: settings.home.join("compile-cache"),
        timeout: Duration::from_secs(120),
        extra_flags: Vec::new(),
    })
}

/// A worker for this machine, or None without a usable GPU (compile-only).
pub fn machine_worker(
    gpu: Option<&crate::gpu::GpuInfo>,
    limits: Limits,
) -> anyhow::Result<Option<WorkerClient>> {
    if gpu.is_none() {
        return Ok(None);
    }
    Ok(Some(WorkerClient::new(
        WorkerCommand::this_binary()?,
        limits,
    )))
}

pub struct EvalRequest<'a> {
    pub bundle: &'a str,
    pub candidate: &'a Path,
    pub options: ProtocolOptions,
    pub arch: Option<&'a str>,
    /// Limit for one run stage without progress.
    pub stage_timeout: Duration,
    pub json: bool,
    /// Where to also write the result document.
    pub output: Option<PathBuf>,
    /// Profile a correct candidate with these ncu sections (`default`, `fast`, a folder).
    pub profile_sections: Option<String>,
}

pub async fn eval(settings: &Settings, request: EvalRequest<'_>) -> anyhow::Result<ExitCode> {
    let bundle = ProblemBundle::resolve(request.bundle, settings)?;
    let source = super::read_candidate(request.candidate)?;
    let gpus = crate::gpu::list().unwrap_or_default();
    let gpu = gpus.first();
    let compiler = machine_compiler(settings, gpu, request.arch).await?;
    let limits = Limits {
        run: request.stage_timeout,
        ..Limits::default()
    };
    let mut worker = machine_worker(gpu, limits)?;
    if worker.is_none() {
        tracing::warn!("no GPU here: compile-only (the candidate is built, not verified or timed)");
    }
    let mut result = super::evaluate(
        &compiler,
        worker.as_mut(),
        &bundle,
        &source,
        &request.options,
    )
    .await?;
    if let (Some(sections), Status::Correct, Some(library)) = (
        &request.profile_sections,
        result.status,
        result.compile.library.clone(),
    ) {
        result.ncu = Some(
            profile_into_result(settings, &bundle, &library, sections, request.candidate).await,
        );
    }
    print_result(&result, request.json)?;
    if let Some(path) = &request.output {
        std::fs::write(path, serde_json::to_string_pretty(&result)?)
            .with_context(|| format!("cannot write {}", crate::paths::display(path)))?;
    }
    Ok(match result.status {
        Status::Correct | Status::Compiled => ExitCode::SUCCESS,
        _ => ExitCode::from(1),
    })
}

/// The `ncu` part of a result document: the Judge's view and diagnosis, or why there is none
/// (the verdict stands either way).
async fn profile_into_result(
    settings: &Settings,
    bundle: &ProblemBundle,
    library: &Path,
    sections: &str,
    candidate: &Path,
) -> serde_json::Value {
    let started = std::time::Instant::now();
    let record = match tools::locate(Tool::Ncu, settings) {
        Err(e) => ProfileRecord::unavailable(e.to_string()),
        Ok(ncu) => {
            let outcome = super::profile::profile(
                &ncu.path,
                &crate::ncu::SectionSet::from_arg(sections),
                &settings.home.join("ncu-sections"),
                &bundle.dir,
                Some(library),
                &report_stem(bundle, Some(candidate)),
            )
            .await;
            ProfileRecord::of(outcome, started.elapsed().as_secs_f64())
        }
    };
    serde_json::to_value(record.summary()).unwrap_or_default()
}

/// `<bundle>-<candidate stem | reference>` in the working directory.
fn report_stem(bundle: &ProblemBundle, candidate: Option<&Path>) -> PathBuf {
    let what = candidate
        .and_then(|p| p.file_stem())
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "reference".into());
    let stem = PathBuf::from(format!("{}-{what}", bundle.spec.name.replace('/', "_")));
    std::path::absolute(&stem).unwrap_or(stem)
}

fn print_result(result: &CandidateResult, json: bool) -> anyhow::Result<()> {
    if json {
        println!("{}", serde_json::to_string_pretty(result)?);
    } else {
        print!("{}", super::render(result));
    }
    Ok(())
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExportKind {
    KernelBench,
    TorchOp,
}

pub fn export(
    settings: &Settings,
    bundle: &str,
    candidate: &Path,
    kind: ExportKind,
    out: &Path,
) -> anyhow::Result<ExitCode> {
    let bundle = ProblemBundle::resolve(bundle, settings)?;
    let source = super::read_candidate(candidate)?;
    let text = match kind {
        ExportKind::KernelBench => super::export::kernelbench_model_new(&bundle.spec, &source)?,
        ExportKind::TorchOp => super::export::torch_library_op(&bundle.spec, &source)?,
    };
    std::fs::write(out, text)
        .with_context(|| format!("cannot write {}", crate::paths::display(out)))?;
    eprintln!("wrote {}", crate::paths::display(out));
    Ok(ExitCode::SUCCESS)
}

pub struct ProfileCliRequest<'a> {
    pub bundle: &'a str,
    /// None profiles the PyTorch reference.
    pub candidate: Option<&'a Path>,
    pub sections: &'a str,
    pub json: bool,
    /// The report's path without `.ncu-rep`; default `<bundle>-<candidate|reference>` here.
    pub report_stem: Option<PathBuf>,
}

/// `kforge profile`: one profiled call of a candidate or of the reference, shown as the Judge
/// sees it. Exit 1 (with the reason) when no profile can be had here.
pub async fn profile(
    settings: &Settings,
    request: ProfileCliRequest<'_>,
) -> anyhow::Result<ExitCode> {
    let bundle = ProblemBundle::resolve(request.bundle, settings)?;
    let sections = crate::ncu::SectionSet::from_arg(request.sections);
    let gpus = crate::gpu::list().unwrap_or_default();
    let unavailable = |reason: String| -> anyhow::Result<ExitCode> {
        if request.json {
            println!(
                "{}",
                serde_json::json!({ "profiled": false, "reason": reason })
            );
        } else {
            println!("not profiled: {reason}");
        }
        Ok(ExitCode::from(1))
    };
    let Some(gpu) = gpus.first() else {
        return unavailable("no GPU on this machine".into());
    };
    let ncu = match tools::locate(Tool::Ncu, settings) {
        Ok(l) => l.path,
        Err(e) => return unavailable(e.to_string()),
    };
    let library = match request.candidate {
        Some(path) => {
            let source = super::read_candidate(path)?;
            let compiler = machine_compiler(settings, Some(gpu), None).await?;
            let compiled = compiler.compile(&source).await?;
            match compiled.library {
                Some(l) if compiled.ok => Some(l),
                _ => {
                    eprintln!("{}", compiled.error_excerpt(20));
                    anyhow::bail!(
                        "the candidate does not compile; `kforge eval` shows the whole log"
                    );
                }
            }
        }
        None => None,
    };
    let stem = match request.report_stem {
        Some(stem) => std::path::absolute(&stem).unwrap_or(stem),
        None => report_stem(&bundle, request.candidate),
    };
    let result = super::profile::profile(
        &ncu,
        &sections,
        &settings.home.join("ncu-sections"),
        &bundle.dir,
        library.as_deref(),
        &stem,
    )
    .await;
    match result {
        Ok(profile) => {
            if request.json {
                println!("{}", serde_json::to_string_pretty(&profile)?);
            } else {
                print!("{}", profile.judge_view);
                println!(
                    "\nreport: {} ({} launch{}, {:.1} s)",
                    crate::paths::display(&profile.report),
                    profile.launches,
                    if profile.launches == 1 { "" } else { "es" },
                    profile.seconds
                );
            }
            Ok(ExitCode::SUCCESS)
        }
        Err(reason) => unavailable(reason.to_string()),
    }
}
