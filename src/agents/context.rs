//! What the prompts are made of, and how each fact becomes the text of a slot.
//!
//! The orchestrator lends its own records: the problem's [`ProblemSpec`], the [`GpuInfo`] and
//! the [`Baseline`] measured on that GPU ([`RunContext`]); a node's code, its
//! [`CandidateResult`] and the ncu view ([`Candidate`]); and what the search says was already
//! tried ([`History`], from a [`Job`]). Nothing is copied into prompt-only structs, so a prompt
//! always shows what the evaluator measured.
//!
//! The text is written for a model: units on every number, times in µs or ms, sizes in SI units,
//! no machine paths (nvcc's log names files by their names only), and an absent fact says why it
//! is absent rather than leaving a gap.

use std::fmt::Write as _;
use std::sync::LazyLock;

use regex::Regex;

use super::prompts::{Slot, SlotValues};
use crate::eval::compile::{ABI_HEADER, KernelResources};
use crate::eval::protocol::{Failure, FailureKind, TrialResult};
use crate::eval::{CandidateResult, Status};
use crate::gpu::GpuInfo;
use crate::problem::{Baseline, InputStructure, ParameterKind, ProblemSpec, TensorSpec};
use crate::search::{Job, TriedResult, TriedStrategy};

/// Lines of nvcc's log a prompt shows.
const COMPILE_LOG_LINES: usize = 40;
/// Lines of a dead worker's stderr a prompt shows.
const STDERR_LINES: usize = 8;
/// Kinds of failure listed beyond the first failing trial (which is described in full).
const MORE_FAILED_TRIALS: usize = 4;

/// The facts every prompt of a run shares.
#[derive(Debug, Clone, Copy)]
pub struct RunContext<'a> {
    pub problem: &'a ProblemSpec,
    /// The nvcc target candidates are compiled for (`sm_90`, `sm_90a`).
    pub arch: &'a str,
    /// The GPU candidates run on; `None` in a compile-only run.
    pub gpu: Option<&'a GpuInfo>,
    /// The problem's baseline on that GPU (bandwidth, peak rates, floor, PyTorch times).
    pub baseline: Option<&'a Baseline>,
}

/// The Nsight Compute view of a node, or why there is none (ncu missing, counters not
/// permitted, the candidate failed before profiling, ...).
#[derive(Debug, Clone, Copy)]
pub enum Profile<'a> {
    /// The text the ncu module renders for the Judge (metrics and diagnosis).
    Profiled(&'a str),
    NotProfiled {
        reason: &'a str,
    },
}

/// One evaluated kernel.
#[derive(Debug, Clone, Copy)]
pub struct Candidate<'a> {
    pub code: &'a str,
    pub result: &'a CandidateResult,
    pub profile: Profile<'a>,
}

/// What the search says was tried around a node.
#[derive(Debug, Clone, Copy, Default)]
pub struct History<'a> {
    /// The node's other children ("do not repeat").
    pub siblings: &'a [TriedStrategy],
    /// From the reference to the node, root first; the node itself last.
    pub ancestors: &'a [TriedStrategy],
}

impl<'a> History<'a> {
    /// The history a job carries.
    pub fn of(job: &'a Job) -> History<'a> {
        History {
            siblings: &job.sibling_strategies,
            ancestors: &job.ancestor_strategies,
        }
    }
}

/// Fills the slots every prompt may use.
pub(crate) fn run_values(run: &RunContext<'_>, values: &mut SlotValues) {
    values
        .set(Slot::ProblemName, run.problem.name.as_str())
        .set(Slot::ProblemSource, run.problem.source.trim_end())
        .set(Slot::ProblemInterface, problem_interface(run.problem))
        .set(Slot::AbiHeader, ABI_HEADER.trim_end())
        .set(Slot::Gpu, gpu_facts(run))
        .set(Slot::SpeedOfLight, speed_of_light(run));
}

/// Fills the slots of one evaluated kernel.
pub(crate) fn candidate_values(
    candidate: &Candidate<'_>,
    history: &History<'_>,
    values: &mut SlotValues,
) {
    values
        .set(Slot::Code, candidate.code.trim_end())
        .set(Slot::Evaluation, evaluation(candidate.result))
        .set(Slot::CompileLog, compile_log(candidate.result))
        .set(Slot::Resources, resources(candidate.result))
        .set(Slot::Profile, profile(candidate.profile))
        .set(Slot::Ancestors, ancestors(history.ancestors));
}

/// Fills the node slots for the root, which is the PyTorch reference and has no kernel.
pub(crate) fn reference_values(
    run: &RunContext<'_>,
    reference_profile: Profile<'_>,
    values: &mut SlotValues,
) {
    let none = "none: this node is the PyTorch reference (no kernel yet)";
    values
        .set(
            Slot::Code,
            "// No CUDA kernel yet: this node is the PyTorch reference shown above.",
        )
        .set(Slot::Evaluation, reference_evaluation(run))
        .set(Slot::CompileLog, none)
        .set(Slot::Resources, none)
        .set(Slot::Profile, profile(reference_profile))
        .set(Slot::Ancestors, none);
}

pub(crate) fn siblings_value(siblings: &[TriedStrategy]) -> String {
    if siblings.is_empty() {
        return "nothing yet".into();
    }
    let mut out = String::new();
    for tried in siblings {
        let _ = writeln!(
            out,
            "- {}\n  → {}",
            indent_continuation(&tried.strategy, "  "),
            tried_result(tried)
        );
    }
    out.trim_end().to_string()
}

fn ancestors(ancestors: &[TriedStrategy]) -> String {
    if ancestors.is_empty() {
        return "none: this kernel was written directly from the reference".into();
    }
    let mut out = String::from("from the reference to this kernel, one edit per step:\n");
    for (i, tried) in ancestors.iter().enumerate() {
        let this = if i + 1 == ancestors.len() {
            " (this kernel)"
        } else {
            ""
        };
        let _ = writeln!(
            out,
            "{}. {}\n   → {}{this}",
            i + 1,
            indent_continuation(&tried.strategy, "   "),
            tried_result(tried)
        );
    }
    out.trim_end().to_string()
}

fn tried_result(tried: &TriedStrategy) -> String {
    match &tried.result {
        TriedResult::Pending => "being tried right now".into(),
        TriedResult::Failed { reason } => format!("failed: {}", one_line(reason)),
        TriedResult::Unverified { reason } => {
            let mut text = format!("built, not verified or timed ({})", one_line(reason));
            if let Some(best) = tried.best_speedup_in_subtree {
                let _ = write!(text, "; edits on top of it reached {best:.2}×");
            }
            text
        }
        TriedResult::Correct {
            speedup,
            fraction_of_sol,
        } => {
            let mut text = format!("correct, {speedup:.2}× the reference");
            if let Some(fraction) = fraction_of_sol {
                let _ = write!(text, ", {:.0}% of speed of light", 100.0 * fraction);
            }
            if let Some(best) = tried.best_speedup_in_subtree
                && best > *speedup
            {
                let _ = write!(text, "; edits on top of it reached {best:.2}×");
            }
            text
        }
    }
}

fn indent_continuation(text: &str, indent: &str) -> String {
    text.trim().replace('\n', &format!("\n{indent}"))
}

/// A message from elsewhere (a summary, a failure reason) as one line without machine paths.
fn one_line(text: &str) -> String {
    sanitize_paths(text)
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

fn profile(profile: Profile<'_>) -> String {
    match profile {
        Profile::Profiled(view) => view.trim_end().to_string(),
        Profile::NotProfiled { reason } => format!("not profiled: {}", reason.trim()),
    }
}

fn problem_interface(problem: &ProblemSpec) -> String {
    let mut out = String::from("kforge_forward receives, in this order:\n");
    if problem.inputs.is_empty() {
        out.push_str("  inputs: none (num_inputs = 0)\n");
    }
    for (i, input) in problem.inputs.iter().enumerate() {
        let _ = writeln!(out, "  inputs[{i}]  {}", tensor_line(input));
    }
    if problem.parameters.is_empty() {
        out.push_str("  params: none (num_params = 0)\n");
    }
    for (i, param) in problem.parameters.iter().enumerate() {
        let kind = match param.kind {
            ParameterKind::Parameter => "parameter",
            ParameterKind::Buffer => "buffer",
        };
        let _ = writeln!(
            out,
            "  params[{i}]  {}: {} {} ({kind})",
            param.name,
            param.dtype,
            shape(&param.shape)
        );
    }
    for (i, output) in problem.outputs.iter().enumerate() {
        let _ = writeln!(
            out,
            "  outputs[{i}] {} {} (contiguous, preallocated; write every element)",
            output.dtype,
            shape(&output.shape)
        );
    }
    if !problem.constants.is_empty() {
        let constants: Vec<String> = problem
            .constants
            .iter()
            .map(|c| format!("{} = {}", c.name, c.value))
            .collect();
        let _ = writeln!(
            out,
            "Non-tensor forward arguments are not passed to kforge_forward; use their values: {}",
            constants.join(", ")
        );
    }
    if !problem.size_overrides.is_empty() {
        let constants: Vec<String> = problem
            .module_constants
            .iter()
            .map(|(name, value)| format!("{name} = {value}"))
            .collect();
        let _ = writeln!(
            out,
            "Sizes for this run (they override the module constants in the source): {}",
            constants.join(", ")
        );
    }
    if problem.flops > 0 {
        let _ = write!(out, "Work per call: {}; ", si(problem.flops as f64, "FLOP"));
    } else {
        out.push_str("Work per call: FLOPs not counted; ");
    }
    let _ = writeln!(
        out,
        "at least {} read and written.",
        si(problem.min_bytes as f64, "B")
    );
    if problem.eval_mode {
        out.push_str(
            "The model is stochastic in training mode, so it is evaluated in eval mode \
             (dropout is off).\n",
        );
    }
    for note in &problem.notes {
        let _ = writeln!(out, "Note: {}", one_line(note));
    }
    out.trim_end().to_string()
}

fn tensor_line(input: &TensorSpec) -> String {
    let mut text = format!("{}: {} {}", input.name, input.dtype, shape(&input.shape));
    if let Some(structure) = input.structure {
        let _ = write!(text, ", always {}", structure_text(structure));
    }
    if let Some([low, high]) = input.observed_range {
        let _ = write!(text, ", values seen in [{}, {}]", number(low), number(high));
    }
    text
}

fn structure_text(structure: InputStructure) -> &'static str {
    match structure {
        InputStructure::Boolean => "0 or 1",
        InputStructure::Integer => "integer-valued",
        InputStructure::Constant => "one constant value",
        InputStructure::PlusMinusOne => "±1",
        InputStructure::Diagonal => "diagonal",
        InputStructure::UpperTriangular => "upper triangular",
        InputStructure::LowerTriangular => "lower triangular",
        InputStructure::Symmetric => "symmetric",
        InputStructure::NonNegative => "non-negative",
        InputStructure::Other => "structured (a structure this kforge cannot name)",
    }
}

fn shape(dims: &[i64]) -> String {
    let dims: Vec<String> = dims.iter().map(i64::to_string).collect();
    format!("[{}]", dims.join(", "))
}

fn gpu_facts(run: &RunContext<'_>) -> String {
    let Some(gpu) = run.gpu else {
        return format!(
            "No GPU on this machine: candidates are compiled for {} and not run (compile-only).",
            run.arch
        );
    };
    let mut out = format!(
        "{}: compute capability {}.{}; candidates are compiled for {}\n",
        gpu.name, gpu.compute_capability.0, gpu.compute_capability.1, run.arch
    );
    let _ = writeln!(
        out,
        "{} SMs at {:.2} GHz; {} of device memory; L2 cache {}",
        gpu.sm_count,
        f64::from(gpu.sm_clock_khz) / 1e6,
        crate::gpu::human_bytes(gpu.memory_bytes),
        crate::gpu::human_bytes(gpu.l2_bytes)
    );
    let _ = writeln!(
        out,
        "shared memory per block: 48 KiB static; up to {} KiB dynamic after \
         cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes)",
        gpu.max_shared_memory_per_block / 1024
    );
    out.push_str("warps of 32 threads; at most 1024 threads per block\n");
    let theoretical = gpu.theoretical_bandwidth();
    match run.baseline {
        Some(baseline) => {
            let _ = write!(
                out,
                "DRAM bandwidth: {} measured (device-to-device copy, read + write)",
                si(baseline.bandwidth_bytes_per_s, "B/s")
            );
            if theoretical > 0.0 {
                let _ = write!(out, ", {} theoretical", si(theoretical, "B/s"));
            }
            out.push('\n');
            if !baseline.peak_flops_per_s.is_empty() {
                let rates: Vec<String> = baseline
                    .peak_flops_per_s
                    .iter()
                    .map(|(dtype, rate)| format!("{dtype} {}", si(*rate, "FLOP/s")))
                    .collect();
                let _ = writeln!(out, "peak compute: {}", rates.join(", "));
            }
        }
        None if theoretical > 0.0 => {
            let _ = writeln!(
                out,
                "DRAM bandwidth: {} theoretical (not measured: no baseline on this GPU)",
                si(theoretical, "B/s")
            );
        }
        None => {}
    }
    out.trim_end().to_string()
}

fn speed_of_light(run: &RunContext<'_>) -> String {
    let problem = run.problem;
    let Some(b) = run.baseline else {
        return format!(
            "unknown: no baseline was measured for this problem on this GPU (import it there to \
             measure one); the problem moves at least {} per call{}",
            si(problem.min_bytes as f64, "B"),
            if problem.flops > 0 {
                format!(" and does {}", si(problem.flops as f64, "FLOP"))
            } else {
                String::new()
            }
        );
    };
    let mut out = format!(
        "floor {} per call, {}-bound: memory floor {} ({} at {})",
        time(b.floor_ms),
        b.floor_bound,
        time(b.memory_floor_ms),
        si(problem.min_bytes as f64, "B"),
        si(b.bandwidth_bytes_per_s, "B/s"),
    );
    if problem.flops == 0 {
        out.push_str(", no compute floor (no FLOPs counted)");
    } else {
        let _ = write!(out, ", compute floor {}", time(b.compute_floor_ms));
        if let Some(peak) = b.peak_flops_per_s.get(&b.flops_dtype) {
            let _ = write!(
                out,
                " ({} at {} {})",
                si(problem.flops as f64, "FLOP"),
                b.flops_dtype,
                si(*peak, "FLOP/s")
            );
        }
    }
    let _ = write!(
        out,
        "\nPyTorch on this GPU (measured at import): eager {}",
        time(b.eager_ms)
    );
    match (b.compile_ms, &b.compile_error) {
        (Some(ms), _) => {
            let _ = write!(out, ", torch.compile {}", time(ms));
        }
        (None, Some(error)) => {
            let _ = write!(out, ", torch.compile failed ({})", one_line(error));
        }
        (None, None) => {}
    }
    out
}

fn reference_evaluation(run: &RunContext<'_>) -> String {
    match run.baseline {
        Some(b) => format!(
            "This node is the PyTorch reference itself. On this GPU it takes {} per call as \
             kforge runs it (eager PyTorch: {}); every kernel's speedup is measured against it.",
            time(b.reference_ms),
            time(b.eager_ms)
        ),
        None => {
            "This node is the PyTorch reference itself; it has not been timed on this GPU.".into()
        }
    }
}

fn evaluation(result: &CandidateResult) -> String {
    let status = result.status.as_str();
    let summary = one_line(&result.summary);
    // Summaries often begin with the status already ("correct; 0.52 ms median, ...").
    let mut out = if summary.starts_with(status) {
        format!("status: {summary}\n")
    } else {
        format!("status: {status} ({summary})\n")
    };
    if !result.compile.ok {
        out.push_str(if result.compile.timed_out {
            "nvcc ran past its time limit; nothing was run\n"
        } else {
            "it does not compile (see the compile log); nothing was run\n"
        });
    }
    if let Some(failure) = &result.failure {
        out.push_str(&failure_text(failure));
    }
    if !result.trials.is_empty() {
        out.push_str(&correctness(&result.trials));
    }
    if result.status == Status::Compiled {
        out.push_str("compile-only run: not verified, not timed\n");
    }
    if let Some(timing) = &result.timing {
        let c = &timing.candidate;
        let _ = writeln!(
            out,
            "timing: {} median per call (min {}, max {}, sd {}, {} timed calls, L2 flushed \
             before each); the reference {} median in the same session",
            time(c.median),
            time(c.min),
            time(c.max),
            time(c.stddev),
            c.count,
            time(timing.reference.median)
        );
    }
    if let Some(speedup) = &result.speedup {
        let _ = write!(
            out,
            "speedup: {:.2}× vs the reference",
            speedup.vs_reference
        );
        if let Some(eager) = speedup.vs_eager {
            let _ = write!(out, ", {eager:.2}× vs PyTorch eager");
        }
        if let Some(compile) = speedup.vs_compile {
            let _ = write!(out, ", {compile:.2}× vs torch.compile");
        }
        out.push('\n');
    }
    if let Some(fraction) = result.fraction_of_speed_of_light {
        let _ = write!(out, "speed of light: {:.1}%", 100.0 * fraction);
        if let Some(floor) = result.floor_ms {
            let _ = write!(out, " (floor {})", time(floor));
        }
        out.push('\n');
    }
    let flags = &result.flags;
    let raised: Vec<&str> = [
        (
            flags.suspicious_speedup,
            "suspicious speedup (over 10× or faster than the speed-of-light floor: check that \
             all the work is done)",
        ),
        (flags.side_stream_work, "work ran outside the given stream"),
        (
            flags.nondeterministic,
            "nondeterministic (two calls on the same inputs differ bitwise)",
        ),
        (flags.input_mutation, "modifies an input"),
        (
            flags.reference_time_mismatch,
            "the reference's time in this session differs from the import's by over 25%",
        ),
    ]
    .into_iter()
    .filter(|(on, _)| *on)
    .map(|(_, text)| text)
    .collect();
    if !raised.is_empty() {
        let _ = writeln!(out, "flags: {}", raised.join("; "));
    }
    out.trim_end().to_string()
}

fn failure_text(failure: &Failure) -> String {
    let kind = match failure.kind {
        FailureKind::CandidateStatus => "error status",
        FailureKind::CudaError => "CUDA error",
        FailureKind::BadLibrary => "unusable library",
        FailureKind::Crashed => "the process crashed",
        FailureKind::Exited => "the process exited (the candidate called exit?)",
        FailureKind::Timeout => "time limit exceeded",
        FailureKind::Problem => "the problem could not be run (not the kernel's fault)",
        FailureKind::Worker => "the GPU worker failed (not the kernel's fault)",
    };
    let mut out = format!("failure: {kind} during {}", failure.stage);
    if let Some(trial) = failure.trial {
        let _ = write!(out, " (trial {trial})");
    }
    let _ = writeln!(out, ": {}", one_line(&failure.message));
    if let Some(tail) = &failure.stderr_tail {
        let tail = sanitize_paths(tail);
        let lines: Vec<&str> = tail.lines().filter(|l| !l.trim().is_empty()).collect();
        let start = lines.len().saturating_sub(STDERR_LINES);
        out.push_str("stderr (last lines):\n");
        for line in &lines[start..] {
            let _ = writeln!(out, "  {}", line.trim_end());
        }
    }
    out
}

fn correctness(trials: &[TrialResult]) -> String {
    let passed = trials.iter().filter(|t| t.passed).count();
    let mut out = format!(
        "correctness: {passed} of {} trials passed (fresh random inputs per trial; every \
         element of every output compared)\n",
        trials.len()
    );
    let mut failed = trials.iter().filter(|t| !t.passed);
    if let Some(first) = failed.next() {
        out.push_str(&trial_detail(first));
    }
    // Later failures by what they looked like, so five identical failures take one line.
    let mut groups: Vec<(String, Vec<u32>)> = Vec::new();
    for trial in failed {
        let brief = trial_brief(trial);
        match groups.iter_mut().find(|(b, _)| *b == brief) {
            Some((_, trials)) => trials.push(trial.trial),
            None => groups.push((brief, vec![trial.trial])),
        }
    }
    for (brief, trials) in groups.iter().take(MORE_FAILED_TRIALS) {
        let numbers: Vec<String> = trials.iter().map(u32::to_string).collect();
        let _ = writeln!(
            out,
            "{} {} failed too: {brief}",
            if trials.len() == 1 { "trial" } else { "trials" },
            numbers.join(", ")
        );
    }
    if groups.len() > MORE_FAILED_TRIALS {
        let _ = writeln!(
            out,
            "(and {} other kinds of failure)",
            groups.len() - MORE_FAILED_TRIALS
        );
    }
    out
}

fn trial_brief(trial: &TrialResult) -> String {
    let mut parts: Vec<String> = trial
        .outputs
        .iter()
        .filter(|o| !o.passed)
        .map(|o| {
            format!(
                "output {}: {} of {} wrong, max abs err {}",
                o.index,
                o.mismatches,
                o.elements,
                sci(o.max_abs_err)
            )
        })
        .collect();
    if !trial.mutated_inputs.is_empty() {
        parts.push(format!("modified {}", trial.mutated_inputs.join(", ")));
    }
    if !trial.repeat_within_tolerance {
        parts.push("two calls disagree".into());
    }
    if !trial.complete_on_stream {
        parts.push("work outside the stream".into());
    }
    if parts.is_empty() {
        parts.push("failed".into());
    }
    parts.join("; ")
}

fn trial_detail(trial: &TrialResult) -> String {
    let mut out = format!("trial {} (seed {}) failed:\n", trial.trial, trial.seed);
    if !trial.mutated_inputs.is_empty() {
        let _ = writeln!(
            out,
            "  modified its input(s) {} (inputs must stay unchanged)",
            trial.mutated_inputs.join(", ")
        );
    }
    if !trial.complete_on_stream {
        out.push_str(
            "  outputs were incomplete when the given stream finished (work on another stream)\n",
        );
    }
    if !trial.repeat_within_tolerance {
        out.push_str(
            "  two calls on the same inputs disagree beyond tolerance (a race or an \
             uninitialized read)\n",
        );
    }
    for o in trial.outputs.iter().filter(|o| !o.passed) {
        let share = if o.elements > 0 {
            100.0 * o.mismatches as f64 / o.elements as f64
        } else {
            0.0
        };
        let _ = writeln!(
            out,
            "  output {} ({} {}): {} of {} elements outside tolerance ({share:.2}%; atol {}, \
             rtol {})",
            o.index,
            o.dtype,
            shape(&o.shape),
            o.mismatches,
            o.elements,
            sci(o.tolerance.atol),
            sci(o.tolerance.rtol)
        );
        let _ = writeln!(
            out,
            "    max abs err {}, max rel err {}, relative L2 err {}",
            sci(o.max_abs_err),
            sci(o.max_rel_err),
            sci(o.relative_l2_err)
        );
        if o.candidate_nan > 0 || o.candidate_inf > 0 || o.reference_nan > 0 {
            let _ = writeln!(
                out,
                "    NaN in the output: {} (outputs hold NaN on entry, so NaN often means an \
                 element was never written), Inf: {}, NaN in the reference: {}",
                o.candidate_nan, o.candidate_inf, o.reference_nan
            );
        }
        if !o.first_mismatches.is_empty() {
            let firsts: Vec<String> = o
                .first_mismatches
                .iter()
                .zip(
                    o.mismatch_values
                        .iter()
                        .map(Some)
                        .chain(std::iter::repeat(None)),
                )
                .map(|(index, values)| match values {
                    Some((got, expected)) => format!(
                        "{} got {} expected {}",
                        shape(index),
                        number(*got),
                        number(*expected)
                    ),
                    None => shape(index),
                })
                .collect();
            let _ = writeln!(out, "    first mismatches: {}", firsts.join("; "));
        }
        if let Some(guard) = &o.magnitude_guard {
            let _ = writeln!(out, "    magnitude guard: {}", one_line(guard));
        }
    }
    let ok = trial.outputs.iter().filter(|o| o.passed).count();
    if ok > 0 {
        let _ = writeln!(out, "  {ok} other output(s) matched");
    }
    out
}

fn compile_log(result: &CandidateResult) -> String {
    let compile = &result.compile;
    if compile.timed_out {
        return "nvcc ran past its time limit (simplify the code: heavy template unrolling?)"
            .into();
    }
    let log = sanitize_paths(&compile.log);
    // ptxas's resource report is shown in its own slot.
    let lines: Vec<&str> = log
        .lines()
        .filter(|l| {
            !l.trim().is_empty() && !l.contains("ptxas info") && !l.contains("bytes stack frame")
        })
        .collect();
    if compile.ok && lines.is_empty() {
        return format!("compiled cleanly for {}", compile.arch);
    }
    let mut out = String::new();
    for line in lines.iter().take(COMPILE_LOG_LINES) {
        let _ = writeln!(out, "{}", line.trim_end());
    }
    if lines.len() > COMPILE_LOG_LINES {
        let _ = writeln!(out, "({} more lines)", lines.len() - COMPILE_LOG_LINES);
    }
    out.trim_end().to_string()
}

fn resources(result: &CandidateResult) -> String {
    if result.compile.kernels.is_empty() {
        return if result.compile.ok {
            "ptxas reported no kernels".into()
        } else {
            "none: it did not compile".into()
        };
    }
    let lines: Vec<String> = result.compile.kernels.iter().map(kernel_line).collect();
    lines.join("\n")
}

fn kernel_line(k: &KernelResources) -> String {
    let mut text = format!(
        "{}: {} registers/thread, {} B static shared memory, {} B stack",
        k.name, k.registers, k.shared_memory_bytes, k.stack_frame_bytes
    );
    if k.spill_stores_bytes > 0 || k.spill_loads_bytes > 0 {
        let _ = write!(
            text,
            ", SPILLS {} B stores / {} B loads to local memory",
            k.spill_stores_bytes, k.spill_loads_bytes
        );
    } else {
        text.push_str(", no spills");
    }
    if k.constant_memory_bytes > 0 {
        let _ = write!(text, ", {} B constant memory", k.constant_memory_bytes);
    }
    text
}

/// Absolute paths (the compile cache, the worker's files) shortened to their file names.
fn sanitize_paths(text: &str) -> String {
    static PATH: LazyLock<Regex> = LazyLock::new(|| {
        // A constant pattern: it compiles, as the unit tests show.
        Regex::new(r#"(?m)(^|[\s"'(=])~?/(?:[^\s/:()"'<>,]+/)+([^\s/:()"'<>,]+)"#)
            .expect("valid path pattern")
    });
    PATH.replace_all(text, "$1$2").into_owned()
}

/// Milliseconds as µs below 1 ms, as ms above.
fn time(ms: f64) -> String {
    if ms.abs() >= 1.0 {
        format!("{ms:.3} ms")
    } else {
        format!("{:.2} µs", ms * 1e3)
    }
}

/// Three significant digits with an SI prefix: `218 MB`, `4.30 TB/s`.
fn si(value: f64, unit: &str) -> String {
    const PREFIXES: [(f64, &str); 5] =
        [(1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")];
    let (scale, prefix) = PREFIXES
        .into_iter()
        .find(|(scale, _)| value.abs() >= *scale)
        .unwrap_or((1.0, ""));
    let x = value / scale;
    let digits = if x.abs() >= 100.0 {
        format!("{x:.0}")
    } else if x.abs() >= 10.0 {
        format!("{x:.1}")
    } else {
        format!("{x:.2}")
    };
    format!("{digits} {prefix}{unit}")
}

fn sci(x: f64) -> String {
    format!("{x:.3e}")
}

/// A value as a person would write it: `0.25`, `-3`, `1.5e-7`, `NaN`.
fn number(x: f64) -> String {
    if !x.is_finite() {
        return if x.is_nan() {
            "NaN".into()
        } else if x > 0.0 {
            "inf".into()
        } else {
            "-inf".into()
        };
    }
    if x != 0.0 && !(1e-3..1e6).contains(&x.abs()) {
        return format!("{x:.4e}");
    }
    let text = format!("{x:.6}");
    let text = text.trim_end_matches('0').trim_end_matches('.');
    if text == "-0" {
        "0".into()
    } else {
        text.into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_become_file_names() {
        assert_eq!(
            sanitize_paths(
                "/root/.cache/kforge/compile-cache/ab12/candidate.cu(12): error: x\n~/k/kforge.h(3)"
            ),
            "candidate.cu(12): error: x\nkforge.h(3)"
        );
        assert_eq!(sanitize_paths("a / b, ratio 1/2/3"), "a / b, ratio 1/2/3");
        assert_eq!(sanitize_paths("(/usr/include/x.h)"), "(x.h)");
    }

    #[test]
    fn numbers_read_like_a_person_wrote_them() {
        assert_eq!(time(0.04512), "45.12 µs");
        assert_eq!(time(2.5), "2.500 ms");
        assert_eq!(si(4.3e12, "B/s"), "4.30 TB/s");
        assert_eq!(si(218_103_808.0, "B"), "218 MB");
        assert_eq!(si(512.0, "B"), "512 B");
        assert_eq!(number(0.25), "0.25");
        assert_eq!(number(-3.0), "-3");
        assert_eq!(number(1.5e-7), "1.5000e-7");
        assert_eq!(number(f64::NAN), "NaN");
        assert_eq!(number(-0.0), "0");
    }
}
