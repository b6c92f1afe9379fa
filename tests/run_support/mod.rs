//! A simulated world for the orchestrator's tests: scripted models that answer by node (the
//! Judge prescribes edits named after the node's path, the Coder writes a kernel that carries
//! its path), a simulated evaluator that scores a kernel by its path on a landscape, and a
//! frozen clock, so a run is a pure function of its settings. Kills are simulated by a call (or
//! an evaluation) that never returns and signals the test to drop the run.

#![allow(dead_code)] // each test binary uses its own subset of these helpers

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use kforge::eval::{CandidateResult, Status};
use kforge::gpu::GpuInfo;
use kforge::llm::{
    Agent, ChatRequest, LlmClient, LlmError, LlmFuture, ModelSpec, PriceTable, Sampling,
    ScriptedClient, ScriptedReply, Usage,
};
use kforge::problem::{ProblemBundle, ProblemSpec};
use kforge::run::evaluator::{BoxFuture, Evaluated, Evaluator, ProfileRecord};
use kforge::run::models::{CallSite, CoderStep, Models, NodeRef};
use kforge::run::progress::Style;
use kforge::run::records::RunHeader;
use kforge::run::{Clock, RunSetup};
use kforge::search::SearchConfig;
use tokio::sync::Notify;

fn fixture(name: &str) -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Tokens every scripted reply reports: 1000 in, 500 out.
pub const CALL_USAGE: Usage = Usage {
    input_tokens: 1000,
    cached_input_tokens: 0,
    cache_write_input_tokens: 0,
    output_tokens: 500,
    reasoning_tokens: 0,
};
/// A priced model, so dollars are counted.
pub const MODEL: &str = "openai:gpt-4o";

/// A path from the reference: optimization ranks (0-based) and `r` for repairs.
pub fn path_of(code: &str) -> String {
    code.lines()
        .find_map(|l| l.strip_prefix("// path: "))
        .unwrap_or("")
        .trim()
        .to_string()
}

fn kernel(path: &str) -> String {
    format!(
        "#include \"kforge.h\"\n// path: {path}\nextern \"C\" int kforge_forward(const kf_tensor *inputs, int num_inputs, const kf_tensor *params, int num_params, kf_tensor *outputs, int num_outputs, cudaStream_t stream) {{\n    return 0;\n}}\n"
    )
}

/// The landscape: its speedup for a path, or why that kernel fails.
pub type Landscape = fn(&[&str]) -> Result<f64, String>;

/// The first prescription from the reference leads to a dead end (every edit after it is
/// slower); the second starts slower and keeps improving; the third does not compile until
/// repaired.
pub fn dead_end(path: &[&str]) -> Result<f64, String> {
    let depth = path.len() as i32;
    match path.first().copied() {
        Some("0") => Ok(1.3 * 0.9f64.powi(depth - 1)),
        Some("1") => Ok(1.1 * 1.45f64.powi(depth - 1)),
        Some("2") if path.len() == 1 => Err("error: identifier \"tile\" is undefined".into()),
        Some("2") if path.get(1) == Some(&"r") => Ok(1.05 * 1.1f64.powi(depth - 2)),
        Some("2") => Err("still broken".into()),
        _ => Ok(1.0),
    }
}

fn split(path: &str) -> Vec<&str> {
    path.split('.').filter(|s| !s.is_empty()).collect()
}

/// Counts and kill switches shared by the models and the evaluator of one test run.
#[derive(Default)]
pub struct World {
    /// LLM calls answered.
    pub calls: AtomicUsize,
    /// Evaluations finished.
    pub evaluations: AtomicUsize,
    /// The call (1-based) that never returns and fires `killed`.
    pub kill_at_call: Option<usize>,
    pub kill_at_evaluation: Option<usize>,
    pub killed: Notify,
    /// When set, calls about nodes this deep or deeper report as many prompt tokens as their
    /// prompt has bytes (the most a byte-level tokenizer can give), shallower ones a twentieth:
    /// an expansion can then cost far more than any before it.
    pub expensive_from_depth: Option<u64>,
    started_calls: AtomicUsize,
    started_evaluations: AtomicUsize,
}

impl World {
    /// A world whose deep calls cost far more (see `expensive_from_depth`).
    pub fn expensive_from(depth: u64) -> Arc<World> {
        Arc::new(World {
            expensive_from_depth: Some(depth),
            ..World::default()
        })
    }

    pub fn new(kill_at_call: Option<usize>, kill_at_evaluation: Option<usize>) -> Arc<World> {
        Arc::new(World {
            kill_at_call,
            kill_at_evaluation,
            ..World::default()
        })
    }
}

/// Replies by node, with `CALL_USAGE` each (or by depth, see `World::expensive_from_depth`).
pub struct PathModels {
    pub world: Arc<World>,
    /// Prescriptions per Judge verdict.
    pub width: usize,
}

fn judge_optimize(path: &str, width: usize) -> String {
    let prescriptions: Vec<String> = (0..width)
        .map(|i| {
            format!(
                r#"{{"rank": {}, "edit": "edit {path}/{i}", "rationale": "it should help", "prediction": "time -{}%"}}"#,
                i + 1,
                10 + i
            )
        })
        .collect();
    format!(
        r#"{{"bottleneck": {{"diagnosis": "memory-bound at {path}", "evidence": [{{"metric": "DRAM throughput", "value": "50%"}}]}}, "prescriptions": [{}]}}"#,
        prescriptions.join(", ")
    )
}

fn judge_repair(path: &str) -> String {
    format!(r#"{{"critical_issue": "the kernel at {path} fails", "fix": "fix {path}"}}"#)
}

struct OneReply {
    world: Arc<World>,
    spec: ModelSpec,
    text: String,
    /// Depth of the node the call is about.
    depth: u64,
}

impl OneReply {
    /// `CALL_USAGE`, or what `World::expensive_from_depth` says.
    fn usage(&self, request: &ChatRequest) -> Usage {
        let Some(from) = self.world.expensive_from_depth else {
            return CALL_USAGE;
        };
        let bytes = request.system.as_deref().map_or(0, str::len)
            + request
                .messages
                .iter()
                .map(|m| m.content.len())
                .sum::<usize>();
        let bytes = bytes as u64;
        Usage {
            input_tokens: if self.depth >= from {
                bytes
            } else {
                bytes / 20
            },
            ..CALL_USAGE
        }
    }
}

impl LlmClient for OneReply {
    fn complete<'a>(&'a self, request: &'a ChatRequest) -> LlmFuture<'a> {
        Box::pin(async move {
            let number = self.world.started_calls.fetch_add(1, Ordering::SeqCst) + 1;
            if self.world.kill_at_call == Some(number) {
                self.world.killed.notify_one();
                std::future::pending::<()>().await;
            }
            // Let other jobs run between calls, as real calls would.
            tokio::task::yield_now().await;
            let reply = ScriptedReply::text(self.text.clone()).with_usage(self.usage(request));
            let response = ScriptedClient::new(self.spec.clone(), [Ok(reply)])
                .complete(request)
                .await;
            self.world.calls.fetch_add(1, Ordering::SeqCst);
            response
        })
    }

    fn spec(&self) -> &ModelSpec {
        &self.spec
    }
}

impl Models for PathModels {
    fn client(&self, agent: Agent, site: &CallSite<'_>) -> Result<Arc<dyn LlmClient>, LlmError> {
        let path_of_node = |node: &NodeRef<'_>| match node {
            NodeRef::Reference => String::new(),
            NodeRef::Kernel { code } => path_of(code),
        };
        let text = match (agent, site) {
            (Agent::Judge, CallSite::Judge { node, repair }) => {
                let path = path_of_node(node);
                if *repair {
                    judge_repair(&path)
                } else {
                    judge_optimize(&path, self.width)
                }
            }
            (Agent::Coder, CallSite::Coder { parent, step }) => {
                let parent = path_of_node(parent);
                let step = match step {
                    CoderStep::Prescription { index } => index.to_string(),
                    CoderStep::Repair => "r".to_string(),
                };
                let path = if parent.is_empty() {
                    step
                } else {
                    format!("{parent}.{step}")
                };
                format!("Here it is.\n\n```cuda\n{}```\n", kernel(&path))
            }
            _ => panic!("a call site of the other agent"),
        };
        let depth = match site {
            CallSite::Judge { node, .. } => split(&path_of_node(node)).len(),
            CallSite::Coder { parent, .. } => split(&path_of_node(parent)).len() + 1,
        } as u64;
        Ok(Arc::new(OneReply {
            world: self.world.clone(),
            spec: ModelSpec::parse(MODEL).unwrap(),
            text,
            depth,
        }))
    }

    fn name(&self, _agent: Agent) -> String {
        MODEL.into()
    }

    fn scripted_label(&self) -> Option<String> {
        None
    }
}

/// Scores kernels by their path on a landscape; kernels are "profiled" with a view naming
/// their path, so prompts can be checked to show the right node's profile.
pub struct PathEvaluator {
    pub world: Arc<World>,
    pub landscape: Landscape,
    pub template: CandidateResult,
    pub gpu: GpuInfo,
}

impl Evaluator for PathEvaluator {
    fn evaluate<'a>(
        &'a self,
        source: &'a str,
        _node_dir: &'a Path,
    ) -> BoxFuture<'a, Result<Evaluated, String>> {
        Box::pin(async move {
            let number = self
                .world
                .started_evaluations
                .fetch_add(1, Ordering::SeqCst)
                + 1;
            if self.world.kill_at_evaluation == Some(number) {
                self.world.killed.notify_one();
                std::future::pending::<()>().await;
            }
            tokio::task::yield_now().await;
            let path = path_of(source);
            let mut result = self.template.clone();
            let profile = match (self.landscape)(&split(&path)) {
                Ok(speedup) => {
                    result.status = Status::Correct;
                    result.summary = format!("correct; {speedup:.3}× the reference");
                    if let Some(s) = result.speedup.as_mut() {
                        s.vs_reference = speedup;
                        s.vs_eager = Some(speedup);
                    }
                    result.fraction_of_speed_of_light = Some((speedup / 10.0).min(1.0));
                    Some(ProfileRecord {
                        profiled: true,
                        judge_view: Some(format!("simulated profile of path {path}\n")),
                        ..ProfileRecord::default()
                    })
                }
                Err(why) => {
                    result.status = Status::CompileError;
                    result.summary = why;
                    result.speedup = None;
                    result.timing = None;
                    result.fraction_of_speed_of_light = None;
                    result.trials.clear();
                    result.compile.ok = false;
                    None
                }
            };
            self.world.evaluations.fetch_add(1, Ordering::SeqCst);
            Ok(Evaluated { result, profile })
        })
    }

    fn profile_reference<'a>(&'a self, _node_dir: &'a Path) -> BoxFuture<'a, ProfileRecord> {
        Box::pin(async {
            ProfileRecord {
                profiled: true,
                judge_view: Some("simulated profile of the reference\n".into()),
                ..ProfileRecord::default()
            }
        })
    }

    fn gpu(&self) -> Option<&GpuInfo> {
        Some(&self.gpu)
    }

    fn arch(&self) -> String {
        "sm_90".into()
    }
}

/// Time stands still: every cost's seconds are 0, so runs compare exactly.
pub struct FrozenClock;

impl Clock for FrozenClock {
    fn now(&self) -> Duration {
        Duration::ZERO
    }
}

/// Each reading advances the clock by one second.
#[derive(Default)]
pub struct TickingClock(AtomicUsize);

impl Clock for TickingClock {
    fn now(&self) -> Duration {
        Duration::from_secs(self.0.fetch_add(1, Ordering::SeqCst) as u64)
    }
}

/// The setup of one simulated run.
pub fn setup(
    world: Arc<World>,
    config: SearchConfig,
    landscape: Landscape,
    clock: Arc<dyn Clock>,
    bundle_dir: &Path,
) -> RunSetup {
    let spec: ProblemSpec = serde_json::from_str(&fixture("agents/problem.json")).unwrap();
    let gpu: GpuInfo = serde_json::from_str(&fixture("agents/gpu.json")).unwrap();
    let sampling = Sampling {
        max_output_tokens: Some(600),
        ..Sampling::default()
    };
    let header = RunHeader {
        kforge_version: "test".into(),
        problem: spec.name.clone(),
        bundle: bundle_dir.to_path_buf(),
        coder: MODEL.into(),
        judge: MODEL.into(),
        coder_sampling: sampling.clone(),
        judge_sampling: sampling,
        scripted: None,
        session: None,
        compile_only: false,
        gpu: Some(gpu.name.clone()),
        arch: "sm_90".into(),
        config,
        seed: 7,
        protocol: Default::default(),
        profile_sections: Some("default".into()),
    };
    RunSetup {
        header,
        bundle: ProblemBundle {
            dir: bundle_dir.to_path_buf(),
            spec,
        },
        baseline: Some(serde_json::from_str(&fixture("agents/baseline.json")).unwrap()),
        prompts: kforge::agents::Prompts::shipped().unwrap(),
        models: Arc::new(PathModels {
            world: world.clone(),
            width: 3,
        }),
        evaluator: Arc::new(PathEvaluator {
            world,
            landscape,
            template: serde_json::from_str(&fixture("agents/eval_correct.json")).unwrap(),
            gpu,
        }),
        clock,
        prices: PriceTable::shipped(),
        progress: Style::Quiet,
        handle_ctrl_c: false,
    }
}
