//! A client that answers from a queue of canned replies and keeps every request it was sent, so
//! tests of the agents and the search can script a conversation and assert on the prompts. Its
//! costs come from the shipped price table, as a real call's would, so budget logic is tested
//! too.

use std::collections::VecDeque;
use std::sync::{Mutex, PoisonError};
use std::time::Instant;

use super::record::CanonicalRequest;
use super::usage::Usage;
use super::{
    ChatRequest, ChatResponse, FinishReason, LlmClient, LlmError, LlmFuture, ModelSpec, PriceTable,
};

/// One canned answer.
#[derive(Debug, Clone, PartialEq)]
pub struct ScriptedReply {
    pub text: String,
    pub finish: FinishReason,
    pub usage: Option<Usage>,
}

impl ScriptedReply {
    /// A finished answer with no token counts (its cost is unknown).
    pub fn text(text: impl Into<String>) -> ScriptedReply {
        ScriptedReply {
            text: text.into(),
            finish: FinishReason::Stop,
            usage: None,
        }
    }

    pub fn with_usage(self, usage: Usage) -> ScriptedReply {
        ScriptedReply {
            usage: Some(usage),
            ..self
        }
    }
}

struct Script {
    replies: VecDeque<Result<ScriptedReply, LlmError>>,
    requests: Vec<ChatRequest>,
}

pub struct ScriptedClient {
    spec: ModelSpec,
    script: Mutex<Script>,
}

impl ScriptedClient {
    /// Answers with `replies` in order (an `Err` is returned as that call's error), then fails
    /// with [`LlmError::ScriptExhausted`].
    pub fn new(
        spec: ModelSpec,
        replies: impl IntoIterator<Item = Result<ScriptedReply, LlmError>>,
    ) -> ScriptedClient {
        ScriptedClient {
            spec,
            script: Mutex::new(Script {
                replies: replies.into_iter().collect(),
                requests: Vec::new(),
            }),
        }
    }

    /// Answers with these texts in order.
    pub fn replying<T: Into<String>>(
        spec: ModelSpec,
        texts: impl IntoIterator<Item = T>,
    ) -> ScriptedClient {
        ScriptedClient::new(spec, texts.into_iter().map(|t| Ok(ScriptedReply::text(t))))
    }

    /// Every request received so far, in order.
    pub fn requests(&self) -> Vec<ChatRequest> {
        self.lock().requests.clone()
    }

    /// Replies not yet served.
    pub fn remaining(&self) -> usize {
        self.lock().replies.len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Script> {
        self.script.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn answer(&self, request: &ChatRequest) -> Result<ChatResponse, LlmError> {
        let started = Instant::now();
        let next = {
            let mut script = self.lock();
            script.requests.push(request.clone());
            let served = script.requests.len() - 1;
            script
                .replies
                .pop_front()
                .unwrap_or(Err(LlmError::ScriptExhausted { served }))
        };
        let reply = next?;
        Ok(ChatResponse {
            cost: PriceTable::shipped().cost(&[self.spec.model.as_str()], reply.usage.as_ref()),
            text: reply.text,
            finish: reply.finish,
            usage: reply.usage,
            latency: started.elapsed(),
            model: self.spec.model.clone(),
            request_hash: CanonicalRequest::new(self.spec.provider, &self.spec.model, request)
                .hash(),
            attempts: 1,
        })
    }
}

impl LlmClient for ScriptedClient {
    fn complete<'a>(&'a self, request: &'a ChatRequest) -> LlmFuture<'a> {
        Box::pin(async move { self.answer(request) })
    }

    fn spec(&self) -> &ModelSpec {
        &self.spec
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::{Message, Sampling};

    #[tokio::test]
    async fn serves_the_script_and_keeps_the_requests() {
        let spec = ModelSpec::parse("openai:gpt-4o").unwrap();
        let client = ScriptedClient::new(
            spec,
            [
                Ok(ScriptedReply::text("one").with_usage(Usage {
                    input_tokens: 1_000_000,
                    output_tokens: 0,
                    ..Usage::default()
                })),
                Err(LlmError::ContextLength {
                    limit: Some(10),
                    message: "long".into(),
                }),
            ],
        );
        let ask = |text: &str| ChatRequest {
            system: None,
            messages: vec![Message::user(text)],
            sampling: Sampling::default(),
        };
        let first = client.complete(&ask("a")).await.unwrap();
        assert_eq!(first.text, "one");
        assert_eq!(first.cost.usd(), Some(2.5));
        assert!(matches!(
            client.complete(&ask("b")).await,
            Err(LlmError::ContextLength { .. })
        ));
        assert!(matches!(
            client.complete(&ask("c")).await,
            Err(LlmError::ScriptExhausted { served: 2 })
        ));
        let sent: Vec<_> = client
            .requests()
            .into_iter()
            .map(|r| r.messages[0].content.clone())
            .collect();
        assert_eq!(sent, ["a", "b", "c"]);
        assert_eq!(client.remaining(), 0);
    }
}
