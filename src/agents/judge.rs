//! The Judge: reads a node's measurements and prescribes ranked edits (optimize mode), or reads
//! a failure and names the critical issue and the minimal fix (repair mode). Its reply is strict
//! JSON of the schema in DESIGN.md §3.4, parsed into [`JudgeVerdict`] and checked beyond what
//! serde checks: evidence cited, one to five prescriptions ranked 1..n, falsifiable predictions.
//!
//! The JSON may stand alone or sit in one ```` ```json ```` block (text around a block is
//! allowed, since the fence marks the JSON unambiguously); a bare object with prose around it
//! is refused rather than guessed at. An invalid reply gets one retry quoting every problem.

use std::fmt;

use serde::de::{self, Deserializer, Visitor};
use serde::{Deserialize, Serialize};

use super::context::{
    Candidate, History, Profile, RunContext, candidate_values, reference_values, run_values,
    siblings_value,
};
use super::exchange::{AgentError, Answer, ReplyError, ask};
use super::prompts::{PromptError, Prompts, Slot, SlotValues, TemplateKind};
use crate::llm::{Agent, ChatRequest, LlmClient, Sampling};
use crate::search::Prescription;

/// The most prescriptions one optimize verdict may hold.
pub const MAX_PRESCRIPTIONS: usize = 5;

/// Which schema a reply must follow.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JudgeMode {
    Optimize,
    Repair,
}

/// The node the Judge prescribes for in optimize mode.
#[derive(Debug, Clone, Copy)]
pub enum JudgedNode<'a> {
    /// The root: the PyTorch reference, with the profile of its own kernels when there is one.
    Reference { profile: Profile<'a> },
    /// A correct kernel.
    Kernel(Candidate<'a>),
}

/// What the Judge is asked to do.
#[derive(Debug, Clone, Copy)]
pub enum JudgeTask<'a> {
    Optimize {
        node: JudgedNode<'a>,
        history: History<'a>,
    },
    Repair {
        failed: Candidate<'a>,
        history: History<'a>,
    },
}

impl JudgeTask<'_> {
    pub fn mode(&self) -> JudgeMode {
        match self {
            JudgeTask::Optimize { .. } => JudgeMode::Optimize,
            JudgeTask::Repair { .. } => JudgeMode::Repair,
        }
    }

    pub fn template(&self) -> TemplateKind {
        match self {
            JudgeTask::Optimize { .. } => TemplateKind::JudgeOptimize,
            JudgeTask::Repair { .. } => TemplateKind::JudgeRepair,
        }
    }
}

/// A measurement the Judge cites.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Evidence {
    /// The metric's name as the prompt gives it.
    pub metric: String,
    /// Its value with unit; a bare JSON number is accepted too, as it means the same.
    #[serde(deserialize_with = "text_or_number")]
    pub value: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Bottleneck {
    pub diagnosis: String,
    pub evidence: Vec<Evidence>,
}

/// One ranked edit.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RankedPrescription {
    /// 1 is the edit expected to help most.
    pub rank: u32,
    pub edit: String,
    pub rationale: String,
    /// Falsifiable: which metric moves from what to what, and the expected time change.
    pub prediction: String,
    /// The Judge's confidence in (0, 1] that the edit helps, when it gives one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub confidence: Option<f64>,
}

/// Optimize mode: the bottleneck and ranked prescriptions (sorted by rank once validated).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OptimizeVerdict {
    pub bottleneck: Bottleneck,
    pub prescriptions: Vec<RankedPrescription>,
}

/// Repair mode: the critical issue and the minimal fix.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RepairVerdict {
    pub critical_issue: String,
    pub fix: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub evidence: Vec<Evidence>,
}

/// A validated Judge reply (stored as `judge.json` with its mode).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "mode", rename_all = "snake_case")]
pub enum JudgeVerdict {
    Optimize(OptimizeVerdict),
    Repair(RepairVerdict),
}

impl JudgeVerdict {
    pub fn mode(&self) -> JudgeMode {
        match self {
            JudgeVerdict::Optimize(_) => JudgeMode::Optimize,
            JudgeVerdict::Repair(_) => JudgeMode::Repair,
        }
    }

    /// The verdict as the search takes it ([`crate::search::Search::prescribe`]): the edits in
    /// rank order with the Judge's confidence as prior, or for a repair one entry holding the
    /// critical issue and the fix. The strategy text is what the Coder applies and what later
    /// prompts list as tried.
    pub fn prescriptions(&self) -> Vec<Prescription> {
        match self {
            JudgeVerdict::Optimize(verdict) => verdict
                .prescriptions
                .iter()
                .map(|p| Prescription {
                    strategy: p.edit.trim().to_string(),
                    prior: p.confidence,
                })
                .collect(),
            JudgeVerdict::Repair(verdict) => vec![Prescription {
                strategy: format!(
                    "critical issue: {}\nminimal fix: {}",
                    verdict.critical_issue.trim(),
                    verdict.fix.trim()
                ),
                prior: None,
            }],
        }
    }
}

fn text_or_number<'de, D: Deserializer<'de>>(deserializer: D) -> Result<String, D::Error> {
    struct TextOrNumber;
    impl Visitor<'_> for TextOrNumber {
        type Value = String;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("the value as a string with its unit, e.g. \"41.2%\"")
        }
        fn visit_str<E: de::Error>(self, v: &str) -> Result<String, E> {
            Ok(v.to_string())
        }
        fn visit_i64<E: de::Error>(self, v: i64) -> Result<String, E> {
            Ok(v.to_string())
        }
        fn visit_u64<E: de::Error>(self, v: u64) -> Result<String, E> {
            Ok(v.to_string())
        }
        fn visit_f64<E: de::Error>(self, v: f64) -> Result<String, E> {
            Ok(v.to_string())
        }
    }
    deserializer.deserialize_any(TextOrNumber)
}

/// Why a Judge reply is unusable. The text is written to be quoted back to the model.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JudgeReplyError {
    #[error("the reply holds no JSON object; answer with only the JSON object")]
    NoJson,
    #[error(
        "the reply has text {position} the JSON object; answer with only the JSON object (no \
         prose before or after it), or put it in one ```json block"
    )]
    ProseAroundJson { position: &'static str },
    #[error("the reply has {count} ```json blocks; answer with exactly one JSON object")]
    SeveralJsonBlocks { count: usize },
    #[error("the ```json block is never closed (the reply may have been cut off)")]
    UnclosedJsonBlock,
    #[error("the JSON is malformed: {message}")]
    Syntax { message: String },
    #[error("the JSON does not fit the schema: {message}")]
    Schema { message: String },
    #[error("the JSON breaks the rules: {}", .problems.join("; "))]
    Invalid { problems: Vec<String> },
}

/// The JSON text of a reply: the one ```json (or untagged) block, or the whole reply.
fn json_text(text: &str) -> Result<String, JudgeReplyError> {
    let fences = super::fences::fenced_blocks(text);
    let is_json = |tag: &str| tag == "json" || tag.is_empty();
    let mut blocks: Vec<String> = fences
        .closed
        .into_iter()
        .filter(|b| is_json(&b.tag))
        .map(|b| b.body)
        .collect();
    match blocks.len() {
        0 if fences.unclosed.as_ref().is_some_and(|b| is_json(&b.tag)) => {
            Err(JudgeReplyError::UnclosedJsonBlock)
        }
        0 => Ok(text.trim().to_string()),
        1 => Ok(blocks.remove(0).trim().to_string()),
        count => Err(JudgeReplyError::SeveralJsonBlocks { count }),
    }
}

/// The one JSON object of `body`, checked to have no text around it.
fn json_object(body: &str) -> Result<&str, JudgeReplyError> {
    if !body.starts_with('{') {
        return Err(if body.contains('{') {
            JudgeReplyError::ProseAroundJson { position: "before" }
        } else {
            JudgeReplyError::NoJson
        });
    }
    let mut stream = serde_json::Deserializer::from_str(body).into_iter::<serde_json::Value>();
    match stream.next() {
        Some(Ok(_)) => {}
        Some(Err(error)) => return Err(syntax(&error)),
        None => return Err(JudgeReplyError::NoJson),
    }
    let end = stream.byte_offset();
    if !body[end..].trim().is_empty() {
        return Err(JudgeReplyError::ProseAroundJson { position: "after" });
    }
    Ok(&body[..end])
}

fn syntax(error: &serde_json::Error) -> JudgeReplyError {
    let message = match error.classify() {
        serde_json::error::Category::Eof => format!("it ends early ({error}; cut off?)"),
        _ => error.to_string(),
    };
    JudgeReplyError::Syntax { message }
}

fn schema(error: &serde_json::Error) -> JudgeReplyError {
    match error.classify() {
        serde_json::error::Category::Data => JudgeReplyError::Schema {
            message: error.to_string(),
        },
        _ => syntax(error),
    }
}

/// A validated verdict of `mode` from a Judge reply.
pub fn parse_judge(mode: JudgeMode, text: &str) -> Result<JudgeVerdict, JudgeReplyError> {
    let body = json_text(text)?;
    let json = json_object(&body)?;
    match mode {
        JudgeMode::Optimize => {
            let mut verdict: OptimizeVerdict =
                serde_json::from_str(json).map_err(|e| schema(&e))?;
            verdict.validate()?;
            Ok(JudgeVerdict::Optimize(verdict))
        }
        JudgeMode::Repair => {
            let verdict: RepairVerdict = serde_json::from_str(json).map_err(|e| schema(&e))?;
            verdict.validate()?;
            Ok(JudgeVerdict::Repair(verdict))
        }
    }
}

fn require_text(problems: &mut Vec<String>, field: &str, value: &str) {
    if value.trim().is_empty() {
        problems.push(format!("{field} is empty"));
    }
}

fn check_evidence(problems: &mut Vec<String>, field: &str, evidence: &[Evidence]) {
    for (i, item) in evidence.iter().enumerate() {
        require_text(problems, &format!("{field}[{i}].metric"), &item.metric);
        require_text(problems, &format!("{field}[{i}].value"), &item.value);
    }
}

impl OptimizeVerdict {
    /// Checks what serde cannot, then sorts the prescriptions by rank.
    fn validate(&mut self) -> Result<(), JudgeReplyError> {
        let mut problems = Vec::new();
        require_text(
            &mut problems,
            "bottleneck.diagnosis",
            &self.bottleneck.diagnosis,
        );
        if self.bottleneck.evidence.is_empty() {
            problems.push(
                "bottleneck.evidence is empty: cite at least one measurement from the prompt as \
                 {\"metric\": \"<name>\", \"value\": \"<value>\"}"
                    .into(),
            );
        }
        check_evidence(
            &mut problems,
            "bottleneck.evidence",
            &self.bottleneck.evidence,
        );
        let count = self.prescriptions.len();
        if count == 0 {
            problems.push(format!(
                "prescriptions is empty: give 1 to {MAX_PRESCRIPTIONS} ranked prescriptions"
            ));
        }
        if count > MAX_PRESCRIPTIONS {
            problems.push(format!(
                "prescriptions has {count} entries: give at most {MAX_PRESCRIPTIONS}, the most \
                 promising"
            ));
        }
        for (i, p) in self.prescriptions.iter().enumerate() {
            let field = format!("prescriptions[{i}]");
            require_text(&mut problems, &format!("{field}.edit"), &p.edit);
            require_text(&mut problems, &format!("{field}.rationale"), &p.rationale);
            require_text(&mut problems, &format!("{field}.prediction"), &p.prediction);
            if !p.prediction.trim().is_empty() && !p.prediction.chars().any(|c| c.is_ascii_digit())
            {
                problems.push(format!(
                    "{field}.prediction has no number: make it falsifiable (e.g. \"DRAM \
                     throughput from 41% to >75%, time -40%\")"
                ));
            }
            if let Some(confidence) = p.confidence
                && !(confidence > 0.0 && confidence <= 1.0)
            {
                problems.push(format!(
                    "{field}.confidence is {confidence}: it must lie in (0, 1] (or be left out)"
                ));
            }
        }
        let mut ranks: Vec<u32> = self.prescriptions.iter().map(|p| p.rank).collect();
        ranks.sort_unstable();
        let expected: Vec<u32> = (1..).take(count).collect();
        if count > 0 && ranks != expected {
            let shown: Vec<String> = ranks.iter().map(u32::to_string).collect();
            problems.push(format!(
                "the ranks are {}: number the {count} prescriptions 1 to {count}, each rank once",
                shown.join(", ")
            ));
        }
        if !problems.is_empty() {
            return Err(JudgeReplyError::Invalid { problems });
        }
        self.prescriptions.sort_by_key(|p| p.rank);
        Ok(())
    }
}

impl RepairVerdict {
    fn validate(&self) -> Result<(), JudgeReplyError> {
        let mut problems = Vec::new();
        require_text(&mut problems, "critical_issue", &self.critical_issue);
        require_text(&mut problems, "fix", &self.fix);
        check_evidence(&mut problems, "evidence", &self.evidence);
        if problems.is_empty() {
            Ok(())
        } else {
            Err(JudgeReplyError::Invalid { problems })
        }
    }
}

/// The request that asks the Judge for `task`.
pub fn judge_request(
    prompts: &Prompts,
    run: &RunContext<'_>,
    task: &JudgeTask<'_>,
    sampling: &Sampling,
) -> Result<ChatRequest, PromptError> {
    let mut values = SlotValues::new();
    run_values(run, &mut values);
    match task {
        JudgeTask::Optimize { node, history } => {
            match node {
                JudgedNode::Reference { profile } => reference_values(run, *profile, &mut values),
                JudgedNode::Kernel(candidate) => candidate_values(candidate, history, &mut values),
            }
            values.set(Slot::Siblings, siblings_value(history.siblings));
        }
        JudgeTask::Repair { failed, history } => candidate_values(failed, history, &mut values),
    }
    super::exchange::request(
        prompts,
        TemplateKind::JudgeSystem,
        task.template(),
        &values,
        sampling,
    )
}

/// Asks the Judge for `task`: one call, and one retry quoting the validation error if the reply
/// is invalid. The answer is the validated verdict with every exchange made.
pub async fn ask_judge(
    client: &dyn LlmClient,
    prompts: &Prompts,
    run: &RunContext<'_>,
    task: &JudgeTask<'_>,
    sampling: &Sampling,
) -> Result<Answer<JudgeVerdict>, AgentError> {
    let request =
        judge_request(prompts, run, task, sampling).map_err(|source| AgentError::Prompt {
            agent: Agent::Judge.name(),
            source,
            exchanges: Vec::new(),
        })?;
    let mode = task.mode();
    ask(Agent::Judge, client, prompts, request, |text| {
        parse_judge(mode, text).map_err(ReplyError::Judge)
    })
    .await
}

/// The Judge's conversation for a retry: the previous request, the invalid reply, and the retry
/// prompt quoting `error`.
pub fn judge_retry_request(
    prompts: &Prompts,
    previous: &ChatRequest,
    bad_reply: &str,
    error: &JudgeReplyError,
) -> Result<ChatRequest, PromptError> {
    super::exchange::retry_request(
        prompts,
        Agent::Judge,
        previous,
        bad_reply,
        &error.to_string(),
    )
}
