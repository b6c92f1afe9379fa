//! Shared pieces of the agents' tests: one realistic run (LayerNorm over 8192×16384 fp32 on an
//! H200, from `tests/fixtures/agents/`), the kernels and evaluation results of its nodes, what the
//! search says was tried around them, and a readable form of a request for snapshots.

#![allow(dead_code)] // each test binary uses its own subset of these helpers

use std::path::PathBuf;

use kforge::agents::{Candidate, History, Profile, RunContext};
use kforge::eval::CandidateResult;
use kforge::gpu::GpuInfo;
use kforge::llm::{ChatRequest, Role};
use kforge::problem::{Baseline, ProblemSpec};
use kforge::search::{NodeId, TriedResult, TriedStrategy};

fn fixture_path(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

pub fn text(name: &str) -> String {
    let path = fixture_path(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn json<T: serde::de::DeserializeOwned>(name: &str) -> T {
    serde_json::from_str(&text(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// The fixtures of one run and its nodes.
pub struct Fixtures {
    pub problem: ProblemSpec,
    pub baseline: Baseline,
    pub gpu: GpuInfo,
    /// One block per row, three passes over the row: correct, slower than PyTorch.
    pub correct_code: String,
    pub correct: CandidateResult,
    pub correct_ncu: String,
    /// Two rows per block with the second row's input offset wrong: incorrect.
    pub two_rows_code: String,
    pub two_rows: CandidateResult,
    /// The row cached in 64 KiB of dynamic shared memory without opting in: the launch fails.
    pub smem_row_code: String,
    pub smem_row: CandidateResult,
    /// float4 arithmetic without operators for float4: does not compile.
    pub float4_code: String,
    pub float4: CandidateResult,
}

impl Fixtures {
    pub fn load() -> Fixtures {
        Fixtures {
            problem: json("agents/problem.json"),
            baseline: json("agents/baseline.json"),
            gpu: json("agents/gpu.json"),
            correct_code: text("candidates/layernorm_rows_correct.cu"),
            correct: json("agents/eval_correct.json"),
            correct_ncu: text("agents/ncu_view_correct.txt"),
            two_rows_code: text("agents/layernorm_two_rows.cu"),
            two_rows: json("agents/eval_two_rows_incorrect.json"),
            smem_row_code: text("agents/layernorm_smem_row.cu"),
            smem_row: json("agents/eval_smem_row_runtime_error.json"),
            float4_code: text("agents/layernorm_float4_compile_error.cu"),
            float4: json("agents/eval_float4_compile_error.json"),
        }
    }

    /// The run on the H200 with its baseline.
    pub fn run(&self) -> RunContext<'_> {
        RunContext {
            problem: &self.problem,
            arch: "sm_90",
            gpu: Some(&self.gpu),
            baseline: Some(&self.baseline),
        }
    }

    /// The same problem on a machine without a GPU.
    pub fn compile_only_run(&self) -> RunContext<'_> {
        RunContext {
            problem: &self.problem,
            arch: "sm_90",
            gpu: None,
            baseline: None,
        }
    }

    pub fn correct(&self) -> Candidate<'_> {
        Candidate {
            code: &self.correct_code,
            result: &self.correct,
            profile: Profile::Profiled(&self.correct_ncu),
        }
    }

    pub fn two_rows(&self) -> Candidate<'_> {
        Candidate {
            code: &self.two_rows_code,
            result: &self.two_rows,
            profile: Profile::NotProfiled {
                reason: "the kernel is incorrect",
            },
        }
    }

    pub fn smem_row(&self) -> Candidate<'_> {
        Candidate {
            code: &self.smem_row_code,
            result: &self.smem_row,
            profile: Profile::NotProfiled {
                reason: "the kernel failed at run time",
            },
        }
    }

    pub fn float4(&self) -> Candidate<'_> {
        Candidate {
            code: &self.float4_code,
            result: &self.float4,
            profile: Profile::NotProfiled {
                reason: "the kernel does not compile",
            },
        }
    }
}

pub fn tried(node: u32, strategy: &str, result: TriedResult, best: Option<f64>) -> TriedStrategy {
    TriedStrategy {
        node: NodeId(node),
        strategy: strategy.into(),
        result,
        best_speedup_in_subtree: best,
    }
}

/// The first kernel (node 1) as a child of the reference.
pub fn path_to_correct() -> Vec<TriedStrategy> {
    vec![tried(
        1,
        "One block of 1024 threads per row; mean and variance from block-wide warp-shuffle \
         reductions, then a third pass writes the output",
        TriedResult::Correct {
            speedup: 0.7696,
            fraction_of_sol: Some(0.4791),
        },
        Some(1.0412),
    )]
}

/// What node 1's other children already tried.
pub fn children_of_correct() -> Vec<TriedStrategy> {
    vec![
        tried(
            2,
            "Load x, weight and bias as float4 in all three passes (16384 columns are a \
             multiple of 4)",
            TriedResult::Correct {
                speedup: 1.0412,
                fraction_of_sol: Some(0.6482),
            },
            Some(1.0412),
        ),
        tried(
            3,
            "Cache the row in 64 KiB of dynamic shared memory so x is read from DRAM once",
            TriedResult::Failed {
                reason: "runtime_error during correctness trial: kforge_forward returned 1 \
                         (cudaErrorInvalidValue)"
                    .into(),
            },
            None,
        ),
        tried(
            4,
            "Welford's single-pass mean and variance",
            TriedResult::Pending,
            None,
        ),
    ]
}

/// The path to the failed shared-memory kernel (node 3), which ends with it.
pub fn path_to_smem_row() -> Vec<TriedStrategy> {
    let mut path = path_to_correct();
    path.push(children_of_correct().remove(1));
    path
}

pub fn history<'a>(siblings: &'a [TriedStrategy], ancestors: &'a [TriedStrategy]) -> History<'a> {
    History {
        siblings,
        ancestors,
    }
}

/// A request as a person reads it: the system prompt, then each turn under its role.
pub fn show(request: &ChatRequest) -> String {
    let mut out = String::new();
    if let Some(system) = &request.system {
        out.push_str("=== system ===\n");
        out.push_str(system);
        out.push('\n');
    }
    for message in &request.messages {
        out.push_str(match message.role {
            Role::User => "=== user ===\n",
            Role::Assistant => "=== assistant ===\n",
        });
        out.push_str(&message.content);
        out.push('\n');
    }
    out
}
