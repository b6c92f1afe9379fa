//! The end of a run: `best/` (the fastest correct kernel with its result and its exports, saved
//! the moment it is found) and the summary (`summary.json` and the table `kforge run` prints):
//! best speedup against eager PyTorch and torch.compile, fraction of the speed of light, how many
//! nodes were correct, what the models cost, wall time, and the orchestrator's own overhead.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Serialize;

use super::models::Models;
use super::records::node_dir;
use crate::eval::CandidateResult;
use crate::gpu::GpuInfo;
use crate::llm::Agent;
use crate::problem::{ProblemBundle, ProblemSpec};
use crate::search::{DoneReason, Evaluation, NodeId, NodeState, Search};
use crate::store::{RunDir, StoreError};

/// Where the orchestrator's own time went (not in LLM calls, not on the GPU, not waiting).
#[derive(Debug, Default)]
pub struct Overhead {
    /// The loop: applying results, journaling, snapshots, handing out jobs.
    pub main_loop: Duration,
    /// The jobs: loading records, rendering prompts, writing files.
    pub jobs: Duration,
    pub expansions: u32,
}

#[derive(Debug, Clone, Serialize)]
pub struct BestKernel {
    pub node: NodeId,
    pub speedup_vs_reference: f64,
    pub speedup_vs_eager: Option<f64>,
    pub speedup_vs_compile: Option<f64>,
    pub fraction_of_speed_of_light: Option<f64>,
    pub median_ms: Option<f64>,
    /// `best/` (in the run directory) and what it holds.
    pub folder: PathBuf,
    pub files: Vec<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    pub problem: String,
    pub gpu: Option<String>,
    pub compile_only: bool,
    pub scripted: Option<String>,
    pub coder: String,
    pub judge: String,
    pub stopped_because: String,
    /// Candidate nodes (abandoned expansions not counted).
    pub nodes: u32,
    pub correct: u32,
    pub failed: u32,
    /// Built but not verified (compile-only).
    pub unverified: u32,
    pub abandoned: u32,
    /// Correct nodes over evaluated ones (failed included).
    pub correctness_rate: Option<f64>,
    pub best: Option<BestKernel>,
    pub tokens: u64,
    pub dollars: f64,
    pub wall_seconds: f64,
    /// Orchestrator time per expansion, in ms (target ≤ 50).
    pub overhead_ms_per_expansion: Option<f64>,
    /// Where the run is (not written into its own summary.json).
    #[serde(skip)]
    pub run_dir: PathBuf,
}

impl Summary {
    #[allow(clippy::too_many_arguments)]
    pub fn of(
        search: &Search,
        root: &Path,
        bundle: &ProblemBundle,
        gpu: Option<&GpuInfo>,
        reason: DoneReason,
        models: &dyn Models,
        wall: Duration,
        overhead: &Overhead,
    ) -> Summary {
        let nodes = search.tree().nodes();
        let count = |f: &dyn Fn(&crate::search::Node) -> bool| {
            nodes.iter().skip(1).filter(|n| f(n)).count() as u32
        };
        let correct = count(&|n| n.is_correct());
        let failed = count(&|n| matches!(n.evaluation, Some(Evaluation::Failed { .. })));
        let unverified = count(&|n| matches!(n.evaluation, Some(Evaluation::Unverified { .. })));
        let abandoned = count(&|n| matches!(n.state, NodeState::Abandoned { .. }));
        let spent = search.spent();
        let best = search.best().and_then(|node| {
            let result = read_result(root, node.id)?;
            let speedup = result.speedup.as_ref()?;
            let folder = PathBuf::from("best");
            let mut files: Vec<String> = std::fs::read_dir(root.join(&folder))
                .map(|entries| {
                    entries
                        .filter_map(Result::ok)
                        .map(|e| e.file_name().to_string_lossy().into_owned())
                        .collect()
                })
                .unwrap_or_default();
            files.sort();
            Some(BestKernel {
                node: node.id,
                speedup_vs_reference: speedup.vs_reference,
                speedup_vs_eager: speedup.vs_eager,
                speedup_vs_compile: speedup.vs_compile,
                fraction_of_speed_of_light: result.fraction_of_speed_of_light,
                median_ms: result.timing.as_ref().map(|t| t.candidate.median),
                folder,
                files,
            })
        });
        let overhead_total = overhead.main_loop + overhead.jobs;
        Summary {
            problem: bundle.spec.name.clone(),
            gpu: gpu.map(|g| g.name.clone()),
            compile_only: gpu.is_none(),
            scripted: models.scripted_label(),
            coder: models.name(Agent::Coder),
            judge: models.name(Agent::Judge),
            stopped_because: reason.to_string(),
            nodes: search.candidates(),
            correct,
            failed,
            unverified,
            abandoned,
            correctness_rate: (correct + failed > 0)
                .then(|| f64::from(correct) / f64::from(correct + failed)),
            best,
            tokens: spent.tokens,
            dollars: spent.dollars.as_dollars(),
            wall_seconds: wall.as_secs_f64(),
            overhead_ms_per_expansion: (overhead.expansions > 0)
                .then(|| overhead_total.as_secs_f64() * 1e3 / f64::from(overhead.expansions)),
            run_dir: root.to_path_buf(),
        }
    }

    /// The table `kforge run` ends with.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let line = |out: &mut String, key: &str, value: String| {
            out.push_str(&format!("{key:<12}{value}\n"));
        };
        if let Some(label) = &self.scripted {
            line(&mut out, "mode", label.clone());
        } else {
            line(
                &mut out,
                "models",
                format!("coder {}, judge {}", self.coder, self.judge),
            );
        }
        line(
            &mut out,
            "problem",
            format!(
                "{} on {}",
                self.problem,
                self.gpu
                    .as_deref()
                    .unwrap_or("no GPU (compile-only: kernels built, not verified or timed)")
            ),
        );
        line(&mut out, "stopped", self.stopped_because.clone());
        line(
            &mut out,
            "nodes",
            format!(
                "{} candidates: {} correct, {} failed{}{}{}",
                self.nodes,
                self.correct,
                self.failed,
                if self.unverified > 0 {
                    format!(", {} built (not verified)", self.unverified)
                } else {
                    String::new()
                },
                if self.abandoned > 0 {
                    format!("; {} expansions abandoned", self.abandoned)
                } else {
                    String::new()
                },
                self.correctness_rate
                    .map(|r| format!(" (correctness rate {:.0}%)", r * 100.0))
                    .unwrap_or_default()
            ),
        );
        match &self.best {
            Some(best) => {
                let times = |v: Option<f64>| v.map_or("n/a".to_string(), |x| format!("{x:.2}×"));
                line(
                    &mut out,
                    "best",
                    format!(
                        "node {}: {:.2}× the reference (same session), {} vs eager, {} vs torch.compile{}{}",
                        best.node,
                        best.speedup_vs_reference,
                        times(best.speedup_vs_eager),
                        times(best.speedup_vs_compile),
                        best.median_ms
                            .map(|ms| format!(", {ms:.4} ms"))
                            .unwrap_or_default(),
                        best.fraction_of_speed_of_light
                            .map(|f| format!(", {:.0}% of speed of light", f * 100.0))
                            .unwrap_or_default()
                    ),
                );
                line(
                    &mut out,
                    "kernel",
                    format!(
                        "{} ({})",
                        crate::paths::display(&self.run_dir.join(&best.folder)),
                        best.files.join(", ")
                    ),
                );
            }
            None => line(&mut out, "best", "no correct kernel".into()),
        }
        line(
            &mut out,
            "spend",
            if self.scripted.is_some() {
                "nothing: no model was called".into()
            } else {
                format!("{} tokens, ${:.4}", self.tokens, self.dollars)
            },
        );
        line(
            &mut out,
            "wall",
            format!(
                "{:.1} s{}",
                self.wall_seconds,
                self.overhead_ms_per_expansion
                    .map(|ms| format!(" (orchestrator overhead {ms:.1} ms per expansion)"))
                    .unwrap_or_default()
            ),
        );
        line(&mut out, "run", crate::paths::display(&self.run_dir));
        out
    }
}

fn read_result(root: &Path, node: NodeId) -> Option<CandidateResult> {
    let text = std::fs::read_to_string(node_dir(root, node).join("eval.json")).ok()?;
    serde_json::from_str(&text).ok()
}

/// Replaces `best/` with `node`'s kernel, result document and exports (a KernelBench
/// `ModelNew` and a `torch.library` op), in one rename.
pub fn save_best(dir: &RunDir, spec: &ProblemSpec, node: NodeId) -> Result<(), StoreError> {
    let folder = node_dir(dir.root(), node);
    let read = |name: &str| {
        std::fs::read(folder.join(name)).map_err(|source| StoreError::Io {
            action: "cannot read",
            path: crate::paths::display(&folder.join(name)),
            source,
        })
    };
    let kernel = read("kernel.cu")?;
    let eval = read("eval.json")?;
    let code = String::from_utf8_lossy(&kernel).into_owned();
    let mut files: Vec<(&str, Vec<u8>)> = vec![("kernel.cu", kernel), ("eval.json", eval)];
    match crate::eval::export::kernelbench_model_new(spec, &code) {
        Ok(text) => files.push(("model_new.py", text.into_bytes())),
        Err(e) => tracing::warn!("best kernel: no KernelBench export: {e}"),
    }
    match crate::eval::export::torch_library_op(spec, &code) {
        Ok(text) => files.push(("torch_op.py", text.into_bytes())),
        Err(e) => tracing::warn!("best kernel: no torch.library export: {e}"),
    }
    let note = format!("node {node}\n");
    files.push(("NODE", note.into_bytes()));
    let borrowed: Vec<(&str, &[u8])> = files.iter().map(|(n, c)| (*n, c.as_slice())).collect();
    dir.replace_best(&borrowed)?;
    Ok(())
}
