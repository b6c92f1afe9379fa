//! The LLM layer: the Coder and the Judge talk to models only through [`LlmClient`], and this
//! module is the only place that knows providers, keys, retries, prices and recordings.
//!
//! Layers, as in codex: reqwest carries the bytes ([`http`]), typed endpoints build and read each
//! provider's JSON ([`provider`]), and one trait serves the agents, with the same
//! [`ChatRequest`]/[`ChatResponse`] for every provider, a recorded file ([`record::ReplayClient`])
//! or a canned script ([`ScriptedClient`], for tests).
//!
//! # Model names
//!
//! A model is written `provider:model`:
//!
//! | name | sent to |
//! |---|---|
//! | `openai:o3`, `openai:gpt-4.1` | OpenAI Chat Completions at `llm.openai.base_url` (env `OPENAI_BASE_URL`, default `https://api.openai.com/v1`); models that only exist in the Responses API (`o1-pro`, `o3-pro`, `gpt-5-pro`, `codex-mini-latest`, `gpt-5-codex`, ...) go there |
//! | `openai-responses:o3` | the OpenAI Responses API, whatever the model |
//! | `anthropic:claude-sonnet-4-5` | Anthropic Messages at `llm.anthropic.base_url` (env `ANTHROPIC_BASE_URL`, default `https://api.anthropic.com`) |
//! | `openai-compat:http://host:8000/v1#qwen3-coder` | an OpenAI-compatible server (vLLM, SGLang, llama.cpp, Ollama, OpenRouter): the base URL, `#`, the model name it serves |
//! | `openai-compat:qwen3-coder` | the same, at `llm.openai_compat.base_url` (env `KFORGE_COMPAT_BASE_URL`) |
//! | `replay:path/to/exchanges.jsonl` | no network: the responses recorded in that file, matched by request |
//!
//! Only the first `:` splits, so `openai-compat:http://h:11434/v1#qwen3:8b` names Ollama's
//! `qwen3:8b`. Keys come from `OPENAI_API_KEY`, `ANTHROPIC_API_KEY` and `KFORGE_COMPAT_API_KEY`
//! (or the config file); they go only into request headers, never into logs, errors or recordings.

pub mod cli;
mod error;
pub mod http;
mod model;
pub mod price;
pub mod provider;
pub mod record;
pub mod retry;
mod scripted;
mod usage;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::config::Settings;

pub use error::{LlmError, redact};
pub use model::{ModelSpec, ProviderKind, shown_url};
pub use price::{ModelPrice, PriceTable};
pub use record::{Recorder, RecordingClient, ReplayClient, RunRecording};
pub use scripted::{ScriptedClient, ScriptedReply};
pub use usage::{Cost, CostUnknown, Usage};

/// Who is speaking in a conversation turn. The system prompt is not a turn: it is
/// [`ChatRequest::system`], because providers take it in different places.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    User,
    Assistant,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Message {
    pub role: Role,
    pub content: String,
}

impl Message {
    pub fn user(content: impl Into<String>) -> Message {
        Message {
            role: Role::User,
            content: content.into(),
        }
    }

    pub fn assistant(content: impl Into<String>) -> Message {
        Message {
            role: Role::Assistant,
            content: content.into(),
        }
    }
}

/// How hard a reasoning model thinks (OpenAI's `reasoning_effort`; `minimal` is GPT-5 only).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ReasoningEffort {
    Minimal,
    Low,
    Medium,
    High,
}

impl ReasoningEffort {
    pub fn as_str(self) -> &'static str {
        match self {
            ReasoningEffort::Minimal => "minimal",
            ReasoningEffort::Low => "low",
            ReasoningEffort::Medium => "medium",
            ReasoningEffort::High => "high",
        }
    }
}

/// Sampling settings of one agent (`llm.coder_sampling`, `llm.judge_sampling`). Unset values are
/// left to the provider's defaults, except that Anthropic requires an output limit
/// ([`provider::ANTHROPIC_DEFAULT_MAX_TOKENS`] when unset).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Sampling {
    pub temperature: Option<f64>,
    pub max_output_tokens: Option<u32>,
    pub reasoning_effort: Option<ReasoningEffort>,
}

/// One request: a system prompt, the conversation so far, and how to sample the answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatRequest {
    pub system: Option<String>,
    pub messages: Vec<Message>,
    pub sampling: Sampling,
}

/// Why the model stopped writing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FinishReason {
    /// It finished its answer.
    Stop,
    /// It ran into the output token limit: the text is cut off.
    MaxOutputTokens,
    /// Anything else the provider said (a refusal, a content filter, ...), verbatim.
    Other(String),
}

/// A model's answer and what it took.
#[derive(Debug, Clone, Serialize)]
pub struct ChatResponse {
    pub text: String,
    pub finish: FinishReason,
    /// Token counts, or `None` when the server reported none.
    pub usage: Option<Usage>,
    pub cost: Cost,
    /// Wall time of the whole call, retries and waits included.
    pub latency: Duration,
    /// The model that answered, as the server named it.
    pub model: String,
    /// sha256 of the canonical request ([`record::CanonicalRequest`]).
    pub request_hash: String,
    /// Attempts made, 1 when the first succeeded (always 1 for replays and scripts).
    pub attempts: u32,
}

/// The future [`LlmClient::complete`] returns; boxed so the trait is object-safe.
pub type LlmFuture<'a> = Pin<Box<dyn Future<Output = Result<ChatResponse, LlmError>> + Send + 'a>>;

/// What the agents call. Every implementation retries, limits concurrency and records by
/// itself, so a caller just awaits the answer.
pub trait LlmClient: Send + Sync {
    fn complete<'a>(&'a self, request: &'a ChatRequest) -> LlmFuture<'a>;
    fn spec(&self) -> &ModelSpec;
}

/// The client for `spec`, configured from `settings`. With a recorder, every successful exchange
/// is appended to its file.
pub fn client_for(
    spec: &ModelSpec,
    settings: &Settings,
    recorder: Option<Arc<Recorder>>,
) -> Result<Arc<dyn LlmClient>, LlmError> {
    let prices = PriceTable::load(&settings.llm)?;
    Ok(match spec.provider {
        ProviderKind::Replay => Arc::new(ReplayClient::open(spec.clone(), prices, recorder)?),
        ProviderKind::OpenAi
        | ProviderKind::OpenAiResponses
        | ProviderKind::Anthropic
        | ProviderKind::OpenAiCompat => Arc::new(http::HttpClient::new(
            spec.clone(),
            &settings.llm,
            prices,
            recorder,
        )?),
    })
}

/// The two agents, each with its own model and sampling settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Agent {
    Coder,
    Judge,
}

impl Agent {
    pub fn name(self) -> &'static str {
        match self {
            Agent::Coder => "coder",
            Agent::Judge => "judge",
        }
    }

    /// `llm.coder_sampling` or `llm.judge_sampling`.
    pub fn sampling(self, settings: &Settings) -> &Sampling {
        match self {
            Agent::Coder => &settings.llm.coder_sampling,
            Agent::Judge => &settings.llm.judge_sampling,
        }
    }
}

/// The configured model and sampling settings of `agent` (`llm.coder` + `llm.coder_sampling`, or
/// the judge's).
pub fn configured(settings: &Settings, agent: Agent) -> Result<(ModelSpec, Sampling), LlmError> {
    let name = match agent {
        Agent::Coder => &settings.llm.coder,
        Agent::Judge => &settings.llm.judge,
    };
    let name = name.as_deref().ok_or(LlmError::NoModel {
        agent: agent.name(),
    })?;
    Ok((ModelSpec::parse(name)?, agent.sampling(settings).clone()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sampling_settings_come_from_config_files() {
        use figment::providers::{Format, Serialized, Toml};
        let parse = |text: &str| {
            figment::Figment::from(Serialized::defaults(Settings::default()))
                .merge(Toml::string(text))
                .extract::<Settings>()
                .map_err(|e| e.to_string())
        };
        let settings = parse(
            "[llm.coder_sampling]\ntemperature = 0.3\nmax_output_tokens = 16000\n\
             [llm.judge_sampling]\nreasoning_effort = \"high\"\n",
        )
        .unwrap();
        assert_eq!(settings.llm.coder_sampling.temperature, Some(0.3));
        assert_eq!(settings.llm.coder_sampling.max_output_tokens, Some(16000));
        assert_eq!(
            settings.llm.judge_sampling.reasoning_effort,
            Some(ReasoningEffort::High)
        );
        let err = parse("[llm.judge_sampling]\nreasoning_effort = \"extreme\"\n").unwrap_err();
        assert!(err.contains("extreme"), "{err}");
        assert!(parse("[llm.judge_sampling]\ntemprature = 1\n").is_err());
    }

    #[test]
    fn agents_have_their_own_models_and_sampling() {
        let mut settings = Settings::default();
        assert!(matches!(
            configured(&settings, Agent::Judge),
            Err(LlmError::NoModel { agent: "judge" })
        ));
        settings.llm.coder = Some("anthropic:claude-sonnet-4-5".into());
        settings.llm.judge = Some("openai:o3".into());
        settings.llm.judge_sampling.reasoning_effort = Some(ReasoningEffort::High);
        let (coder, coder_sampling) = configured(&settings, Agent::Coder).unwrap();
        let (judge, judge_sampling) = configured(&settings, Agent::Judge).unwrap();
        assert_eq!(coder.provider, ProviderKind::Anthropic);
        assert_eq!(judge.model, "o3");
        assert_eq!(coder_sampling.reasoning_effort, None);
        assert_eq!(judge_sampling.reasoning_effort, Some(ReasoningEffort::High));
    }
}
