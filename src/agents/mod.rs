//! The Coder and the Judge: the prompts kforge sends them and the replies it accepts.
//!
//! - [`prompts`]: the templates (`prompts/*.txt`, shipped in the binary, overridable per file
//!   from a user's folder), their slots, and rendering.
//! - [`context`]: the facts a prompt shows, borrowed from the orchestrator's records (problem,
//!   GPU, baseline, a node's code, evaluation and ncu view, what was tried around it).
//! - [`coder`]: Coder tasks (generate, repair, optimize) and its reply: one CUDA code block.
//! - [`judge`]: Judge tasks (optimize, repair) and its reply: strict JSON, validated.
//! - [`exchange`]: one agent call with at most one retry that quotes why the reply was unusable,
//!   returning every call made so the run records and pays for each.
//!
//! One search expansion, as the orchestrator drives it:
//!
//! ```text
//! let run = RunContext { problem: &bundle.spec, arch, gpu: Some(&gpu), baseline: Some(&baseline) };
//! let history = History::of(&job);
//! // no prescription yet → the Judge
//! let verdict = ask_judge(judge, &prompts, &run, &JudgeTask::Optimize { node, history }, &s).await?;
//! let assigned = search.prescribe(job.child, verdict.value.prescriptions())?;
//! let kernel = ask_coder(coder, &prompts, &run,
//!     &CoderTask::Optimize { parent, prescription: &assigned.strategy, history }, &s).await?;
//! ```
//!
//! Nothing here talks to a GPU or the file system beyond reading a prompts folder.

pub mod coder;
pub mod context;
pub mod exchange;
mod fences;
pub mod judge;
pub mod prompts;

pub use coder::{
    CODE_BLOCK_TAGS, CoderReplyError, CoderTask, ask_coder, coder_request, coder_retry_request,
    parse_coder,
};
pub use context::{Candidate, History, Profile, RunContext};
pub use exchange::{
    AgentError, Answer, Exchange, ReplyError, retry_request, total_cost, total_usage,
};
pub use judge::{
    Bottleneck, Evidence, JudgeMode, JudgeReplyError, JudgeTask, JudgeVerdict, JudgedNode,
    MAX_PRESCRIPTIONS, OptimizeVerdict, RankedPrescription, RepairVerdict, ask_judge,
    judge_request, judge_retry_request, parse_judge,
};
pub use prompts::{PromptError, Prompts, Slot, SlotValues, Template, TemplateKind, TemplateOrigin};
