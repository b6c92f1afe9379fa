//! The evaluator: compile → verify → time, in an isolated GPU worker, producing one
//! [`CandidateResult`] per candidate (DESIGN.md §3.3). Every number kforge reports stands on it.
//!
//! - `compile`: nvcc into a cached shared library, ptxas resources per kernel.
//! - `client`: the worker process, its time limits and crash handling.
//! - `protocol`: the JSON-lines protocol and the worker's part of the result.
//! - `compare`: every-element comparison with per-dtype tolerances and the magnitude guard.
//! - `export`: a KernelBench `ModelNew` and a `torch.library` op around a candidate.
//! - `profile`: one call under Nsight Compute, parsed and diagnosed for the Judge.
//!
//! The status is decided here, from the worker's outcome, in one place ([`decide`]).

pub mod client;
pub mod command;
pub mod compare;
pub mod compile;
pub mod export;
pub mod profile;
pub mod protocol;

use std::path::Path;
use std::time::Instant;

use serde::{Deserialize, Serialize};

use crate::problem::ProblemBundle;
use compile::{CompileResult, Compiler};
use protocol::{
    Failure, FailureKind, ProtocolOptions, Timing, TrialResult, WorkerOutcome, WorkerRequest,
};

/// A candidate's verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    CompileError,
    RuntimeError,
    Timeout,
    Incorrect,
    Correct,
    /// Compile-only mode (no GPU here): it builds, nothing more is known.
    Compiled,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::CompileError => "compile_error",
            Status::RuntimeError => "runtime_error",
            Status::Timeout => "timeout",
            Status::Incorrect => "incorrect",
            Status::Correct => "correct",
            Status::Compiled => "compiled",
        }
    }
}

/// Speedups of the candidate's median time.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Speedups {
    /// In-session: reference median / candidate median (same process, interleaved).
    pub vs_reference: f64,
    /// Against the eager baseline measured at import on this GPU, if any.
    pub vs_eager: Option<f64>,
    /// Against the torch.compile baseline measured at import on this GPU, if any.
    pub vs_compile: Option<f64>,
}

/// Things worth a second look, beyond the status.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Flags {
    /// More than 10× faster than the reference, or faster than the speed-of-light floor.
    pub suspicious_speedup: bool,
    /// Outputs were incomplete when the given stream finished, or host time far exceeds event
    /// time: work ran on another stream.
    pub side_stream_work: bool,
    /// Two calls on the same inputs differed bitwise (within tolerance: e.g. atomics).
    pub nondeterministic: bool,
    /// The candidate changed an input.
    pub input_mutation: bool,
    /// The in-session reference time is far (>25%) from the same reference timed at import.
    pub reference_time_mismatch: bool,
}

/// The result document for one candidate.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CandidateResult {
    pub status: Status,
    /// One line: why this status.
    pub summary: String,
    pub problem: String,
    pub gpu: Option<String>,
    pub compile: CompileResult,
    pub failure: Option<Failure>,
    pub trials: Vec<TrialResult>,
    pub timing: Option<Timing>,
    pub speedup: Option<Speedups>,
    /// Floor time / candidate median time (1.0 = at the speed of light).
    pub fraction_of_speed_of_light: Option<f64>,
    pub floor_ms: Option<f64>,
    pub flags: Flags,
    pub options: ProtocolOptions,
    /// Filled when profiled (`kforge profile`, the search).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ncu: Option<serde_json::Value>,
    /// Wall time of the whole evaluation, compile included.
    pub seconds: f64,
}

/// Side-stream heuristic: host time per call beyond event time by this factor plus margin.
const HOST_EVENT_FACTOR: f64 = 1.5;
const HOST_EVENT_MARGIN_MS: f64 = 0.05;
const SUSPICIOUS_SPEEDUP: f64 = 10.0;
/// In-session reference vs the import's eager baseline.
const REFERENCE_MISMATCH: f64 = 0.25;

/// Decides status, speedups and flags from the compile result and the worker's outcome.
pub fn decide(
    problem: &ProblemBundle,
    compile: CompileResult,
    outcome: Option<WorkerOutcome>,
    options: &ProtocolOptions,
    started: Instant,
) -> CandidateResult {
    let mut result = CandidateResult {
        status: Status::Compiled,
        summary: String::new(),
        problem: problem.spec.name.clone(),
        gpu: None,
        compile,
        failure: None,
        trials: Vec::new(),
        timing: None,
        speedup: None,
        fraction_of_speed_of_light: None,
        floor_ms: None,
        flags: Flags::default(),
        options: options.clone(),
        ncu: None,
        seconds: 0.0,
    };
    if !result.compile.ok {
        result.status = if result.compile.timed_out {
            Status::Timeout
        } else {
            Status::CompileError
        };
        result.summary = if result.compile.timed_out {
            "nvcc timed out".into()
        } else {
            format!(
                "does not compile: {}",
                result
                    .compile
                    .error_excerpt(1)
                    .lines()
                    .next()
                    .unwrap_or("see the log")
            )
        };
        result.seconds = started.elapsed().as_secs_f64();
        return result;
    }
    let Some(outcome) = outcome else {
        result.summary = "compiled; not verified (no GPU here: compile-only)".into();
        result.seconds = started.elapsed().as_secs_f64();
        return result;
    };
    result.gpu = outcome.gpu.as_ref().map(|g| g.name.clone());
    result.trials = outcome.trials;
    result.timing = outcome.timing;
    result.flags.input_mutation = result.trials.iter().any(|t| !t.mutated_inputs.is_empty());
    result.flags.nondeterministic = result.trials.iter().any(|t| !t.repeat_exact);
    result.flags.side_stream_work = result.trials.iter().any(|t| !t.complete_on_stream);
    if let Some(failure) = outcome.failure {
        result.status = match failure.kind {
            FailureKind::Timeout => Status::Timeout,
            _ => Status::RuntimeError,
        };
        result.summary = match failure.kind {
            FailureKind::Problem | FailureKind::Worker => {
                format!(
                    "could not be evaluated (not the candidate's fault): {}",
                    failure.message
                )
            }
            _ => format!(
                "{} during {}: {}",
                result.status.as_str(),
                failure.stage,
                failure.message
            ),
        };
        result.failure = Some(failure);
        result.seconds = started.elapsed().as_secs_f64();
        return result;
    }
    match result.trials.iter().find(|t| !t.passed) {
        Some(trial) => {
            result.status = Status::Incorrect;
            result.summary = describe_incorrect(trial);
        }
        None if result.trials.is_empty() => {
            result.status = Status::RuntimeError;
            result.summary = "the worker ran no trial".into();
        }
        None => {
            result.status = Status::Correct;
            result.summary = format!("correct on {} trials", result.trials.len());
        }
    }
    if let (Status::Correct, Some(timing)) = (result.status, &result.timing) {
        let candidate_ms = timing.candidate.median;
        let baseline = result.gpu.as_deref().and_then(|g| problem.baseline(g));
        let vs_reference = timing.reference.median / candidate_ms;
        result.speedup = Some(Speedups {
            vs_reference,
            vs_eager: baseline.as_ref().map(|b| b.eager_ms / candidate_ms),
            vs_compile: baseline
                .as_ref()
                .and_then(|b| b.compile_ms)
                .map(|c| c / candidate_ms),
        });
        if let Some(b) = &baseline {
            result.floor_ms = Some(b.floor_ms);
            result.fraction_of_speed_of_light = Some(b.floor_ms / candidate_ms);
            // The import timed the same traced reference with optimisations off.
            result.flags.reference_time_mismatch =
                (timing.reference.median / b.reference_ms - 1.0).abs() > REFERENCE_MISMATCH;
        }
        result.flags.suspicious_speedup = vs_reference > SUSPICIOUS_SPEEDUP
            || result.fraction_of_speed_of_light.is_some_and(|f| f > 1.0);
        if timing.candidate_host.median
            > HOST_EVENT_FACTOR * timing.candidate.median + HOST_EVENT_MARGIN_MS
            && timing.candidate_host.median
                > HOST_EVENT_FACTOR
                    * timing
                        .reference_host
                        .median
                        .min(timing.reference.median + HOST_EVENT_MARGIN_MS)
        {
            result.flags.side_stream_work = true;
        }
        result.summary =
            format!("correct; {candidate_ms:.4} ms median, {vs_reference:.2}× the reference");
    }
    if result.flags.side_stream_work && result.status == Status::Correct {
        result.status = Status::Incorrect;
        result.summary = "work ran outside the given stream (the call returned before its results were complete)".into();
    }
    result.seconds = started.elapsed().as_secs_f64();
    result
}

fn describe_incorrect(trial: &TrialResult) -> String {
    if !trial.mutated_inputs.is_empty() {
        return format!(
            "modifies its input(s) {} (trial {})",
            trial.mutated_inputs.join(", "),
            trial.trial
        );
    }
    if !trial.complete_on_stream {
        return format!(
            "outputs were not complete when the given stream finished (work on another stream; trial {})",
            trial.trial
        );
    }
    if let Some(o) = trial.outputs.iter().find(|o| !o.passed) {
        let mut text = format!(
            "output {} wrong in {} of {} elements (trial {}, seed {}): max abs err {:.3e}, max rel err {:.3e}",
            o.index,
            o.mismatches,
            o.elements,
            trial.trial,
            trial.seed,
            o.max_abs_err,
            o.max_rel_err
        );
        if o.candidate_nan > 0 {
            text.push_str(&format!(", {} NaN (unwritten?)", o.candidate_nan));
        }
        if let Some(first) = o.first_mismatches.first() {
            text.push_str(&format!(", first at {first:?}"));
        }
        if let Some(guard) = &o.magnitude_guard {
            text.push_str(&format!("; {guard}"));
        }
        return text;
    }
    if !trial.repeat_within_tolerance {
        return format!(
            "two calls on the same inputs disagree (race or uninitialised read; trial {})",
            trial.trial
        );
    }
    format!("trial {} failed", trial.trial)
}

/// Compiles and (when a worker is given) verifies and times one candidate.
pub async fn evaluate(
    compiler: &Compiler,
    worker: Option<&mut client::WorkerClient>,
    problem: &ProblemBundle,
    source: &str,
    options: &ProtocolOptions,
) -> Result<CandidateResult, compile::CompileError> {
    let started = Instant::now();
    let compiled = compiler.compile(source).await?;
    Ok(verify_and_time(worker, problem, compiled, options, started).await)
}

/// The GPU part of [`evaluate`] for a compiled candidate (a failed build, or no worker, is
/// decided without the GPU). Callers that share one GPU hold their lock around only this.
pub async fn verify_and_time(
    worker: Option<&mut client::WorkerClient>,
    problem: &ProblemBundle,
    compiled: CompileResult,
    options: &ProtocolOptions,
    started: Instant,
) -> CandidateResult {
    let outcome = match (worker, compiled.ok, compiled.library.as_deref()) {
        (Some(worker), true, Some(library)) => Some(
            worker
                .request(WorkerRequest::Evaluate {
                    id: 0,
                    bundle: problem.dir.clone(),
                    library: library.to_path_buf(),
                    options: options.clone(),
                })
                .await,
        ),
        _ => None,
    };
    decide(problem, compiled, outcome, options, started)
}

/// A readable table of one result (the default output of `kforge eval`).
pub fn render(result: &CandidateResult) -> String {
    let mut out = String::new();
    out.push_str(&format!("problem   {}\n", result.problem));
    if let Some(gpu) = &result.gpu {
        out.push_str(&format!("gpu       {gpu}\n"));
    }
    out.push_str(&format!("status    {}\n", result.status.as_str()));
    out.push_str(&format!("summary   {}\n", result.summary));
    out.push_str(&format!(
        "compile   {} in {:.2} s{} ({})\n",
        if result.compile.ok { "ok" } else { "failed" },
        result.compile.seconds,
        if result.compile.cached {
            ", cached"
        } else {
            ""
        },
        result.compile.arch
    ));
    for k in &result.compile.kernels {
        out.push_str(&format!(
            "  kernel  {}: {} regs, {} B smem, {} B stack, spills {}/{} B\n",
            k.name,
            k.registers,
            k.shared_memory_bytes,
            k.stack_frame_bytes,
            k.spill_stores_bytes,
            k.spill_loads_bytes
        ));
    }
    if !result.compile.ok {
        out.push_str(&format!("log:\n{}\n", result.compile.error_excerpt(20)));
    }
    if let Some(f) = &result.failure {
        out.push_str(&format!(
            "failure   {:?} during {}: {}\n",
            f.kind, f.stage, f.message
        ));
        if let Some(tail) = &f.stderr_tail {
            for line in tail
                .lines()
                .rev()
                .take(5)
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
            {
                out.push_str(&format!("  stderr  {line}\n"));
            }
        }
    }
    if !result.trials.is_empty() {
        let passed = result.trials.iter().filter(|t| t.passed).count();
        out.push_str(&format!(
            "trials    {passed}/{} passed\n",
            result.trials.len()
        ));
        for t in result.trials.iter().filter(|t| !t.passed) {
            for o in t.outputs.iter().filter(|o| !o.passed) {
                out.push_str(&format!(
                    "  trial {} output {}: {} / {} mismatches, max abs {:.3e}, max rel {:.3e}, NaN {}, first {:?}\n",
                    t.trial, o.index, o.mismatches, o.elements, o.max_abs_err, o.max_rel_err, o.candidate_nan,
                    o.first_mismatches.iter().take(3).collect::<Vec<_>>()
                ));
            }
        }
    }
    if let Some(t) = &result.timing {
        out.push_str(&format!(
            "timing    candidate {:.4} ms median (min {:.4}, max {:.4}, sd {:.4}, n {})\n",
            t.candidate.median,
            t.candidate.min,
            t.candidate.max,
            t.candidate.stddev,
            t.candidate.count
        ));
        out.push_str(&format!(
            "          reference {:.4} ms median (same session, interleaved)\n",
            t.reference.median
        ));
    }
    if let Some(s) = &result.speedup {
        let fmt = |v: Option<f64>| {
            v.map(|x| format!("{x:.2}×"))
                .unwrap_or_else(|| "n/a".into())
        };
        out.push_str(&format!(
            "speedup   {:.2}× vs reference, {} vs eager baseline, {} vs torch.compile\n",
            s.vs_reference,
            fmt(s.vs_eager),
            fmt(s.vs_compile)
        ));
    }
    if let Some(f) = result.fraction_of_speed_of_light {
        out.push_str(&format!(
            "sol       {:.1}% of speed of light (floor {:.4} ms)\n",
            100.0 * f,
            result.floor_ms.unwrap_or(0.0)
        ));
    }
    let flags = &result.flags;
    let raised: Vec<&str> = [
        (flags.suspicious_speedup, "suspicious speedup"),
        (flags.side_stream_work, "side-stream work"),
        (flags.nondeterministic, "nondeterministic"),
        (flags.input_mutation, "input mutation"),
        (
            flags.reference_time_mismatch,
            "reference time differs from the import's",
        ),
    ]
    .iter()
    .filter(|(on, _)| *on)
    .map(|(_, name)| *name)
    .collect();
    if !raised.is_empty() {
        out.push_str(&format!("flags     {}\n", raised.join(", ")));
    }
    if let Some(ncu) = &result.ncu {
        match ncu["judge_view"].as_str() {
            Some(view) => out.push_str(&format!("profile\n{view}")),
            None => out.push_str(&format!(
                "profile   not profiled: {}\n",
                ncu["reason"].as_str().unwrap_or("unknown")
            )),
        }
    }
    out.push_str(&format!("wall      {:.2} s\n", result.seconds));
    out
}

/// Reads a candidate file, with a message that says what to do when it is missing.
pub fn read_candidate(path: &Path) -> anyhow::Result<String> {
    std::fs::read_to_string(path).map_err(|e| {
        anyhow::anyhow!(
            "cannot read the candidate {}: {e} (give the path of one .cu file)",
            crate::paths::display(path)
        )
    })
}
