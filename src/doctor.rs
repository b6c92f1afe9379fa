//! `kforge doctor`: checks everything kforge needs, each as ok / missing / unusable with the
//! reason and the fix, and says what the machine can do (compile, run, profile, import, agents).
//!
//! Every probe does the real thing where it can: nvcc compiles a tiny kernel into a shared
//! library with the evaluator's own command line, ncu profiles a tiny program and reads a
//! hardware counter, python3 imports torch. Probes never panic: a missing GPU, tool or library is
//! an ordinary answer.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::config::Settings;
use crate::gpu::{self, GpuError, GpuInfo};
use crate::nvcc::{self, Arch, Nvcc};
use crate::paths;
use crate::proc;
use crate::tools::{self, Tool};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    Ok,
    Missing,
    Unusable,
}

impl Status {
    fn label(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Missing => "missing",
            Status::Unusable => "unusable",
        }
    }
}

/// What a machine can be used for; each probe serves some of these.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum Capability {
    /// Compile candidates (nvcc and libtorch; no GPU needed).
    Compile,
    /// Verify and time candidates on a GPU.
    Run,
    /// Profile with Nsight Compute.
    Profile,
    /// Import KernelBench-format problems (python3 with torch).
    Import,
    /// Drive the Coder and Judge (LLM credentials).
    Agents,
}

impl Capability {
    const ALL: [Capability; 5] = [
        Capability::Compile,
        Capability::Run,
        Capability::Profile,
        Capability::Import,
        Capability::Agents,
    ];

    fn describe(self) -> &'static str {
        match self {
            Capability::Compile => "compile kernels",
            Capability::Run => "run and time kernels",
            Capability::Profile => "profile kernels",
            Capability::Import => "import problems",
            Capability::Agents => "drive LLM agents",
        }
    }

    /// Probes whose `ok` this capability needs.
    fn needs(self) -> &'static [&'static str] {
        match self {
            Capability::Compile => &["nvcc", "libtorch"],
            Capability::Run => &["gpu", "nvcc", "libtorch"],
            Capability::Profile => &["gpu", "nvcc", "libtorch", "ncu"],
            Capability::Import => &["python"],
            Capability::Agents => &["llm"],
        }
    }
}

/// One probe's answer.
#[derive(Debug, Clone, Serialize)]
pub struct Probe {
    pub name: &'static str,
    pub status: Status,
    /// One line: what was found (versions, paths, sizes).
    pub summary: String,
    /// Why it is missing or unusable.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// What to do about it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fix: Option<String>,
    /// Machine-readable facts (versions, paths, GPU properties).
    pub facts: serde_json::Value,
}

impl Probe {
    fn ok(name: &'static str, summary: impl Into<String>, facts: serde_json::Value) -> Self {
        Probe {
            name,
            status: Status::Ok,
            summary: summary.into(),
            reason: None,
            fix: None,
            facts,
        }
    }

    fn failed(
        name: &'static str,
        status: Status,
        summary: impl Into<String>,
        reason: impl Into<String>,
        fix: impl Into<String>,
    ) -> Self {
        Probe {
            name,
            status,
            summary: summary.into(),
            reason: Some(reason.into()),
            fix: Some(fix.into()),
            facts: serde_json::Value::Null,
        }
    }

    fn with_facts(mut self, facts: serde_json::Value) -> Self {
        self.facts = facts;
        self
    }
}

/// The whole report.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub probes: Vec<Probe>,
    /// Capability → whether this machine has it.
    pub capabilities: Vec<(Capability, bool)>,
    /// Whether every capability asked for (`--need`) is present.
    pub ready: bool,
    pub needed: Vec<Capability>,
}

impl Report {
    pub fn has(&self, capability: Capability) -> bool {
        let needs = capability.needs();
        self.probes
            .iter()
            .filter(|p| needs.contains(&p.name))
            .all(|p| p.status == Status::Ok)
    }

    fn probe(&self, name: &str) -> Option<&Probe> {
        self.probes.iter().find(|p| p.name == name)
    }

    /// The readable form: one line per probe, reasons and fixes indented under it, then what the
    /// machine can do and what is missing for what.
    pub fn render(&self) -> String {
        let mut out = String::new();
        for probe in &self.probes {
            out.push_str(&format!(
                "{:<9} {:<9} {}\n",
                display_name(probe.name),
                probe.status.label(),
                probe.summary
            ));
            if let Some(reason) = &probe.reason {
                out.push_str(&format!("{:20}why: {reason}\n", ""));
            }
            if let Some(fix) = &probe.fix {
                out.push_str(&format!("{:20}fix: {fix}\n", ""));
            }
        }
        out.push('\n');
        for (capability, has) in &self.capabilities {
            let mark = if *has { "yes" } else { "no " };
            let mut line = format!("{mark}  {}", capability.describe());
            if !*has {
                let missing: Vec<&str> = capability
                    .needs()
                    .iter()
                    .filter(|n| self.probe(n).is_none_or(|p| p.status != Status::Ok))
                    .map(|n| display_name(n))
                    .collect();
                line.push_str(&format!(" (needs {})", missing.join(", ")));
            }
            out.push_str(&line);
            out.push('\n');
        }
        let asked: Vec<&str> = self.needed.iter().map(|c| c.describe()).collect();
        if self.ready {
            out.push_str(&format!("\nready to {}.\n", asked.join(", ")));
        } else {
            out.push_str(&format!(
                "\nnot ready to {}: fix what is listed above.\n",
                asked.join(", ")
            ));
        }
        out
    }
}

fn display_name(name: &str) -> &str {
    match name {
        "gpu" => "GPU",
        "python" => "python3",
        "llm" => "LLM",
        other => other,
    }
}

/// Runs every probe. `needed` is what the exit status is judged on.
pub async fn run(settings: &Settings, needed: Vec<Capability>) -> Report {
    let gpus = tokio::task::spawn_blocking(gpu::list)
        .await
        .unwrap_or(Err(GpuError::NoDriver));
    let gpu_probe = probe_gpu(&gpus);
    let gpu = gpus.as_ref().ok().and_then(|g| g.first()).cloned();
    let arch = match &gpu {
        Some(g) => Arch::from_compute_capability(g.compute_capability.0, g.compute_capability.1),
        None => {
            Arch::parse(&settings.eval.arch).unwrap_or_else(|_| Arch::from_compute_capability(9, 0))
        }
    };
    let libtorch_probe = tokio::task::spawn_blocking({
        let has_gpu = gpu.is_some();
        move || probe_libtorch(has_gpu)
    });
    let scratch = tempfile::tempdir().ok();
    let scratch_dir = scratch.as_ref().map(|d| d.path().to_path_buf());
    let compile_and_profile = async {
        let nvcc = tools::locate(Tool::Nvcc, settings);
        let (nvcc_probe, built) =
            probe_nvcc(nvcc, &arch, gpu.is_some(), scratch_dir.as_deref()).await;
        let ncu = tools::locate(Tool::Ncu, settings);
        let ncu_probe = probe_ncu(ncu, built.as_deref(), gpu.is_some()).await;
        (nvcc_probe, ncu_probe)
    };
    let python = probe_python(tools::locate(Tool::Python, settings));
    let ((nvcc_probe, ncu_probe), python_probe) = tokio::join!(compile_and_profile, python);
    let libtorch_probe = libtorch_probe.await.unwrap_or_else(|e| {
        Probe::failed(
            "libtorch",
            Status::Unusable,
            "libtorch probe crashed",
            e.to_string(),
            "run with -vv and report the output",
        )
    });
    let python_probe = compare_torch_versions(python_probe, &libtorch_probe);
    let probes = vec![
        gpu_probe,
        nvcc_probe,
        ncu_probe,
        libtorch_probe,
        python_probe,
        probe_llm(settings),
    ];
    let mut report = Report {
        probes,
        capabilities: Vec::new(),
        ready: false,
        needed: needed.clone(),
    };
    report.capabilities = Capability::ALL
        .iter()
        .map(|c| (*c, report.has(*c)))
        .collect();
    report.ready = needed.iter().all(|c| report.has(*c));
    report
}

fn probe_gpu(gpus: &Result<Vec<GpuInfo>, GpuError>) -> Probe {
    match gpus {
        Ok(gpus) => {
            let driver = gpu::driver_info().ok();
            let first = &gpus[0];
            let mut summary = format!(
                "{}, {}, {} SMs, {}, L2 {}",
                first.name,
                first.arch(),
                first.sm_count,
                gpu::human_bytes(first.memory_bytes),
                gpu::human_bytes(first.l2_bytes)
            );
            if let Some(d) = &driver {
                match &d.driver_version {
                    Some(v) => summary.push_str(&format!(", driver {v} (CUDA {})", d.cuda_version)),
                    None => summary.push_str(&format!(", driver for CUDA {}", d.cuda_version)),
                }
            }
            if gpus.len() > 1 {
                summary.push_str(&format!(" (+{} more)", gpus.len() - 1));
            }
            Probe::ok(
                "gpu",
                summary,
                serde_json::json!({ "gpus": gpus, "driver": driver }),
            )
        }
        Err(GpuError::NoDriver) => Probe::failed(
            "gpu",
            Status::Missing,
            "no GPU",
            "no CUDA driver library (libcuda.so.1) on this machine",
            "kernels can still be compiled here; run and time them on a machine with an NVIDIA \
             GPU and its driver",
        ),
        Err(GpuError::NoDevice) => Probe::failed(
            "gpu",
            Status::Missing,
            "no GPU",
            "the CUDA driver is installed but sees no GPU",
            "check CUDA_VISIBLE_DEVICES and `nvidia-smi`",
        ),
        Err(e @ GpuError::Driver { .. }) => Probe::failed(
            "gpu",
            Status::Unusable,
            "CUDA driver error",
            e.to_string(),
            "check `nvidia-smi`; a driver/library version mismatch needs a reboot or a driver \
             reinstall",
        ),
    }
}

const PROBE_KERNEL: &str = r#"// kforge doctor: smallest real kernel, built as the evaluator builds candidates.
#include <cuda_runtime.h>
#include <cuda_fp16.h>
__global__ void kforge_probe_add(float *x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] += 1.0f;
}
extern "C" int kforge_probe_launch(float *x, int n, cudaStream_t stream) {
  kforge_probe_add<<<(n + 255) / 256, 256, 0, stream>>>(x, n);
  return (int)cudaGetLastError();
}
"#;

const PROBE_PROGRAM: &str = r#"// kforge doctor: a program for ncu to profile.
#include <cstdio>
#include <cuda_runtime.h>
__global__ void kforge_probe_add(float *x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] += 1.0f;
}
int main() {
  const int n = 1 << 20;
  float *x = nullptr;
  cudaError_t err = cudaMalloc(&x, n * sizeof(float));
  if (err != cudaSuccess) { printf("cudaMalloc: %s\n", cudaGetErrorString(err)); return 1; }
  kforge_probe_add<<<(n + 255) / 256, 256>>>(x, n);
  err = cudaDeviceSynchronize();
  if (err != cudaSuccess) { printf("kernel: %s\n", cudaGetErrorString(err)); return 1; }
  cudaFree(x);
  return 0;
}
"#;

/// Why an nvcc build failed, in words, from its log.
fn explain_nvcc_failure(log: &str, arch: &Arch) -> (String, String) {
    let errors = nvcc::error_lines(log);
    let reason = if errors.is_empty() {
        nvcc::first_lines(log, 3)
    } else {
        errors
            .iter()
            .take(3)
            .cloned()
            .collect::<Vec<_>>()
            .join(" | ")
    };
    let fix = if log.contains("Unsupported gpu architecture") {
        format!(
            "this nvcc cannot build for {arch}; use CUDA 12 or newer (scripts/setup.sh installs 13.0) or set tools.nvcc"
        )
    } else if log.contains("No such file or directory") && log.contains(".h") {
        "the CUDA headers are incomplete; reinstall the toolkit or run scripts/setup.sh".into()
    } else if log.contains("cannot find -l") {
        "the CUDA runtime libraries are not beside nvcc; reinstall the toolkit or run scripts/setup.sh".into()
    } else if log.contains("failed to find a host compiler") || log.contains("gcc: not found") {
        "nvcc needs a host C++ compiler: install g++".into()
    } else {
        "see the log above; set tools.nvcc to another nvcc to try it".into()
    };
    (reason, fix)
}

/// Finds nvcc, reads its version and builds the probe kernel as a shared library (and, when a
/// GPU is present, the profiling probe program). Returns the probe and the built program.
async fn probe_nvcc(
    located: Result<tools::Located, tools::NotFound>,
    arch: &Arch,
    has_gpu: bool,
    scratch: Option<&Path>,
) -> (Probe, Option<PathBuf>) {
    let located = match located {
        Ok(l) => l,
        Err(e) => {
            return (
                Probe::failed(
                    "nvcc",
                    Status::Missing,
                    "not found",
                    e.to_string(),
                    "run scripts/setup.sh (installs nvcc 13.0 from PyPI), install the CUDA \
                     toolkit, or set tools.nvcc / KFORGE_NVCC",
                ),
                None,
            );
        }
    };
    let where_ = format!("{} ({})", paths::display(&located.path), located.found_by);
    let compiler = Nvcc::new(&located.path);
    let version = match compiler.version().await {
        Ok(v) => v,
        Err(e) => {
            return (
                Probe::failed(
                    "nvcc",
                    Status::Unusable,
                    format!("at {where_}"),
                    e,
                    "reinstall the CUDA toolkit or point tools.nvcc at a working nvcc",
                ),
                None,
            );
        }
    };
    let Some(dir) = scratch else {
        return (
            Probe::failed(
                "nvcc",
                Status::Unusable,
                format!("{} at {where_}", version.full),
                "no temporary folder to test-compile in",
                "check that TMPDIR is writable",
            ),
            None,
        );
    };
    let source = dir.join("probe.cu");
    let library = dir.join("probe.so");
    if let Err(e) = std::fs::write(&source, PROBE_KERNEL) {
        return (
            Probe::failed(
                "nvcc",
                Status::Unusable,
                where_,
                e.to_string(),
                "check that TMPDIR is writable",
            ),
            None,
        );
    }
    let started = Instant::now();
    let build = compiler
        .shared_library(&source, &library, arch, &[], &[])
        .timeout(Duration::from_secs(120))
        .run()
        .await;
    let elapsed = started.elapsed();
    let facts = serde_json::json!({
        "path": paths::display(&located.path),
        "found_by": located.found_by,
        "version": version.full,
        "arch": arch.as_str(),
    });
    let build_failed = |reason: String, fix: String| {
        Probe::failed(
            "nvcc",
            Status::Unusable,
            format!("{} at {where_}", version.full),
            reason,
            fix,
        )
        .with_facts(facts.clone())
    };
    match build {
        Err(e) => {
            return (
                build_failed(e.to_string(), "check the nvcc installation".into()),
                None,
            );
        }
        Ok(out) if out.exit == proc::Exit::TimedOut => {
            return (
                build_failed(
                    "the test compile took over 120 s".into(),
                    "check that the machine is not overloaded and nvcc is local".into(),
                ),
                None,
            );
        }
        Ok(out) if !out.success() || !library.exists() => {
            let (reason, fix) = explain_nvcc_failure(&out.combined(), arch);
            return (build_failed(reason, fix), None);
        }
        Ok(_) => {}
    }
    let summary = format!(
        "{} at {where_}; builds {arch} shared libraries ({:.1} s)",
        version.full,
        elapsed.as_secs_f64()
    );
    let program = if has_gpu {
        let program_source = dir.join("probe_main.cu");
        let program = dir.join("probe_main");
        let built = std::fs::write(&program_source, PROBE_PROGRAM).is_ok()
            && compiler
                .executable(&program_source, &program, arch)
                .timeout(Duration::from_secs(120))
                .run()
                .await
                .is_ok_and(|o| o.success());
        built.then_some(program)
    } else {
        None
    };
    (Probe::ok("nvcc", summary, facts), program)
}

/// "Version 2025.3.1.0 (build 36398880) (public-release)" → "2025.3.1.0".
fn parse_ncu_version(text: &str) -> Option<String> {
    text.lines()
        .find_map(|l| l.trim().strip_prefix("Version "))
        .and_then(|rest| rest.split_whitespace().next())
        .map(str::to_string)
}

/// Classifies what ncu printed while profiling the probe program.
fn classify_ncu_profile(output: &proc::Output) -> Result<(), (String, String)> {
    let text = output.combined();
    if text.contains("ERR_NVGPUCTRPERM") {
        return Err((
            "ncu is not permitted to read GPU performance counters (ERR_NVGPUCTRPERM)".into(),
            "run as root, or allow all users: `echo 'options nvidia NVreg_RestrictProfilingToAdminUsers=0' \
             | sudo tee /etc/modprobe.d/nvidia-profiling.conf` then reload the driver or reboot \
             (https://developer.nvidia.com/ERR_NVGPUCTRPERM); kforge carries on with timing and \
             ptxas feedback meanwhile"
                .into(),
        ));
    }
    if output.exit == proc::Exit::TimedOut {
        return Err((
            "profiling the probe program timed out".into(),
            "check that no other profiler holds the GPU".into(),
        ));
    }
    if text.contains("gpu__time_duration") && text.lines().any(|l| l.contains("kforge_probe_add")) {
        return Ok(());
    }
    let errors: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("==ERROR==") || l.contains("==WARNING=="))
        .collect();
    let reason = if errors.is_empty() {
        format!(
            "ncu produced no metrics ({}): {}",
            output.exit,
            nvcc::first_lines(&text, 3)
        )
    } else {
        errors.join(" | ")
    };
    Err((
        reason,
        "ncu could not profile a kernel here; kforge carries on with timing and ptxas feedback"
            .into(),
    ))
}

async fn probe_ncu(
    located: Result<tools::Located, tools::NotFound>,
    program: Option<&Path>,
    has_gpu: bool,
) -> Probe {
    let located = match located {
        Ok(l) => l,
        Err(e) => {
            return Probe::failed(
                "ncu",
                Status::Missing,
                "not found",
                e.to_string(),
                "install Nsight Compute (it ships with the CUDA toolkit) or set tools.ncu / \
                 KFORGE_NCU; without it kforge uses timing and ptxas feedback only",
            );
        }
    };
    let where_ = format!("{} ({})", paths::display(&located.path), located.found_by);
    let version_out = proc::Command::new(&located.path)
        .arg("--version")
        .timeout(Duration::from_secs(30))
        .run()
        .await;
    let version = match version_out {
        Ok(out) if out.success() => parse_ncu_version(&out.stdout),
        Ok(out) => {
            return Probe::failed(
                "ncu",
                Status::Unusable,
                format!("at {where_}"),
                format!(
                    "`ncu --version` failed ({}): {}",
                    out.exit,
                    nvcc::first_lines(&out.combined(), 3)
                ),
                "reinstall Nsight Compute or set tools.ncu",
            );
        }
        Err(e) => {
            return Probe::failed(
                "ncu",
                Status::Unusable,
                format!("at {where_}"),
                e.to_string(),
                "reinstall Nsight Compute or set tools.ncu",
            );
        }
    };
    let version = version.unwrap_or_else(|| "unknown version".into());
    let facts = serde_json::json!({
        "path": paths::display(&located.path),
        "found_by": located.found_by,
        "version": version,
    });
    let Some(program) = program else {
        let reason = if has_gpu {
            "the probe program could not be built, so counters were not checked"
        } else {
            "no GPU, so counters cannot be read here"
        };
        return Probe::failed(
            "ncu",
            Status::Unusable,
            format!("{version} at {where_}"),
            reason,
            "profile on a machine with a GPU (kforge doctor there checks the counters)",
        )
        .with_facts(facts);
    };
    let started = Instant::now();
    let profile = proc::Command::new(&located.path)
        .args([
            "--clock-control",
            "none",
            "--metrics",
            "gpu__time_duration.sum",
            "--csv",
            "--page",
            "raw",
        ])
        .arg(program)
        .timeout(Duration::from_secs(120))
        .run()
        .await;
    let profile = match profile {
        Ok(p) => p,
        Err(e) => {
            return Probe::failed(
                "ncu",
                Status::Unusable,
                format!("{version} at {where_}"),
                e.to_string(),
                "reinstall Nsight Compute",
            )
            .with_facts(facts);
        }
    };
    match classify_ncu_profile(&profile) {
        Ok(()) => Probe::ok(
            "ncu",
            format!(
                "{version} at {where_}; reads hardware counters ({:.1} s)",
                started.elapsed().as_secs_f64()
            ),
            facts,
        ),
        Err((reason, fix)) => Probe::failed(
            "ncu",
            Status::Unusable,
            format!("{version} at {where_}"),
            reason,
            fix,
        )
        .with_facts(facts),
    }
}

/// libtorch as linked into this binary, through tch.
fn probe_libtorch(has_gpu: bool) -> Probe {
    let version = env!("KFORGE_LIBTORCH_VERSION");
    let cuda = tch::Cuda::is_available();
    let cudnn = tch::Cuda::cudnn_is_available();
    let devices = tch::Cuda::device_count();
    let facts = serde_json::json!({
        "version": version,
        "cuda_available": cuda,
        "cudnn_available": cudnn,
        "cuda_devices": devices,
    });
    let summary = format!(
        "{version} via tch; CUDA {}{}",
        if cuda {
            format!(
                "available ({devices} device{})",
                if devices == 1 { "" } else { "s" }
            )
        } else {
            "not available".into()
        },
        if cudnn { ", cuDNN available" } else { "" }
    );
    if has_gpu && !cuda {
        return Probe::failed(
            "libtorch",
            Status::Unusable,
            summary,
            "a GPU is present but libtorch sees no CUDA: libtorch_cuda or its CUDA libraries did not load",
            "put torch's lib/ folder on LD_LIBRARY_PATH (python3 -c \"import torch, os; \
             print(os.path.dirname(torch.__file__))\"), keeping the existing entries",
        )
        .with_facts(facts);
    }
    Probe::ok("libtorch", summary, facts)
}

const PYTHON_PROBE: &str = r#"
import json, sys
info = {"python": sys.version.split()[0]}
try:
    import torch
    info["torch"] = torch.__version__
    info["torch_cuda"] = torch.version.cuda
    info["cuda_available"] = torch.cuda.is_available()
except Exception as e:
    info["error"] = f"{type(e).__name__}: {e}"
print("KFORGE_PROBE " + json.dumps(info))
"#;

async fn probe_python(located: Result<tools::Located, tools::NotFound>) -> Probe {
    let located = match located {
        Ok(l) => l,
        Err(e) => {
            return Probe::failed(
                "python",
                Status::Missing,
                "not found",
                e.to_string(),
                "run scripts/setup.sh (creates a Python environment with torch) or set tools.python",
            );
        }
    };
    let where_ = format!("{} ({})", paths::display(&located.path), located.found_by);
    let out = proc::Command::new(&located.path)
        .args(["-c", PYTHON_PROBE])
        .timeout(Duration::from_secs(120))
        .run()
        .await;
    let out = match out {
        Ok(o) => o,
        Err(e) => {
            return Probe::failed(
                "python",
                Status::Unusable,
                format!("at {where_}"),
                e.to_string(),
                "set tools.python to a working python3",
            );
        }
    };
    let info: Option<serde_json::Value> = out
        .stdout
        .lines()
        .find_map(|l| l.strip_prefix("KFORGE_PROBE "))
        .and_then(|j| serde_json::from_str(j).ok());
    let Some(info) = info else {
        return Probe::failed(
            "python",
            Status::Unusable,
            format!("at {where_}"),
            format!(
                "python3 failed ({}): {}",
                out.exit,
                last_line(&out.combined())
            ),
            "set tools.python to a working python3 (3.10 or newer)",
        );
    };
    let python_version = info["python"].as_str().unwrap_or("?").to_string();
    if let Some(error) = info["error"].as_str() {
        return Probe::failed(
            "python",
            Status::Unusable,
            format!("{python_version} at {where_}"),
            format!("cannot import torch: {error}"),
            "run scripts/setup.sh (installs torch 2.11.0 in kforge's own environment) or set \
             tools.python to a python3 that has torch",
        )
        .with_facts(info);
    }
    let torch = info["torch"].as_str().unwrap_or("?");
    let cuda = if info["cuda_available"].as_bool() == Some(true) {
        "CUDA available"
    } else {
        "no CUDA"
    };
    Probe::ok(
        "python",
        format!("{python_version} with torch {torch} ({cuda}) at {where_}"),
        info,
    )
}

/// Python's torch must match libtorch's version: bundles are TorchScript saved by one and run
/// by the other.
fn compare_torch_versions(python: Probe, libtorch: &Probe) -> Probe {
    if python.status != Status::Ok {
        return python;
    }
    let base = |v: &str| v.split('+').next().unwrap_or(v).to_string();
    let py = python.facts["torch"].as_str().map(base);
    let lt = libtorch.facts["version"].as_str().map(base);
    match (py, lt) {
        (Some(py), Some(lt)) if py != lt => Probe {
            status: Status::Unusable,
            reason: Some(format!(
                "python's torch is {py} but kforge is built against libtorch {lt}; bundles it \
                 exports may not load"
            )),
            fix: Some(
                "use scripts/setup.sh's environment (torch 2.11.0) or set tools.python to a \
                 python3 with torch 2.11.0"
                    .into(),
            ),
            ..python
        },
        _ => Probe {
            summary: format!("{}; matches libtorch", python.summary),
            ..python
        },
    }
}

fn probe_llm(settings: &Settings) -> Probe {
    let llm = &settings.llm;
    let mut providers = Vec::new();
    let mut facts = serde_json::Map::new();
    for (name, provider, default_url) in [
        ("openai", &llm.openai, Some("https://api.openai.com/v1")),
        (
            "anthropic",
            &llm.anthropic,
            Some("https://api.anthropic.com"),
        ),
        ("openai-compat", &llm.openai_compat, None),
    ] {
        let has_key = provider.api_key.is_some();
        let base_url = provider
            .base_url
            .clone()
            .or(default_url.map(str::to_string));
        // A compatible server (vLLM, Ollama) may need no key: a base URL is a credential enough.
        let usable = has_key || (name == "openai-compat" && provider.base_url.is_some());
        facts.insert(
            name.into(),
            serde_json::json!({ "credentials": has_key, "base_url": base_url, "usable": usable }),
        );
        if usable {
            providers.push(match &base_url {
                Some(url) if provider.base_url.is_some() => format!("{name} ({url})"),
                _ => name.to_string(),
            });
        }
    }
    facts.insert("coder".into(), serde_json::json!(llm.coder));
    facts.insert("judge".into(), serde_json::json!(llm.judge));
    let facts = serde_json::Value::Object(facts);
    if providers.is_empty() {
        return Probe::failed(
            "llm",
            Status::Missing,
            "no provider has credentials",
            "none of OPENAI_API_KEY, ANTHROPIC_API_KEY or llm.openai_compat.base_url is set",
            "export OPENAI_API_KEY or ANTHROPIC_API_KEY, or point llm.openai_compat.base_url at a \
             local server (vLLM, SGLang, Ollama); `kforge llm test` checks the endpoint",
        )
        .with_facts(facts);
    }
    // A model name that does not parse would fail only when a run starts: say so here.
    let bad_models: Vec<String> = [("llm.coder", &llm.coder), ("llm.judge", &llm.judge)]
        .into_iter()
        .filter_map(|(key, model)| {
            let model = model.as_ref()?;
            crate::llm::ModelSpec::parse(model)
                .err()
                .map(|e| format!("{key} = {model:?}: {e}"))
        })
        .collect();
    if !bad_models.is_empty() {
        return Probe::failed(
            "llm",
            Status::Unusable,
            format!("credentials for {}", providers.join(", ")),
            bad_models.join("; "),
            "write models as provider:model, e.g. openai:o3, anthropic:claude-sonnet-4-5 or \
             openai-compat:http://host:8000/v1#qwen3-coder",
        )
        .with_facts(facts);
    }
    let models = match (&llm.coder, &llm.judge) {
        (Some(c), Some(j)) => format!("; coder {c}, judge {j}"),
        _ => String::new(),
    };
    Probe::ok(
        "llm",
        format!("credentials for {}{models}", providers.join(", ")),
        facts,
    )
}

fn last_line(text: &str) -> String {
    text.lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("")
        .trim()
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    /// A fake tool: a shell script that prints `text` and exits with `code`.
    fn fake_tool(dir: &Path, name: &str, script: &str) -> tools::Located {
        let path = dir.join(name);
        std::fs::write(&path, format!("#!/bin/sh\n{script}\n")).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        tools::Located {
            path,
            found_by: "test".into(),
        }
    }

    const NVCC_VERSION: &str = "echo 'nvcc: NVIDIA (R) Cuda compiler driver'; echo 'Cuda compilation tools, release 13.0, V13.0.88'";

    #[tokio::test]
    async fn nvcc_unsupported_arch_is_unusable_with_the_real_text() {
        let dir = tempfile::tempdir().unwrap();
        let nvcc = fake_tool(
            dir.path(),
            "nvcc",
            &format!(
                "case \"$1\" in --version) {NVCC_VERSION};; *) echo \"nvcc fatal   : Unsupported gpu architecture 'compute_90'\" >&2; exit 1;; esac"
            ),
        );
        let scratch = tempfile::tempdir().unwrap();
        let arch = Arch::parse("sm_90").unwrap();
        let (probe, _) = probe_nvcc(Ok(nvcc), &arch, false, Some(scratch.path())).await;
        assert_eq!(probe.status, Status::Unusable);
        assert!(
            probe
                .reason
                .as_deref()
                .unwrap()
                .contains("Unsupported gpu architecture")
        );
        assert!(
            probe
                .fix
                .as_deref()
                .unwrap()
                .contains("cannot build for sm_90")
        );
    }

    #[tokio::test]
    async fn nvcc_missing_library_is_explained() {
        let dir = tempfile::tempdir().unwrap();
        let nvcc = fake_tool(
            dir.path(),
            "nvcc",
            &format!(
                "case \"$1\" in --version) {NVCC_VERSION};; *) echo '/usr/bin/ld: cannot find -lcudart_static: No such file or directory' >&2; echo 'collect2: error: ld returned 1 exit status' >&2; exit 1;; esac"
            ),
        );
        let scratch = tempfile::tempdir().unwrap();
        let (probe, _) = probe_nvcc(
            Ok(nvcc),
            &Arch::parse("sm_90").unwrap(),
            false,
            Some(scratch.path()),
        )
        .await;
        assert_eq!(probe.status, Status::Unusable);
        assert!(
            probe
                .reason
                .as_deref()
                .unwrap()
                .contains("cannot find -lcudart_static")
        );
        assert!(probe.fix.as_deref().unwrap().contains("runtime libraries"));
    }

    #[tokio::test]
    async fn nvcc_whose_version_fails_is_unusable() {
        let dir = tempfile::tempdir().unwrap();
        let nvcc = fake_tool(
            dir.path(),
            "nvcc",
            "echo 'error while loading shared libraries: libnvvm.so.4' >&2; exit 127",
        );
        let (probe, _) = probe_nvcc(
            Ok(nvcc),
            &Arch::parse("sm_90").unwrap(),
            false,
            Some(dir.path()),
        )
        .await;
        assert_eq!(probe.status, Status::Unusable);
        assert!(probe.reason.as_deref().unwrap().contains("libnvvm"));
    }

    #[tokio::test]
    async fn missing_tools_are_missing_with_a_fix() {
        let not_found = |tool| tools::NotFound {
            tool,
            tried: vec!["PATH".into()],
        };
        let (probe, _) = probe_nvcc(
            Err(not_found("nvcc")),
            &Arch::parse("sm_90").unwrap(),
            false,
            None,
        )
        .await;
        assert_eq!(probe.status, Status::Missing);
        assert!(probe.fix.unwrap().contains("setup.sh"));
        let probe = probe_ncu(Err(not_found("ncu")), None, false).await;
        assert_eq!(probe.status, Status::Missing);
        let probe = probe_python(Err(not_found("python3"))).await;
        assert_eq!(probe.status, Status::Missing);
    }

    const NCU_VERSION: &str = "echo 'NVIDIA (R) Nsight Compute Command Line Profiler'; echo 'Copyright (c) 2018-2025 NVIDIA Corporation'; echo 'Version 2025.3.1.0 (build 36398880) (public-release)'";

    #[tokio::test]
    async fn ncu_counter_permission_error_is_recognised() {
        let dir = tempfile::tempdir().unwrap();
        let ncu = fake_tool(
            dir.path(),
            "ncu",
            &format!(
                "case \"$1\" in --version) {NCU_VERSION};; *) echo '==PROF== Connected to process 4242 (/tmp/probe_main)'; echo '==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU Performance Counters on the target device 0. For instructions on enabling permissions and to get more information see https://developer.nvidia.com/ERR_NVGPUCTRPERM'; echo '==PROF== Disconnected from process 4242'; exit 0;; esac"
            ),
        );
        let program = dir.path().join("probe_main");
        let probe = probe_ncu(Ok(ncu), Some(&program), true).await;
        assert_eq!(probe.status, Status::Unusable);
        assert!(
            probe
                .reason
                .as_deref()
                .unwrap()
                .contains("ERR_NVGPUCTRPERM")
        );
        assert!(
            probe
                .fix
                .as_deref()
                .unwrap()
                .contains("NVreg_RestrictProfilingToAdminUsers=0")
        );
        assert_eq!(probe.facts["version"], "2025.3.1.0");
    }

    #[tokio::test]
    async fn ncu_library_not_loaded_is_unusable() {
        let dir = tempfile::tempdir().unwrap();
        let ncu = fake_tool(
            dir.path(),
            "ncu",
            &format!(
                "case \"$1\" in --version) {NCU_VERSION};; *) echo '==ERROR== Failed to initialize the profiler: LibraryNotLoaded'; exit 1;; esac"
            ),
        );
        let probe = probe_ncu(Ok(ncu), Some(&dir.path().join("p")), true).await;
        assert_eq!(probe.status, Status::Unusable);
        assert!(probe.reason.unwrap().contains("LibraryNotLoaded"));
    }

    #[tokio::test]
    async fn ncu_that_reads_counters_is_ok() {
        let dir = tempfile::tempdir().unwrap();
        let ncu = fake_tool(
            dir.path(),
            "ncu",
            &format!(
                "case \"$1\" in --version) {NCU_VERSION};; *) echo '==PROF== Connected to process 1'; echo '\"ID\",\"Process ID\",\"Process Name\",\"Host Name\",\"Kernel Name\",\"gpu__time_duration.sum\"'; echo '\"\",\"\",\"\",\"\",\"\",\"ns\"'; echo '\"0\",\"1\",\"probe_main\",\"127.0.0.1\",\"kforge_probe_add(float *, int)\",\"2,144\"';; esac"
            ),
        );
        let probe = probe_ncu(Ok(ncu), Some(&dir.path().join("p")), true).await;
        assert_eq!(probe.status, Status::Ok, "{probe:?}");
        assert!(probe.summary.contains("reads hardware counters"));
    }

    #[tokio::test]
    async fn ncu_without_gpu_is_unusable_not_a_crash() {
        let dir = tempfile::tempdir().unwrap();
        let ncu = fake_tool(
            dir.path(),
            "ncu",
            &format!("case \"$1\" in --version) {NCU_VERSION};; *) exit 1;; esac"),
        );
        let probe = probe_ncu(Ok(ncu), None, false).await;
        assert_eq!(probe.status, Status::Unusable);
        assert!(probe.reason.unwrap().contains("no GPU"));
    }

    #[tokio::test]
    async fn python_without_torch_is_unusable() {
        let dir = tempfile::tempdir().unwrap();
        // The real probe script runs under a fake python that pretends torch is missing.
        let python = fake_tool(
            dir.path(),
            "python3",
            "echo 'KFORGE_PROBE {\"python\": \"3.11.7\", \"error\": \"ModuleNotFoundError: No module named '\\''torch'\\''\"}'",
        );
        let probe = probe_python(Ok(python)).await;
        assert_eq!(probe.status, Status::Unusable);
        assert!(
            probe
                .reason
                .as_deref()
                .unwrap()
                .contains("No module named 'torch'"),
            "{probe:?}"
        );
    }

    #[tokio::test]
    async fn python_that_crashes_reports_its_last_line() {
        let dir = tempfile::tempdir().unwrap();
        let python = fake_tool(
            dir.path(),
            "python3",
            "echo 'Traceback (most recent call last):' >&2; echo 'ImportError: libc.so.6: version `GLIBC_2.38'\"'\"' not found' >&2; exit 1",
        );
        let probe = probe_python(Ok(python)).await;
        assert_eq!(probe.status, Status::Unusable);
        assert!(probe.reason.unwrap().contains("GLIBC_2.38"));
    }

    #[test]
    fn torch_version_mismatch_is_unusable() {
        let python = Probe::ok(
            "python",
            "3.12 with torch 2.9.0",
            serde_json::json!({"torch": "2.9.0+cu128"}),
        );
        let libtorch = Probe::ok(
            "libtorch",
            "",
            serde_json::json!({"version": "2.11.0+cu130"}),
        );
        let probe = compare_torch_versions(python, &libtorch);
        assert_eq!(probe.status, Status::Unusable);
        assert!(probe.reason.unwrap().contains("2.9.0"));
        let python = Probe::ok("python", "x", serde_json::json!({"torch": "2.11.0+cu130"}));
        assert_eq!(compare_torch_versions(python, &libtorch).status, Status::Ok);
    }

    #[test]
    fn llm_probe_never_shows_a_key() {
        let mut settings = Settings::default();
        settings.llm.openai.api_key = Some(crate::config::Secret::new("sk-secret-value-1234"));
        let probe = probe_llm(&settings);
        assert_eq!(probe.status, Status::Ok);
        let text = serde_json::to_string(&probe).unwrap();
        assert!(!text.contains("sk-secret"), "{text}");
        let probe = probe_llm(&Settings::default());
        assert_eq!(probe.status, Status::Missing);
    }

    #[test]
    fn llm_probe_rejects_a_model_name_that_does_not_parse() {
        let mut settings = Settings::default();
        settings.llm.openai.api_key = Some(crate::config::Secret::new("sk-x"));
        settings.llm.coder = Some("gpt4o-without-provider".into());
        settings.llm.judge = Some("anthropic:claude-sonnet-4-5".into());
        let probe = probe_llm(&settings);
        assert_eq!(probe.status, Status::Unusable, "{probe:?}");
        assert!(probe.reason.unwrap().contains("llm.coder"));
        settings.llm.coder = Some("openai:o3".into());
        assert_eq!(probe_llm(&settings).status, Status::Ok);
    }

    #[test]
    fn render_says_what_is_missing_for_what() {
        let report = Report {
            probes: vec![
                Probe::failed(
                    "gpu",
                    Status::Missing,
                    "no GPU",
                    "no driver",
                    "use a GPU machine",
                ),
                Probe::ok("nvcc", "13.0.88", serde_json::Value::Null),
                Probe::ok("libtorch", "2.11.0", serde_json::Value::Null),
            ],
            capabilities: vec![(Capability::Compile, true), (Capability::Run, false)],
            ready: false,
            needed: vec![Capability::Run],
        };
        let text = report.render();
        assert!(
            text.contains("no   run and time kernels (needs GPU)"),
            "{text}"
        );
        assert!(text.contains("yes  compile kernels"));
        assert!(text.contains("not ready to run and time kernels"));
    }
}
