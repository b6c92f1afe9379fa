//! The Coder: writes the first kernel, repairs a failed one, or applies one prescription to a
//! correct one; its reply must be exactly one CUDA code block holding the whole `.cu` file.
//!
//! The reply is checked only as far as text can tell (one block, the ABI header included, the
//! entry point defined): nvcc and the evaluator judge the rest, and their verdict is the next
//! prompt's input. A reply that fails these checks gets one retry that quotes the problem.

use std::sync::LazyLock;

use regex::Regex;

use super::context::{
    Candidate, History, RunContext, candidate_values, run_values, siblings_value,
};
use super::exchange::{AgentError, Answer, ReplyError, ask};
use super::prompts::{PromptError, Prompts, Slot, SlotValues, TemplateKind};
use crate::llm::{Agent, ChatRequest, LlmClient, Sampling};

/// Info strings accepted on the code block.
pub const CODE_BLOCK_TAGS: [&str; 4] = ["cuda", "cu", "c++", "cpp"];

/// What the Coder is asked to do.
#[derive(Debug, Clone, Copy)]
pub enum CoderTask<'a> {
    /// The first kernel for the problem (a child of the root), following the Judge's
    /// prescription for the reference when there is one.
    Generate {
        prescription: Option<&'a str>,
        history: History<'a>,
    },
    /// Fix a kernel that failed, with the Judge's diagnosis when there is one.
    Repair {
        failed: Candidate<'a>,
        fix: Option<&'a str>,
        history: History<'a>,
    },
    /// Apply one prescription to a correct kernel.
    Optimize {
        parent: Candidate<'a>,
        prescription: &'a str,
        history: History<'a>,
    },
}

impl CoderTask<'_> {
    pub fn template(&self) -> TemplateKind {
        match self {
            CoderTask::Generate { .. } => TemplateKind::CoderGenerate,
            CoderTask::Repair { .. } => TemplateKind::CoderRepair,
            CoderTask::Optimize { .. } => TemplateKind::CoderOptimize,
        }
    }
}

/// Why a Coder reply is unusable. The text is written to be quoted back to the model.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CoderReplyError {
    #[error(
        "the reply has no ```cuda code block{}; put the whole .cu file in one block that starts \
         with a line ```cuda and ends with a line ```",
        other_blocks(.other_tags)
    )]
    NoCodeBlock {
        /// Tags of the fenced blocks it did have (`""` for untagged ones).
        other_tags: Vec<String>,
    },
    #[error(
        "the reply has {count} ```cuda code blocks; it must have exactly one, holding the whole \
         .cu file (merge them into one file)"
    )]
    SeveralCodeBlocks { count: usize },
    #[error(
        "the ```cuda code block is never closed (the reply may have been cut off); end it with a \
         line of three backticks"
    )]
    UnclosedCodeBlock,
    #[error("the code {}", missing_parts(*.missing_include, *.missing_entry_point))]
    Incomplete {
        missing_include: bool,
        missing_entry_point: bool,
    },
}

fn other_blocks(tags: &[String]) -> String {
    if tags.is_empty() {
        return String::new();
    }
    let tags: Vec<&str> = tags
        .iter()
        .map(|t| if t.is_empty() { "untagged" } else { t.as_str() })
        .collect();
    format!(" (it has blocks tagged: {})", tags.join(", "))
}

fn missing_parts(include: bool, entry_point: bool) -> String {
    let include_text = "does not #include \"kforge.h\" (the first include of the file)";
    let entry_text = "does not define the entry point `extern \"C\" int kforge_forward(const \
                      kf_tensor *inputs, int num_inputs, const kf_tensor *params, int \
                      num_params, kf_tensor *outputs, int num_outputs, cudaStream_t stream) { \
                      ... }`";
    match (include, entry_point) {
        (true, true) => format!("{include_text} and {entry_text}"),
        (true, false) => include_text.into(),
        _ => entry_text.into(),
    }
}

static INCLUDE: LazyLock<Regex> = LazyLock::new(|| {
    // A constant pattern: it compiles, as the unit tests show.
    Regex::new(r#"(?m)^[ \t]*#[ \t]*include[ \t]*"kforge\.h""#).expect("valid include pattern")
});

/// A definition, not a declaration: the parameter list is followed by a body.
static ENTRY_POINT: LazyLock<Regex> = LazyLock::new(|| {
    // A constant pattern: it compiles, as the unit tests show.
    Regex::new(r"\bkforge_forward\s*\([^;{}]*\)\s*\{").expect("valid entry-point pattern")
});

/// The kernel source in a Coder reply.
pub fn parse_coder(text: &str) -> Result<String, CoderReplyError> {
    let fences = super::fences::fenced_blocks(text);
    let is_code = |tag: &str| CODE_BLOCK_TAGS.contains(&tag);
    let mut code: Vec<&str> = fences
        .closed
        .iter()
        .filter(|b| is_code(&b.tag))
        .map(|b| b.body.as_str())
        .collect();
    let unclosed_code = fences.unclosed.as_ref().is_some_and(|b| is_code(&b.tag));
    match (code.len(), unclosed_code) {
        (0, true) => return Err(CoderReplyError::UnclosedCodeBlock),
        (0, false) => {
            return Err(CoderReplyError::NoCodeBlock {
                other_tags: fences.closed.iter().map(|b| b.tag.clone()).collect(),
            });
        }
        (1, false) => {}
        (count, unclosed) => {
            return Err(CoderReplyError::SeveralCodeBlocks {
                count: count + usize::from(unclosed),
            });
        }
    }
    let source = code.remove(0);
    let missing_include = !INCLUDE.is_match(source);
    let missing_entry_point = !ENTRY_POINT.is_match(source);
    if missing_include || missing_entry_point {
        return Err(CoderReplyError::Incomplete {
            missing_include,
            missing_entry_point,
        });
    }
    Ok(source.to_string())
}

/// What `{{prescription}}` says in `coder_generate` when the Judge prescribed nothing.
const NO_PRESCRIPTION: &str = "none: choose a straightforward approach that is correct first \
                               and reasonably fast";
/// What `{{fix}}` says in `coder_repair` when no diagnosis was made.
const NO_FIX: &str = "none: find the cause in the evaluation above";

/// The request that asks the Coder for `task`.
pub fn coder_request(
    prompts: &Prompts,
    run: &RunContext<'_>,
    task: &CoderTask<'_>,
    sampling: &Sampling,
) -> Result<ChatRequest, PromptError> {
    let mut values = SlotValues::new();
    run_values(run, &mut values);
    match task {
        CoderTask::Generate {
            prescription,
            history,
        } => {
            values
                .set(Slot::Siblings, siblings_value(history.siblings))
                .set(
                    Slot::Prescription,
                    prescription.map_or(NO_PRESCRIPTION, str::trim),
                );
        }
        CoderTask::Repair {
            failed,
            fix,
            history,
        } => {
            candidate_values(failed, history, &mut values);
            values.set(Slot::Fix, fix.map_or(NO_FIX, str::trim));
        }
        CoderTask::Optimize {
            parent,
            prescription,
            history,
        } => {
            candidate_values(parent, history, &mut values);
            values
                .set(Slot::Siblings, siblings_value(history.siblings))
                .set(Slot::Prescription, prescription.trim());
        }
    }
    super::exchange::request(
        prompts,
        TemplateKind::CoderSystem,
        task.template(),
        &values,
        sampling,
    )
}

/// Asks the Coder for `task`: one call, and one retry quoting the problem if the reply is
/// unusable. The answer is the kernel source with every exchange made.
pub async fn ask_coder(
    client: &dyn LlmClient,
    prompts: &Prompts,
    run: &RunContext<'_>,
    task: &CoderTask<'_>,
    sampling: &Sampling,
) -> Result<Answer<String>, AgentError> {
    let request =
        coder_request(prompts, run, task, sampling).map_err(|source| AgentError::Prompt {
            agent: Agent::Coder.name(),
            source,
            exchanges: Vec::new(),
        })?;
    ask(Agent::Coder, client, prompts, request, |text| {
        parse_coder(text).map_err(ReplyError::Coder)
    })
    .await
}

/// The Coder's conversation for a retry: the previous request, the unusable reply, and the
/// retry prompt quoting `error`.
pub fn coder_retry_request(
    prompts: &Prompts,
    previous: &ChatRequest,
    bad_reply: &str,
    error: &CoderReplyError,
) -> Result<ChatRequest, PromptError> {
    super::exchange::retry_request(
        prompts,
        Agent::Coder,
        previous,
        bad_reply,
        &error.to_string(),
    )
}
