//! One agent call as the search sees it: the request, the reply, the parse, and at most one
//! retry that shows the model its unusable reply and quotes why it was unusable. Every call made
//! is returned, on success and on failure alike, so the run records it and the budget pays for it.

use super::coder::CoderReplyError;
use super::judge::JudgeReplyError;
use super::prompts::{PromptError, Prompts, Slot, SlotValues, TemplateKind};
use crate::llm::{
    Agent, ChatRequest, ChatResponse, Cost, FinishReason, LlmClient, LlmError, Message, Sampling,
    Usage,
};

/// One call: what was sent, what came back, and why the reply was rejected if it was.
#[derive(Debug, Clone)]
pub struct Exchange {
    pub request: ChatRequest,
    pub response: ChatResponse,
    /// The validation error that made kforge ask again (or give up); `None` for the reply used.
    pub rejected: Option<String>,
}

/// A parsed reply and every call it took (one, or two after a retry).
#[derive(Debug, Clone)]
pub struct Answer<T> {
    pub value: T,
    pub exchanges: Vec<Exchange>,
}

impl<T> Answer<T> {
    pub fn usage(&self) -> Usage {
        total_usage(&self.exchanges)
    }

    pub fn cost(&self) -> Cost {
        total_cost(&self.exchanges)
    }
}

/// Tokens of all the calls (calls whose server reported no usage count zero).
pub fn total_usage(exchanges: &[Exchange]) -> Usage {
    exchanges
        .iter()
        .filter_map(|e| e.response.usage)
        .fold(Usage::default(), |sum, u| Usage {
            input_tokens: sum.input_tokens.saturating_add(u.input_tokens),
            cached_input_tokens: sum
                .cached_input_tokens
                .saturating_add(u.cached_input_tokens),
            cache_write_input_tokens: sum
                .cache_write_input_tokens
                .saturating_add(u.cache_write_input_tokens),
            output_tokens: sum.output_tokens.saturating_add(u.output_tokens),
            reasoning_tokens: sum.reasoning_tokens.saturating_add(u.reasoning_tokens),
        })
}

/// The cost of all the calls: unknown as soon as one call's cost is unknown, never a partial
/// sum that looks complete.
pub fn total_cost(exchanges: &[Exchange]) -> Cost {
    let mut usd = 0.0;
    for exchange in exchanges {
        match exchange.response.cost {
            Cost::Known(cost) => usd += cost,
            unknown @ Cost::Unknown(_) => return unknown,
        }
    }
    Cost::Known(usd)
}

/// Why a reply could not be used.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ReplyError {
    #[error(transparent)]
    Coder(#[from] CoderReplyError),
    #[error(transparent)]
    Judge(#[from] JudgeReplyError),
}

/// Why an agent produced nothing usable. Every variant that made calls carries them.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    #[error("cannot build the {agent} prompt: {source}")]
    Prompt {
        agent: &'static str,
        #[source]
        source: PromptError,
        /// Calls made before (a retry prompt that could not be built follows one call).
        exchanges: Vec<Exchange>,
    },
    #[error("the {agent} call failed: {source}")]
    Llm {
        agent: &'static str,
        #[source]
        source: LlmError,
        exchanges: Vec<Exchange>,
    },
    #[error("the {agent}'s reply was unusable, and so was its retry: {error}")]
    InvalidReply {
        agent: &'static str,
        /// What was wrong with the last reply.
        error: ReplyError,
        exchanges: Vec<Exchange>,
    },
}

impl AgentError {
    /// The calls made before the failure.
    pub fn exchanges(&self) -> &[Exchange] {
        match self {
            AgentError::Prompt { exchanges, .. }
            | AgentError::Llm { exchanges, .. }
            | AgentError::InvalidReply { exchanges, .. } => exchanges,
        }
    }
}

/// A request of a system prompt and one user turn, both rendered from `values`. A system
/// template that renders to nothing sends no system prompt.
pub(crate) fn request(
    prompts: &Prompts,
    system: TemplateKind,
    task: TemplateKind,
    values: &SlotValues,
    sampling: &Sampling,
) -> Result<ChatRequest, PromptError> {
    let system = prompts.render(system, values)?;
    let user = prompts.render(task, values)?;
    Ok(ChatRequest {
        system: Some(system.trim().to_string()).filter(|s| !s.is_empty()),
        messages: vec![Message::user(user.trim())],
        sampling: sampling.clone(),
    })
}

/// The conversation so far, the unusable reply as the model's turn, and the agent's retry prompt
/// quoting `error`.
pub fn retry_request(
    prompts: &Prompts,
    agent: Agent,
    previous: &ChatRequest,
    bad_reply: &str,
    error: &str,
) -> Result<ChatRequest, PromptError> {
    let kind = match agent {
        Agent::Coder => TemplateKind::CoderRetry,
        Agent::Judge => TemplateKind::JudgeRetry,
    };
    let mut values = SlotValues::new();
    values.set(Slot::Error, error);
    let text = prompts.render(kind, &values)?;
    let mut request = previous.clone();
    // Providers refuse empty turns, and an empty reply is a reply worth showing.
    let reply = if bad_reply.trim().is_empty() {
        "(an empty reply)"
    } else {
        bad_reply
    };
    request.messages.push(Message::assistant(reply));
    request.messages.push(Message::user(text.trim()));
    Ok(request)
}

/// The validation error as the model reads it: a reply cut off at the output limit says so.
fn quoted(error: &ReplyError, finish: &FinishReason) -> String {
    match finish {
        FinishReason::MaxOutputTokens => format!(
            "{error} (your reply hit the output token limit and was cut off: answer more briefly)"
        ),
        _ => error.to_string(),
    }
}

/// Sends `request`, parses the reply with `parse`, and on an unusable reply asks once more.
pub(crate) async fn ask<T>(
    agent: Agent,
    client: &dyn LlmClient,
    prompts: &Prompts,
    request: ChatRequest,
    parse: impl Fn(&str) -> Result<T, ReplyError>,
) -> Result<Answer<T>, AgentError> {
    let mut exchanges = Vec::new();
    let first = call(agent, client, &request, &mut exchanges).await?;
    let error = match parse(&first.text) {
        Ok(value) => {
            exchanges.push(Exchange {
                request,
                response: first,
                rejected: None,
            });
            return Ok(Answer { value, exchanges });
        }
        Err(error) => error,
    };
    let retry = retry_request(
        prompts,
        agent,
        &request,
        &first.text,
        &quoted(&error, &first.finish),
    );
    exchanges.push(Exchange {
        request,
        response: first,
        rejected: Some(error.to_string()),
    });
    let retry = retry.map_err(|source| AgentError::Prompt {
        agent: agent.name(),
        source,
        exchanges: std::mem::take(&mut exchanges),
    })?;
    let second = call(agent, client, &retry, &mut exchanges).await?;
    let result = parse(&second.text);
    exchanges.push(Exchange {
        request: retry,
        response: second,
        rejected: result.as_ref().err().map(ToString::to_string),
    });
    match result {
        Ok(value) => Ok(Answer { value, exchanges }),
        Err(error) => Err(AgentError::InvalidReply {
            agent: agent.name(),
            error,
            exchanges,
        }),
    }
}

async fn call(
    agent: Agent,
    client: &dyn LlmClient,
    request: &ChatRequest,
    exchanges: &mut Vec<Exchange>,
) -> Result<ChatResponse, AgentError> {
    client
        .complete(request)
        .await
        .map_err(|source| AgentError::Llm {
            agent: agent.name(),
            source,
            exchanges: std::mem::take(exchanges),
        })
}
