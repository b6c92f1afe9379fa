//! The GPU worker (`kforge worker`, hidden): the only process that loads candidate code.
//!
//! It runs in a child process with a cleared environment, so a candidate that crashes, faults,
//! aborts, hangs or calls `exit()` takes only the worker with it; the parent (eval::client)
//! records what happened and restarts it. It speaks JSON lines (eval::protocol) on a private
//! copy of stdout; the real fd 1 is pointed at stderr so a candidate's `printf` cannot corrupt
//! the protocol.
//!
//! tch holds the problem (reference, input generator, parameters); cudarc gives the candidate its
//! own non-blocking stream, CUDA events and context synchronisation. The protocol (DESIGN.md §4)
//! is implemented in [`Worker::evaluate`].

use std::ffi::c_void;
use std::io::{BufRead, Write};
use std::os::fd::FromRawFd;
use std::path::{Path, PathBuf};
use std::time::Instant;

use cudarc::driver::{result as cu, sys};
use tch::{Device, Kind, Tensor};

use crate::eval::compare::{self, Tolerance};
use crate::eval::protocol::{
    Failure, FailureKind, ProtocolOptions, Stage, Stats, Timing, TrialResult, WorkerEvent,
    WorkerOutcome, WorkerRequest,
};
use crate::problem::{InputGenerator, ProblemBundle, Reference};

/// The ABI version this worker speaks (see src/eval/kforge.h).
pub const ABI_VERSION: i32 = 1;
const MAX_DIMS: usize = 8;

/// `kf_tensor` from kforge.h.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct KfTensor {
    pub data: *mut c_void,
    pub dtype: i32,
    pub ndim: i32,
    pub sizes: [i64; MAX_DIMS],
    pub strides: [i64; MAX_DIMS],
    pub numel: i64,
}

type ForwardFn = unsafe extern "C" fn(
    *const KfTensor,
    i32,
    *const KfTensor,
    i32,
    *mut KfTensor,
    i32,
    sys::CUstream,
) -> i32;
type AbiVersionFn = unsafe extern "C" fn() -> i32;

/// kf_dtype codes (kforge.h).
pub fn kf_dtype(kind: Kind) -> Option<i32> {
    Some(match kind {
        Kind::Float => 0,
        Kind::Half => 1,
        Kind::BFloat16 => 2,
        Kind::Double => 3,
        Kind::Int64 => 4,
        Kind::Int => 5,
        Kind::Int16 => 6,
        Kind::Int8 => 7,
        Kind::Uint8 => 8,
        Kind::Bool => 9,
        _ => return None,
    })
}

fn describe(tensor: &Tensor) -> Result<KfTensor, String> {
    let sizes = tensor.size();
    let strides = tensor.stride();
    if sizes.len() > MAX_DIMS {
        return Err(format!(
            "tensor of rank {} exceeds the ABI's {MAX_DIMS}",
            sizes.len()
        ));
    }
    let dtype = kf_dtype(tensor.kind())
        .ok_or_else(|| format!("dtype {:?} has no kf_dtype", tensor.kind()))?;
    let mut t = KfTensor {
        data: tensor.data_ptr(),
        dtype,
        ndim: sizes.len() as i32,
        sizes: [0; MAX_DIMS],
        strides: [0; MAX_DIMS],
        numel: tensor.numel() as i64,
    };
    t.sizes[..sizes.len()].copy_from_slice(&sizes);
    t.strides[..strides.len()].copy_from_slice(&strides);
    Ok(t)
}

/// A loaded candidate library.
struct Candidate {
    // Kept alive while `forward` may be called.
    _library: libloading::Library,
    forward: ForwardFn,
}

impl Candidate {
    fn load(path: &Path) -> Result<Candidate, String> {
        // SAFETY: loading runs the library's static initialisers; this is the untrusted step the
        // worker process exists to contain.
        let library = unsafe { libloading::Library::new(path) }
            .map_err(|e| format!("cannot load the compiled library: {e}"))?;
        // SAFETY: the symbol types are those kforge.h declares.
        let version =
            unsafe { library.get::<AbiVersionFn>(b"kforge_abi_version") }.map_err(|_| {
                "the library has no kforge_abi_version: include \"kforge.h\"".to_string()
            })?;
        // SAFETY: as above; the function takes no arguments.
        let version = unsafe { version() };
        if version != ABI_VERSION {
            return Err(format!(
                "built against kforge ABI version {version}; this kforge speaks {ABI_VERSION}"
            ));
        }
        // SAFETY: as above.
        let forward = unsafe { library.get::<ForwardFn>(b"kforge_forward") }
            .map(|f| *f)
            .map_err(|_| {
                "the library has no extern \"C\" kforge_forward entry point".to_string()
            })?;
        Ok(Candidate {
            _library: library,
            forward,
        })
    }

    /// Calls the entry point. Returns its status code.
    fn call(
        &self,
        inputs: &[Tensor],
        params: &[Tensor],
        outputs: &[Tensor],
        stream: sys::CUstream,
    ) -> Result<i32, String> {
        let ins = inputs.iter().map(describe).collect::<Result<Vec<_>, _>>()?;
        let ps = params.iter().map(describe).collect::<Result<Vec<_>, _>>()?;
        let mut outs = outputs
            .iter()
            .map(describe)
            .collect::<Result<Vec<_>, _>>()?;
        // SAFETY: the descriptors point at live device tensors owned by the caller for the whole
        // call; the arrays outlive the call. What the candidate does with them is contained by
        // the worker process.
        let status = unsafe {
            (self.forward)(
                ins.as_ptr(),
                ins.len() as i32,
                ps.as_ptr(),
                ps.len() as i32,
                outs.as_mut_ptr(),
                outs.len() as i32,
                stream,
            )
        };
        Ok(status)
    }
}

struct LoadedProblem {
    path: PathBuf,
    bundle: ProblemBundle,
    reference: Reference,
    generator: InputGenerator,
    params: Vec<Tensor>,
    /// Reference outputs per seed, reused across candidates.
    cache: Vec<(i64, Vec<Tensor>, Vec<Tensor>)>,
}

struct Worker {
    device: Device,
    gpu: Option<crate::gpu::GpuInfo>,
    stream: sys::CUstream,
    problem: Option<LoadedProblem>,
    out: std::fs::File,
}

/// A CUDA error as `CUDA_ERROR_ILLEGAL_ADDRESS: an illegal memory access was encountered`.
fn cuda_error_text(err: cu::DriverError) -> String {
    let name = err
        .error_name()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|_| format!("{:?}", err.0));
    let text = err
        .error_string()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    format!("{name}: {text}")
}

fn fail(
    stage: Stage,
    kind: FailureKind,
    message: impl Into<String>,
    trial: Option<u32>,
) -> Failure {
    Failure {
        stage,
        kind,
        message: message.into(),
        trial,
        stderr_tail: None,
    }
}

/// Two poison values per dtype: every element left unwritten equals one of them, so it differs
/// from the reference in at least one of the two calls.
fn poisoned_like(reference: &Tensor, second: bool) -> Tensor {
    let value = match (reference.kind(), second) {
        (Kind::Float | Kind::Double | Kind::Half | Kind::BFloat16, false) => f64::NAN,
        (Kind::Float | Kind::Double | Kind::Half | Kind::BFloat16, true) => f64::INFINITY,
        (Kind::Bool, false) => 1.0,
        (Kind::Bool, true) => 0.0,
        (Kind::Uint8, false) => 255.0,
        (Kind::Int8, false) => 127.0,
        (Kind::Int16, false) => 32767.0,
        (Kind::Int, false) => 2147483647.0,
        (Kind::Int64, false) => 9.2e18,
        (_, true) => -1.0,
        (_, false) => 0.0,
    };
    Tensor::full(
        reference.size(),
        value,
        (reference.kind(), reference.device()),
    )
}

impl Worker {
    fn emit(&mut self, event: &WorkerEvent) {
        let line = serde_json::to_string(event).unwrap_or_else(|e| {
            // Never leave the parent waiting: an answer it can read, saying what went wrong.
            let id = match event {
                WorkerEvent::Done { id, .. } | WorkerEvent::Stage { id, .. } => *id,
                WorkerEvent::Ready { .. } => 0,
            };
            let outcome = WorkerOutcome {
                failure: Some(fail(
                    Stage::Start,
                    FailureKind::Worker,
                    format!("the worker could not encode its answer: {e}"),
                    None,
                )),
                ..WorkerOutcome::default()
            };
            serde_json::to_string(&WorkerEvent::Done {
                id,
                outcome: Box::new(outcome),
            })
            .unwrap_or_default()
        });
        // A parent that went away leaves nothing to report to.
        let _ = writeln!(self.out, "{line}");
        let _ = self.out.flush();
    }

    fn stage(&mut self, id: u64, stage: Stage, trial: Option<u32>) {
        self.emit(&WorkerEvent::Stage { id, stage, trial });
    }

    fn sync_stream(&self) -> Result<(), String> {
        // SAFETY: the stream was created by this worker and lives as long as it does.
        unsafe { cu::stream::synchronize(self.stream) }.map_err(cuda_error_text)
    }

    fn sync_device(&self) -> Result<(), String> {
        cu::ctx::synchronize().map_err(cuda_error_text)
    }

    fn load_problem(&mut self, path: &Path) -> Result<(), String> {
        if self.problem.as_ref().is_some_and(|p| p.path == path) {
            return Ok(());
        }
        self.problem = None;
        let bundle = ProblemBundle::load(path).map_err(|e| e.to_string())?;
        let reference = bundle.reference(self.device).map_err(|e| e.to_string())?;
        let generator = bundle
            .input_generator(self.device)
            .map_err(|e| e.to_string())?;
        let params = reference.parameters();
        self.problem = Some(LoadedProblem {
            path: path.to_path_buf(),
            bundle,
            reference,
            generator,
            params,
            cache: Vec::new(),
        });
        Ok(())
    }

    /// The loaded problem's parameters and buffers (shallow: the same storage).
    fn params(&self) -> Vec<Tensor> {
        self.problem
            .as_ref()
            .map(|p| p.params.iter().map(Tensor::shallow_clone).collect())
            .unwrap_or_default()
    }

    /// Starts answering a request: the outcome to fill, with the problem loaded, or an outcome
    /// that already says why the problem cannot be used.
    fn begin(&mut self, id: u64, bundle: &Path) -> Result<WorkerOutcome, Box<WorkerOutcome>> {
        let mut outcome = WorkerOutcome {
            gpu: self.gpu.clone(),
            ..WorkerOutcome::default()
        };
        self.stage(id, Stage::LoadProblem, None);
        if let Err(e) = self.load_problem(bundle) {
            outcome.failure = Some(fail(Stage::LoadProblem, FailureKind::Problem, e, None));
            return Err(Box::new(outcome));
        }
        Ok(outcome)
    }

    /// Inputs and reference outputs for one seed (cached).
    fn case(&mut self, seed: i64) -> Result<(Vec<Tensor>, Vec<Tensor>), String> {
        let problem = self.problem.as_mut().ok_or("no problem loaded")?;
        if let Some((_, inputs, outputs)) = problem.cache.iter().find(|(s, _, _)| *s == seed) {
            return Ok((
                inputs.iter().map(Tensor::shallow_clone).collect(),
                outputs.iter().map(Tensor::shallow_clone).collect(),
            ));
        }
        let inputs = problem
            .generator
            .generate(seed)
            .map_err(|e| e.to_string())?;
        let outputs = problem.reference.run(&inputs).map_err(|e| e.to_string())?;
        if problem.cache.len() >= 16 {
            problem.cache.remove(0);
        }
        problem.cache.push((
            seed,
            inputs.iter().map(Tensor::shallow_clone).collect(),
            outputs.iter().map(Tensor::shallow_clone).collect(),
        ));
        Ok((inputs, outputs))
    }

    fn evaluate(
        &mut self,
        id: u64,
        bundle: &Path,
        library: &Path,
        options: &ProtocolOptions,
    ) -> WorkerOutcome {
        let mut outcome = match self.begin(id, bundle) {
            Ok(outcome) => outcome,
            Err(outcome) => return *outcome,
        };
        self.stage(id, Stage::LoadCandidate, None);
        let candidate = match Candidate::load(library) {
            Ok(c) => c,
            Err(e) => {
                outcome.failure =
                    Some(fail(Stage::LoadCandidate, FailureKind::BadLibrary, e, None));
                return outcome;
            }
        };
        let trials = options.trials.max(5);
        for trial in 0..trials {
            self.stage(id, Stage::Trial, Some(trial));
            let seed = options.seed + i64::from(trial);
            match self.trial(id, &candidate, trial, seed, options) {
                Ok(result) => {
                    let passed = result.passed;
                    outcome.trials.push(result);
                    // Keep going after a failed trial only to the end of this one: the first
                    // failure is what the Coder needs, and it saves GPU time.
                    if !passed {
                        return outcome;
                    }
                }
                Err((failure, fatal)) => {
                    outcome.failure = Some(failure);
                    outcome.fatal = fatal;
                    return outcome;
                }
            }
        }
        if options.time {
            match self.time(id, &candidate, options) {
                Ok(timing) => outcome.timing = Some(timing),
                Err((failure, fatal)) => {
                    outcome.failure = Some(failure);
                    outcome.fatal = fatal;
                }
            }
        }
        outcome
    }

    /// Runs the candidate once into fresh poisoned outputs, checking status and CUDA errors.
    /// Returns the outputs snapshot taken when the given stream finished and the final outputs.
    fn call_checked(
        &mut self,
        candidate: &Candidate,
        inputs: &[Tensor],
        reference: &[Tensor],
        second_poison: bool,
        stage: Stage,
        trial: u32,
    ) -> Result<(Vec<Tensor>, Vec<Tensor>), (Failure, bool)> {
        let params = self.params();
        let outputs: Vec<Tensor> = reference
            .iter()
            .map(|r| poisoned_like(r, second_poison))
            .collect();
        let on_stream: Vec<Tensor> = outputs.iter().map(Tensor::empty_like).collect();
        // Poisoning runs on PyTorch's stream; finish it before the candidate's stream starts.
        self.sync_device()
            .map_err(|e| (fail(stage, FailureKind::Worker, e, Some(trial)), true))?;
        let status = candidate
            .call(inputs, &params, &outputs, self.stream)
            .map_err(|e| (fail(stage, FailureKind::Worker, e, Some(trial)), false))?;
        // Snapshot the outputs on the candidate's own (non-blocking) stream: the copy waits for
        // the work on that stream only, so results still being written elsewhere show up.
        for (output, snapshot) in outputs.iter().zip(&on_stream) {
            let bytes = output.numel() * output.kind().elt_size_in_bytes();
            // SAFETY: both tensors are live, contiguous device buffers of `bytes` bytes.
            let copied = unsafe {
                cu::memcpy_dtod_async(
                    snapshot.data_ptr() as sys::CUdeviceptr,
                    output.data_ptr() as sys::CUdeviceptr,
                    bytes,
                    self.stream,
                )
            };
            if let Err(e) = copied {
                return Err((
                    fail(
                        stage,
                        FailureKind::CudaError,
                        cuda_error_text(e),
                        Some(trial),
                    ),
                    true,
                ));
            }
        }
        if let Err(e) = self.sync_stream() {
            return Err((fail(stage, FailureKind::CudaError, e, Some(trial)), true));
        }
        if let Err(e) = self.sync_device() {
            return Err((fail(stage, FailureKind::CudaError, e, Some(trial)), true));
        }
        if status != 0 {
            return Err((
                fail(
                    stage,
                    FailureKind::CandidateStatus,
                    format!(
                        "kforge_forward returned {status}{}",
                        cuda_runtime_hint(status)
                    ),
                    Some(trial),
                ),
                false,
            ));
        }
        Ok((on_stream, outputs))
    }

    fn trial(
        &mut self,
        id: u64,
        candidate: &Candidate,
        trial: u32,
        seed: i64,
        options: &ProtocolOptions,
    ) -> Result<TrialResult, (Failure, bool)> {
        let (inputs, reference) = self.case(seed).map_err(|e| {
            (
                fail(Stage::Trial, FailureKind::Problem, e, Some(trial)),
                false,
            )
        })?;
        let pristine: Vec<Tensor> = inputs.iter().map(Tensor::copy).collect();
        let (on_stream, first) =
            self.call_checked(candidate, &inputs, &reference, false, Stage::Trial, trial)?;
        let complete_on_stream = on_stream
            .iter()
            .zip(&first)
            .all(|(a, b)| compare::agreement(a, b, Tolerance::for_kind(b.kind())).0);
        let outputs: Vec<_> = first
            .iter()
            .zip(&reference)
            .enumerate()
            .map(|(i, (c, r))| {
                compare::compare(
                    i,
                    c,
                    r,
                    Tolerance::for_kind(r.kind()).scaled(options.tolerance_scale),
                )
            })
            .collect();
        let names: Vec<String> = self
            .problem
            .as_ref()
            .map(|p| {
                p.bundle
                    .spec
                    .inputs
                    .iter()
                    .map(|i| i.name.clone())
                    .collect()
            })
            .unwrap_or_default();
        let mutated_inputs: Vec<String> = inputs
            .iter()
            .zip(&pristine)
            .enumerate()
            .filter(|(_, (now, before))| {
                !compare::agreement(now, before, Tolerance::for_kind(now.kind())).0
            })
            .map(|(i, _)| {
                names
                    .get(i)
                    .cloned()
                    .unwrap_or_else(|| format!("input {i}"))
            })
            .collect();
        // Restore mutated inputs so the cached case stays the reference's.
        for (now, before) in inputs.iter().zip(&pristine) {
            let mut now = now.shallow_clone();
            now.copy_(before);
        }
        self.stage(id, Stage::Determinism, Some(trial));
        let (_, second) = self.call_checked(
            candidate,
            &inputs,
            &reference,
            true,
            Stage::Determinism,
            trial,
        )?;
        let mut repeat_exact = true;
        let mut repeat_within_tolerance = true;
        for (a, b) in first.iter().zip(&second) {
            let (exact, close) = compare::agreement(
                a,
                b,
                Tolerance::for_kind(a.kind()).scaled(options.tolerance_scale),
            );
            repeat_exact &= exact;
            repeat_within_tolerance &= close;
        }
        let passed = outputs.iter().all(|o| o.passed)
            && mutated_inputs.is_empty()
            && repeat_within_tolerance
            && complete_on_stream;
        Ok(TrialResult {
            trial,
            seed,
            passed,
            outputs,
            mutated_inputs,
            repeat_exact,
            repeat_within_tolerance,
            complete_on_stream,
        })
    }

    /// ≥3 warm-ups and ≥100 timed calls of candidate and reference, interleaved, each after an
    /// L2 flush, rotating input sets; CUDA events on each one's stream plus host wall time
    /// through a device-wide synchronize.
    fn time(
        &mut self,
        id: u64,
        candidate: &Candidate,
        options: &ProtocolOptions,
    ) -> Result<Timing, (Failure, bool)> {
        let sets = options.input_sets.max(1);
        let mut cases = Vec::new();
        for s in 0..sets {
            let seed = options.seed + 10_000 + i64::from(s);
            let (inputs, reference) = self
                .case(seed)
                .map_err(|e| (fail(Stage::Timing, FailureKind::Problem, e, None), false))?;
            let outputs: Vec<Tensor> = reference.iter().map(|r| poisoned_like(r, false)).collect();
            cases.push((inputs, outputs));
        }
        let l2 = self.gpu.as_ref().map(|g| g.l2_bytes).unwrap_or(64 << 20);
        let flush_bytes = (2 * l2).max(1 << 20);
        let flush = Tensor::zeros([flush_bytes as i64], (Kind::Uint8, self.device));
        let params = self.params();
        let events = |stage| -> Result<(sys::CUevent, sys::CUevent), (Failure, bool)> {
            let a = cu::event::create(sys::CUevent_flags::CU_EVENT_DEFAULT).map_err(|e| {
                (
                    fail(stage, FailureKind::Worker, cuda_error_text(e), None),
                    false,
                )
            })?;
            let b = cu::event::create(sys::CUevent_flags::CU_EVENT_DEFAULT).map_err(|e| {
                (
                    fail(stage, FailureKind::Worker, cuda_error_text(e), None),
                    false,
                )
            })?;
            Ok((a, b))
        };
        let (start, end) = events(Stage::Timing)?;
        let null_stream = cu::stream::null();
        let mut cand_ev = Vec::new();
        let mut cand_host = Vec::new();
        let mut ref_ev = Vec::new();
        let mut ref_host = Vec::new();
        let warmups = options.warmups.max(3);
        let calls = options.timed_calls.max(100);
        self.stage(id, Stage::Warmup, None);
        let problem_reference = |w: &Worker, inputs: &[Tensor]| -> Result<(), String> {
            w.problem
                .as_ref()
                .ok_or("no problem loaded")?
                .reference
                .run(inputs)
                .map(|_| ())
                .map_err(|e| e.to_string())
        };
        for i in 0..(warmups + calls) {
            if i == warmups {
                self.stage(id, Stage::Timing, None);
            }
            let stage = if i < warmups {
                Stage::Warmup
            } else {
                Stage::Timing
            };
            let (inputs, outputs) = &cases[(i % sets) as usize];
            // Candidate.
            let _ = flush.shallow_clone().fill_(i64::from(i % 250) + 1);
            self.sync_device()
                .map_err(|e| (fail(stage, FailureKind::CudaError, e, None), true))?;
            let host = Instant::now();
            // SAFETY: events and stream belong to this worker's context.
            unsafe { cu::event::record(start, self.stream) }.map_err(|e| {
                (
                    fail(stage, FailureKind::Worker, cuda_error_text(e), None),
                    false,
                )
            })?;
            let status = candidate
                .call(inputs, &params, outputs, self.stream)
                .map_err(|e| (fail(stage, FailureKind::Worker, e, None), false))?;
            // SAFETY: as above.
            unsafe { cu::event::record(end, self.stream) }.map_err(|e| {
                (
                    fail(stage, FailureKind::Worker, cuda_error_text(e), None),
                    false,
                )
            })?;
            self.sync_device()
                .map_err(|e| (fail(stage, FailureKind::CudaError, e, None), true))?;
            let host_ms = host.elapsed().as_secs_f64() * 1e3;
            if status != 0 {
                return Err((
                    fail(
                        stage,
                        FailureKind::CandidateStatus,
                        format!("kforge_forward returned {status}"),
                        None,
                    ),
                    false,
                ));
            }
            // SAFETY: both events completed (device synchronized above).
            let ev_ms = unsafe { cu::event::elapsed(start, end) }.map_err(|e| {
                (
                    fail(stage, FailureKind::Worker, cuda_error_text(e), None),
                    false,
                )
            })?;
            // Reference, same protocol, on PyTorch's stream.
            let _ = flush.shallow_clone().fill_(i64::from(i % 250) + 2);
            self.sync_device()
                .map_err(|e| (fail(stage, FailureKind::CudaError, e, None), true))?;
            let rhost = Instant::now();
            // SAFETY: recording on the legacy default stream, which PyTorch uses here.
            unsafe { cu::event::record(start, null_stream) }.map_err(|e| {
                (
                    fail(stage, FailureKind::Worker, cuda_error_text(e), None),
                    false,
                )
            })?;
            problem_reference(self, inputs)
                .map_err(|e| (fail(stage, FailureKind::Problem, e, None), false))?;
            // SAFETY: as above.
            unsafe { cu::event::record(end, null_stream) }.map_err(|e| {
                (
                    fail(stage, FailureKind::Worker, cuda_error_text(e), None),
                    false,
                )
            })?;
            self.sync_device()
                .map_err(|e| (fail(stage, FailureKind::CudaError, e, None), true))?;
            let rhost_ms = rhost.elapsed().as_secs_f64() * 1e3;
            // SAFETY: both events completed.
            let rev_ms = unsafe { cu::event::elapsed(start, end) }.map_err(|e| {
                (
                    fail(stage, FailureKind::Worker, cuda_error_text(e), None),
                    false,
                )
            })?;
            if i >= warmups {
                cand_ev.push(f64::from(ev_ms));
                cand_host.push(host_ms);
                ref_ev.push(f64::from(rev_ms));
                ref_host.push(rhost_ms);
            }
        }
        // SAFETY: the events are no longer used.
        unsafe {
            let _ = cu::event::destroy(start);
            let _ = cu::event::destroy(end);
        }
        let stats = |v: &[f64]| {
            Stats::of(v).ok_or_else(|| {
                (
                    fail(Stage::Timing, FailureKind::Worker, "no timed calls", None),
                    false,
                )
            })
        };
        Ok(Timing {
            candidate: stats(&cand_ev)?,
            candidate_host: stats(&cand_host)?,
            reference: stats(&ref_ev)?,
            reference_host: stats(&ref_host)?,
            warmups,
            input_sets: sets,
            l2_flush_bytes: flush_bytes,
        })
    }

    fn profile(
        &mut self,
        id: u64,
        bundle: &Path,
        library: Option<&Path>,
        warmups: u32,
        seed: i64,
    ) -> WorkerOutcome {
        let mut outcome = match self.begin(id, bundle) {
            Ok(outcome) => outcome,
            Err(outcome) => return *outcome,
        };
        let candidate = match library.map(Candidate::load).transpose() {
            Ok(c) => c,
            Err(e) => {
                outcome.failure =
                    Some(fail(Stage::LoadCandidate, FailureKind::BadLibrary, e, None));
                return outcome;
            }
        };
        let (inputs, reference) = match self.case(seed) {
            Ok(c) => c,
            Err(e) => {
                outcome.failure = Some(fail(Stage::LoadProblem, FailureKind::Problem, e, None));
                return outcome;
            }
        };
        let params = self.params();
        let outputs: Vec<Tensor> = reference.iter().map(|r| poisoned_like(r, false)).collect();
        let run_once = |w: &Worker| -> Result<(), String> {
            match &candidate {
                Some(c) => {
                    let status = c.call(&inputs, &params, &outputs, w.stream)?;
                    if status != 0 {
                        return Err(format!("kforge_forward returned {status}"));
                    }
                }
                None => {
                    w.problem
                        .as_ref()
                        .ok_or("no problem loaded")?
                        .reference
                        .run(&inputs)
                        .map_err(|e| e.to_string())?;
                }
            }
            w.sync_device()
        };
        self.stage(id, Stage::Warmup, None);
        for _ in 0..warmups.max(1) {
            if let Err(e) = run_once(self) {
                outcome.failure = Some(fail(Stage::Warmup, FailureKind::CudaError, e, None));
                outcome.fatal = true;
                return outcome;
            }
        }
        self.stage(id, Stage::Profile, None);
        // SAFETY: profiler start/stop only bracket the call for ncu; harmless without ncu.
        unsafe {
            let _ = sys::cuProfilerStart();
        }
        let result = run_once(self);
        // SAFETY: as above.
        unsafe {
            let _ = sys::cuProfilerStop();
        }
        if let Err(e) = result {
            outcome.failure = Some(fail(Stage::Profile, FailureKind::CudaError, e, None));
            outcome.fatal = true;
        }
        outcome
    }

    fn handle(&mut self, request: &WorkerRequest) -> WorkerOutcome {
        let _guard = tch::no_grad_guard();
        match request {
            WorkerRequest::Evaluate {
                id,
                bundle,
                library,
                options,
            } => self.evaluate(*id, bundle, library, options),
            WorkerRequest::Profile {
                id,
                bundle,
                library,
                warmups,
                seed,
            } => self.profile(*id, bundle, library.as_deref(), *warmups, *seed),
        }
    }
}

/// Names a CUDA runtime error code when a candidate returned one (KF_CHECK returns cudaError_t).
fn cuda_runtime_hint(status: i32) -> &'static str {
    match status {
        1 => " (cudaErrorInvalidValue)",
        2 => " (cudaErrorMemoryAllocation)",
        9 => " (cudaErrorInvalidConfiguration: bad grid or block size)",
        98 => " (cudaErrorInvalidDeviceFunction: kernel not built for this GPU)",
        209 => " (cudaErrorNoKernelImageForDevice: kernel not built for this GPU)",
        700 => " (cudaErrorIllegalAddress)",
        701 => " (cudaErrorLaunchOutOfResources: too many registers or threads)",
        _ => "",
    }
}

/// Sets up CUDA, tch and the protocol channel. Errors here are the worker's, not a candidate's.
fn start() -> Result<Worker, String> {
    // The protocol gets a private copy of stdout; fd 1 becomes stderr for everything else.
    // SAFETY: dup/dup2 on the process's own standard descriptors at start-up, before any thread
    // writes to them.
    let protocol_fd = unsafe { libc::dup(1) };
    if protocol_fd < 0 {
        return Err("cannot duplicate stdout".into());
    }
    // SAFETY: as above.
    unsafe {
        libc::dup2(2, 1);
    }
    // SAFETY: protocol_fd is a fresh descriptor owned by nothing else.
    let out = unsafe { std::fs::File::from_raw_fd(protocol_fd) };
    // Reference timing must be eager-like: TorchScript's optimisations fuse and would make the
    // reference look faster than eager (DESIGN.md §4).
    tch::jit::set_graph_executor_optimize(false);
    tch::jit::set_profiling_mode(false);
    tch::jit::set_tensor_expr_fuser_enabled(false);
    let gpus = crate::gpu::list().map_err(|e| format!("the worker needs a GPU: {e}"))?;
    if !tch::Cuda::is_available() {
        return Err("libtorch sees no CUDA (is torch's lib/ on LD_LIBRARY_PATH?)".into());
    }
    let device = Device::Cuda(0);
    // Create PyTorch's CUDA context first (the primary context), then make it current for the
    // driver calls below.
    let _ = Tensor::zeros([1], (Kind::Float, device));
    let dev = cu::device::get(0).map_err(cuda_error_text)?;
    // SAFETY: dev came from cuDeviceGet; the primary context is the one the runtime uses.
    let ctx = unsafe { cu::primary_ctx::retain(dev) }.map_err(cuda_error_text)?;
    // SAFETY: ctx is a live primary context.
    unsafe { cu::ctx::set_current(ctx) }.map_err(cuda_error_text)?;
    let stream =
        cu::stream::create(cu::stream::StreamKind::NonBlocking).map_err(cuda_error_text)?;
    Ok(Worker {
        device,
        gpu: gpus.into_iter().next(),
        stream,
        problem: None,
        out,
    })
}

/// `kforge worker`: serve requests from stdin until it closes. With `request`, serve that one
/// request from a file and write the outcome to `result` (profile mode under ncu).
/// A worker whose parent is gone (a run killed with SIGKILL) must not keep measuring on the GPU
/// that the resumed run will use: the kernel kills it when its parent dies. (kforge spawns the
/// worker from a runtime thread that lives as long as the parent process.)
fn die_with_parent() {
    // SAFETY: prctl(PR_SET_PDEATHSIG) takes a signal number and touches no memory.
    unsafe {
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
    }
    // The parent may have died before the call: then this process was already re-parented.
    // SAFETY: getppid has no preconditions.
    if unsafe { libc::getppid() } == 1 {
        std::process::exit(3);
    }
}

pub fn main(request: Option<PathBuf>, result: Option<PathBuf>) -> std::process::ExitCode {
    // Not under ncu (profile mode): there the parent is ncu's launcher, whose forking thread
    // may end before the profile does, and the death signal follows the thread.
    if request.is_none() {
        die_with_parent();
    }
    let mut worker = match start() {
        Ok(w) => w,
        Err(e) => {
            let outcome = WorkerOutcome {
                failure: Some(fail(Stage::Start, FailureKind::Worker, e.clone(), None)),
                fatal: true,
                ..WorkerOutcome::default()
            };
            if let Some(path) = &result {
                let _ = std::fs::write(path, serde_json::to_string(&outcome).unwrap_or_default());
            } else {
                println!(
                    "{}",
                    serde_json::to_string(&WorkerEvent::Done {
                        id: 0,
                        outcome: Box::new(outcome)
                    })
                    .unwrap_or_default()
                );
            }
            eprintln!("kforge worker: {e}");
            return std::process::ExitCode::from(3);
        }
    };
    if let (Some(request), Some(result)) = (request, result) {
        let outcome = match std::fs::read_to_string(&request)
            .map_err(|e| e.to_string())
            .and_then(|t| serde_json::from_str::<WorkerRequest>(&t).map_err(|e| e.to_string()))
        {
            Ok(req) => worker.handle(&req),
            Err(e) => WorkerOutcome {
                failure: Some(fail(
                    Stage::Start,
                    FailureKind::Worker,
                    format!("bad request file: {e}"),
                    None,
                )),
                ..WorkerOutcome::default()
            },
        };
        let _ = std::fs::write(&result, serde_json::to_string(&outcome).unwrap_or_default());
        return std::process::ExitCode::SUCCESS;
    }
    let ready = WorkerEvent::Ready {
        pid: std::process::id(),
        gpu: worker.gpu.clone(),
    };
    worker.emit(&ready);
    let stdin = std::io::stdin();
    for line in stdin.lock().lines() {
        let Ok(line) = line else { break };
        if line.trim().is_empty() {
            continue;
        }
        let request: WorkerRequest = match serde_json::from_str(&line) {
            Ok(r) => r,
            Err(e) => {
                let outcome = WorkerOutcome {
                    failure: Some(fail(
                        Stage::Start,
                        FailureKind::Worker,
                        format!("bad request: {e}"),
                        None,
                    )),
                    ..WorkerOutcome::default()
                };
                worker.emit(&WorkerEvent::Done {
                    id: 0,
                    outcome: Box::new(outcome),
                });
                continue;
            }
        };
        let outcome = worker.handle(&request);
        let fatal = outcome.fatal;
        worker.emit(&WorkerEvent::Done {
            id: request.id(),
            outcome: Box::new(outcome),
        });
        if fatal {
            // A sticky CUDA error poisons the context: exit so the parent starts a fresh worker.
            return std::process::ExitCode::from(4);
        }
    }
    std::process::ExitCode::SUCCESS
}
