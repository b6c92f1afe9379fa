//! The JSON-lines protocol between kforge and its GPU worker (`kforge worker`), and the parts of
//! the result document the worker fills in. One request per line on the worker's stdin; the
//! worker answers with `stage` events as it goes (so a crash or hang can be pinned to a stage)
//! and one `done` line per request.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::compare::OutputComparison;

/// The evaluation protocol's knobs (DESIGN.md §4); the defaults are the protocol's minimums.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ProtocolOptions {
    /// Correctness trials, each on fresh inputs (≥5).
    pub trials: u32,
    /// Seed of the first trial; trial i uses seed + i.
    pub seed: i64,
    /// Multiplies the per-dtype tolerances.
    pub tolerance_scale: f64,
    /// Skip timing (correctness only).
    pub time: bool,
    pub warmups: u32,
    pub timed_calls: u32,
    /// Input sets rotated through the timed calls, so no call hits warm caches.
    pub input_sets: u32,
}

impl Default for ProtocolOptions {
    fn default() -> Self {
        ProtocolOptions {
            trials: 5,
            seed: 1000,
            tolerance_scale: 1.0,
            time: true,
            warmups: 3,
            timed_calls: 100,
            input_sets: 4,
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum WorkerRequest {
    /// Verify (and time) one compiled candidate against a bundle's reference.
    Evaluate {
        id: u64,
        bundle: PathBuf,
        library: PathBuf,
        options: ProtocolOptions,
    },
    /// Profile mode: warm up, then call the candidate (or the reference when `library` is
    /// None) once between cuProfilerStart and cuProfilerStop, for ncu.
    Profile {
        id: u64,
        bundle: PathBuf,
        library: Option<PathBuf>,
        warmups: u32,
        seed: i64,
    },
}

impl WorkerRequest {
    pub fn id(&self) -> u64 {
        match self {
            WorkerRequest::Evaluate { id, .. } | WorkerRequest::Profile { id, .. } => *id,
        }
    }
}

/// Where an evaluation is; reported before each step starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Stage {
    Compile,
    Start,
    LoadProblem,
    LoadCandidate,
    Trial,
    Determinism,
    Warmup,
    Timing,
    Profile,
}

impl std::fmt::Display for Stage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let text = match self {
            Stage::Compile => "compile",
            Stage::Start => "worker start",
            Stage::LoadProblem => "loading the problem",
            Stage::LoadCandidate => "loading the candidate",
            Stage::Trial => "correctness trial",
            Stage::Determinism => "determinism check",
            Stage::Warmup => "warm-up",
            Stage::Timing => "timing",
            Stage::Profile => "profiling",
        };
        f.write_str(text)
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum WorkerEvent {
    Ready {
        pid: u32,
        gpu: Option<crate::gpu::GpuInfo>,
    },
    Stage {
        id: u64,
        stage: Stage,
        #[serde(default)]
        trial: Option<u32>,
    },
    Done {
        id: u64,
        outcome: Box<WorkerOutcome>,
    },
}

/// Why a candidate did not run to the end.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FailureKind {
    /// The entry point returned non-zero.
    CandidateStatus,
    /// A CUDA error (illegal address, launch failure, ...), with its name in the message.
    CudaError,
    /// The library lacks `kforge_forward` or was built for another ABI version.
    BadLibrary,
    /// The worker process died (signal).
    Crashed,
    /// The worker process exited on its own (the candidate called exit()).
    Exited,
    /// A stage ran past its time limit.
    Timeout,
    /// The problem bundle could not be used (not the candidate's fault).
    Problem,
    /// The worker itself failed (not the candidate's fault).
    Worker,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Failure {
    pub stage: Stage,
    pub kind: FailureKind,
    pub message: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trial: Option<u32>,
    /// Worker's stderr tail where the worker died (signal, abort message).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stderr_tail: Option<String>,
}

/// One correctness trial.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrialResult {
    pub trial: u32,
    pub seed: i64,
    pub passed: bool,
    pub outputs: Vec<OutputComparison>,
    /// Names of inputs the candidate changed.
    pub mutated_inputs: Vec<String>,
    /// Second call on the same inputs: bitwise equal / within tolerance.
    pub repeat_exact: bool,
    pub repeat_within_tolerance: bool,
    /// Whether the outputs were complete when the given stream finished (not only after a
    /// device-wide synchronize): false means work ran on another stream.
    pub complete_on_stream: bool,
}

/// Summary statistics of one series of timed calls, in milliseconds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Stats {
    pub median: f64,
    pub mean: f64,
    pub min: f64,
    pub max: f64,
    pub stddev: f64,
    pub count: usize,
}

impl Stats {
    pub fn of(samples: &[f64]) -> Option<Stats> {
        if samples.is_empty() {
            return None;
        }
        let mut sorted = samples.to_vec();
        sorted.sort_by(f64::total_cmp);
        let n = sorted.len();
        let median = if n % 2 == 1 {
            sorted[n / 2]
        } else {
            (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0
        };
        let mean = sorted.iter().sum::<f64>() / n as f64;
        let var = sorted.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n as f64;
        Some(Stats {
            median,
            mean,
            min: sorted[0],
            max: sorted[n - 1],
            stddev: var.sqrt(),
            count: n,
        })
    }
}

/// Timing of the candidate and the reference, interleaved in one session.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Timing {
    /// CUDA-event time on the candidate's stream.
    pub candidate: Stats,
    /// Host wall time per call including a device-wide synchronize.
    pub candidate_host: Stats,
    pub reference: Stats,
    pub reference_host: Stats,
    pub warmups: u32,
    pub input_sets: u32,
    pub l2_flush_bytes: u64,
}

/// What the worker reports for one request.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct WorkerOutcome {
    pub failure: Option<Failure>,
    pub trials: Vec<TrialResult>,
    pub timing: Option<Timing>,
    /// The worker's CUDA context is unusable after this request (sticky CUDA error): the
    /// worker exits after answering and is restarted for the next request.
    pub fatal: bool,
    pub gpu: Option<crate::gpu::GpuInfo>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stats_of_samples() {
        let s = Stats::of(&[3.0, 1.0, 2.0, 4.0]).unwrap();
        assert_eq!(s.median, 2.5);
        assert_eq!(s.min, 1.0);
        assert_eq!(s.max, 4.0);
        assert_eq!(s.count, 4);
        assert!(Stats::of(&[]).is_none());
    }

    #[test]
    fn requests_round_trip_as_json_lines() {
        let req = WorkerRequest::Evaluate {
            id: 7,
            bundle: "b".into(),
            library: "l.so".into(),
            options: ProtocolOptions::default(),
        };
        let line = serde_json::to_string(&req).unwrap();
        assert!(line.contains("\"op\":\"evaluate\""));
        let back: WorkerRequest = serde_json::from_str(&line).unwrap();
        assert_eq!(back.id(), 7);
    }
}
