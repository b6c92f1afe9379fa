//! Anthropic Messages: request body and reply parsing. Anthropic's `input_tokens` excludes cache
//! reads and writes; [`Usage::input_tokens`] adds them back so it means the same for every
//! provider.

use serde::Deserialize;
use serde_json::{Map, Value, json};

use super::Reply;
use crate::llm::usage::Usage;
use crate::llm::{ChatRequest, FinishReason, LlmError, ProviderKind};

/// The Messages API version kforge speaks (sent as `anthropic-version`).
pub(super) const API_VERSION: &str = "2023-06-01";

/// The output limit sent when `max_output_tokens` is unset, because Messages requires one.
pub const ANTHROPIC_DEFAULT_MAX_TOKENS: u32 = 8192;

pub(super) fn messages_body(model: &str, request: &ChatRequest) -> Result<Value, LlmError> {
    let sampling = &request.sampling;
    if sampling.reasoning_effort.is_some() {
        return Err(LlmError::Unsupported {
            provider: ProviderKind::Anthropic,
            what: "reasoning_effort",
        });
    }
    let messages: Vec<Value> = request
        .messages
        .iter()
        .map(|m| json!({ "role": m.role, "content": m.content }))
        .collect();
    let mut body = Map::new();
    body.insert("model".into(), json!(model));
    body.insert(
        "max_tokens".into(),
        json!(
            sampling
                .max_output_tokens
                .unwrap_or(ANTHROPIC_DEFAULT_MAX_TOKENS)
        ),
    );
    if let Some(system) = &request.system {
        body.insert("system".into(), json!(system));
    }
    body.insert("messages".into(), Value::Array(messages));
    if let Some(temperature) = sampling.temperature {
        body.insert("temperature".into(), json!(temperature));
    }
    Ok(Value::Object(body))
}

#[derive(Deserialize)]
struct MessagesReply {
    model: Option<String>,
    #[serde(default)]
    content: Vec<ContentBlock>,
    stop_reason: Option<String>,
    usage: Option<MessagesUsage>,
}

#[derive(Deserialize)]
struct ContentBlock {
    #[serde(rename = "type")]
    kind: String,
    text: Option<String>,
}

#[derive(Deserialize)]
struct MessagesUsage {
    input_tokens: Option<u64>,
    output_tokens: Option<u64>,
    cache_read_input_tokens: Option<u64>,
    cache_creation_input_tokens: Option<u64>,
}

pub(super) fn parse_messages(body: &str) -> Result<Reply, String> {
    let reply: MessagesReply =
        serde_json::from_str(body).map_err(|e| format!("not a Messages reply: {e}"))?;
    let text: String = reply
        .content
        .iter()
        .filter(|block| block.kind == "text")
        .filter_map(|block| block.text.as_deref())
        .collect();
    let finish = match reply.stop_reason.as_deref() {
        Some("end_turn" | "stop_sequence") | None => FinishReason::Stop,
        Some("max_tokens") => FinishReason::MaxOutputTokens,
        Some(other) => FinishReason::Other(other.to_string()),
    };
    let usage = reply.usage.map(|u| {
        let read = u.cache_read_input_tokens.unwrap_or(0);
        let written = u.cache_creation_input_tokens.unwrap_or(0);
        Usage {
            input_tokens: u.input_tokens.unwrap_or(0) + read + written,
            cached_input_tokens: read,
            cache_write_input_tokens: written,
            output_tokens: u.output_tokens.unwrap_or(0),
            reasoning_tokens: 0,
        }
    });
    Ok(Reply {
        text,
        finish,
        usage,
        model: reply.model,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::{Message, ReasoningEffort, Sampling};

    #[test]
    fn body_has_system_apart_and_a_token_limit() {
        let request = ChatRequest {
            system: Some("Be brief.".into()),
            messages: vec![Message::user("hi")],
            sampling: Sampling {
                temperature: Some(0.5),
                ..Sampling::default()
            },
        };
        assert_eq!(
            messages_body("claude-sonnet-4-5", &request).unwrap(),
            json!({
                "model": "claude-sonnet-4-5",
                "max_tokens": ANTHROPIC_DEFAULT_MAX_TOKENS,
                "system": "Be brief.",
                "messages": [{"role": "user", "content": "hi"}],
                "temperature": 0.5
            })
        );
        let effort = ChatRequest {
            sampling: Sampling {
                reasoning_effort: Some(ReasoningEffort::Low),
                ..Sampling::default()
            },
            ..request
        };
        let err = messages_body("claude-sonnet-4-5", &effort).unwrap_err();
        assert!(err.to_string().contains("reasoning_effort"), "{err}");
    }

    #[test]
    fn reply_counts_cache_tokens_as_input() {
        let reply = parse_messages(
            r#"{"id":"msg_1","type":"message","role":"assistant","model":"claude-sonnet-4-5-20250929","content":[{"type":"thinking","thinking":"hmm"},{"type":"text","text":"Hi"},{"type":"text","text":"!"}],"stop_reason":"max_tokens","usage":{"input_tokens":20,"cache_read_input_tokens":100,"cache_creation_input_tokens":30,"output_tokens":7}}"#,
        )
        .unwrap();
        assert_eq!(reply.text, "Hi!");
        assert_eq!(reply.finish, FinishReason::MaxOutputTokens);
        assert_eq!(
            reply.usage,
            Some(Usage {
                input_tokens: 150,
                cached_input_tokens: 100,
                cache_write_input_tokens: 30,
                output_tokens: 7,
                reasoning_tokens: 0,
            })
        );
        assert!(parse_messages("{\"content\": [").is_err());
    }
}
