//! Which model answers each call of a run. A live run sends every Judge call to one client and
//! every Coder call to another; a scripted session (the demo, the tests) answers by *which node
//! is asked about*, so the orchestrator names the call site ([`CallSite`]) and the models pick the
//! client. Recording, replay on resume and the budget gate wrap whatever client comes back.

use std::sync::Arc;

use crate::llm::{
    Agent, ChatRequest, ChatResponse, Cost, CostUnknown, FinishReason, LlmClient, LlmError,
    LlmFuture, ModelSpec,
};

/// The node a call is about: the PyTorch reference (the root) or a kernel.
#[derive(Debug, Clone, Copy)]
pub enum NodeRef<'a> {
    Reference,
    Kernel { code: &'a str },
}

/// What the Coder is asked to do with its parent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CoderStep {
    /// Apply the parent's prescription at this position of its ranked list(s), 0 first.
    Prescription { index: usize },
    /// Repair the failed parent.
    Repair,
}

/// Where in the search a call is made.
#[derive(Debug, Clone, Copy)]
pub enum CallSite<'a> {
    /// The Judge reads `node` (optimize mode, or repair mode when `repair`).
    Judge { node: NodeRef<'a>, repair: bool },
    /// The Coder edits `parent` as `step` says.
    Coder {
        parent: NodeRef<'a>,
        step: CoderStep,
    },
}

/// The models of a run.
pub trait Models: Send + Sync {
    /// The client that answers `agent` at `site`.
    fn client(&self, agent: Agent, site: &CallSite<'_>) -> Result<Arc<dyn LlmClient>, LlmError>;
    /// `provider:model` of each agent, as the summary shows them.
    fn name(&self, agent: Agent) -> String;
    /// Set when no model is called: what answers instead (shown on every screen of the run).
    fn scripted_label(&self) -> Option<String>;
}

/// A live run: one client per agent, whatever the site.
pub struct LiveModels {
    pub coder: Arc<dyn LlmClient>,
    pub judge: Arc<dyn LlmClient>,
}

fn spec_name(spec: &ModelSpec) -> String {
    let provider = serde_json::to_value(spec.provider)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default();
    format!("{provider}:{}", spec.model)
}

impl Models for LiveModels {
    fn client(&self, agent: Agent, _site: &CallSite<'_>) -> Result<Arc<dyn LlmClient>, LlmError> {
        Ok(match agent {
            Agent::Coder => self.coder.clone(),
            Agent::Judge => self.judge.clone(),
        })
    }

    fn name(&self, agent: Agent) -> String {
        match agent {
            Agent::Coder => spec_name(self.coder.spec()),
            Agent::Judge => spec_name(self.judge.spec()),
        }
    }

    fn scripted_label(&self) -> Option<String> {
        None
    }
}

/// A client that gives one fixed reply (a scripted session's answer for one call site). It
/// reports no token counts, so its cost is unknown rather than a made-up zero.
pub struct FixedReply {
    spec: ModelSpec,
    text: String,
}

impl FixedReply {
    pub fn new(spec: ModelSpec, text: String) -> FixedReply {
        FixedReply { spec, text }
    }
}

impl LlmClient for FixedReply {
    fn complete<'a>(&'a self, request: &'a ChatRequest) -> LlmFuture<'a> {
        Box::pin(async move {
            Ok(ChatResponse {
                text: self.text.clone(),
                finish: FinishReason::Stop,
                usage: None,
                cost: Cost::Unknown(CostUnknown::NoUsageReported),
                latency: std::time::Duration::ZERO,
                model: self.spec.model.clone(),
                request_hash: crate::llm::record::CanonicalRequest::new(
                    self.spec.provider,
                    &self.spec.model,
                    request,
                )
                .hash(),
                attempts: 1,
            })
        })
    }

    fn spec(&self) -> &ModelSpec {
        &self.spec
    }
}
