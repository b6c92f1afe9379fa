//! OpenAI's two APIs, Chat Completions (also spoken by vLLM, SGLang, llama.cpp, Ollama and
//! OpenRouter) and Responses: request bodies and reply parsing, including the usage details
//! (`prompt_tokens_details.cached_tokens`, `completion_tokens_details.reasoning_tokens`, and
//! DeepSeek's `prompt_cache_hit_tokens`).

use serde::Deserialize;
use serde_json::{Map, Value, json};

use super::Reply;
use crate::llm::usage::Usage;
use crate::llm::{ChatRequest, FinishReason};

/// Models OpenAI serves only through the Responses API, matched as name prefixes so dated
/// snapshots (`o3-pro-2025-06-10`) match too.
const RESPONSES_ONLY: &[&str] = &[
    "o1-pro",
    "o3-pro",
    "o3-deep-research",
    "o4-mini-deep-research",
    "codex-mini",
    "gpt-5-pro",
    "gpt-5-codex",
    "gpt-5.1-codex",
    "computer-use-preview",
];

pub fn responses_only(model: &str) -> bool {
    let model = model.to_ascii_lowercase();
    RESPONSES_ONLY
        .iter()
        .any(|prefix| model.starts_with(prefix))
}

pub(super) fn chat_body(model: &str, request: &ChatRequest, compat: bool) -> Value {
    let mut messages = Vec::with_capacity(request.messages.len() + 1);
    if let Some(system) = &request.system {
        messages.push(json!({ "role": "system", "content": system }));
    }
    for message in &request.messages {
        messages.push(json!({ "role": message.role, "content": message.content }));
    }
    let mut body = Map::new();
    body.insert("model".into(), json!(model));
    body.insert("messages".into(), Value::Array(messages));
    body.insert("stream".into(), json!(false));
    let sampling = &request.sampling;
    if let Some(temperature) = sampling.temperature {
        body.insert("temperature".into(), json!(temperature));
    }
    if let Some(limit) = sampling.max_output_tokens {
        let name = if compat {
            "max_tokens"
        } else {
            "max_completion_tokens"
        };
        body.insert(name.into(), json!(limit));
    }
    if let Some(effort) = sampling.reasoning_effort {
        body.insert("reasoning_effort".into(), json!(effort.as_str()));
    }
    Value::Object(body)
}

pub(super) fn responses_body(model: &str, request: &ChatRequest) -> Value {
    let input: Vec<Value> = request
        .messages
        .iter()
        .map(|m| json!({ "role": m.role, "content": m.content }))
        .collect();
    let mut body = Map::new();
    body.insert("model".into(), json!(model));
    body.insert("input".into(), Value::Array(input));
    // kforge keeps its own records; nothing needs to stay on OpenAI's side.
    body.insert("store".into(), json!(false));
    if let Some(system) = &request.system {
        body.insert("instructions".into(), json!(system));
    }
    let sampling = &request.sampling;
    if let Some(temperature) = sampling.temperature {
        body.insert("temperature".into(), json!(temperature));
    }
    if let Some(limit) = sampling.max_output_tokens {
        body.insert("max_output_tokens".into(), json!(limit));
    }
    if let Some(effort) = sampling.reasoning_effort {
        body.insert("reasoning".into(), json!({ "effort": effort.as_str() }));
    }
    Value::Object(body)
}

#[derive(Deserialize)]
struct ChatCompletion {
    model: Option<String>,
    #[serde(default)]
    choices: Vec<ChatChoice>,
    usage: Option<ChatUsage>,
}

#[derive(Deserialize)]
struct ChatChoice {
    message: ChatMessage,
    finish_reason: Option<String>,
}

#[derive(Deserialize)]
struct ChatMessage {
    content: Option<String>,
    refusal: Option<String>,
}

#[derive(Deserialize)]
struct ChatUsage {
    prompt_tokens: Option<u64>,
    completion_tokens: Option<u64>,
    prompt_tokens_details: Option<CachedDetails>,
    completion_tokens_details: Option<ReasoningDetails>,
    /// DeepSeek's name for cached prompt tokens.
    prompt_cache_hit_tokens: Option<u64>,
}

#[derive(Deserialize)]
struct CachedDetails {
    cached_tokens: Option<u64>,
}

#[derive(Deserialize)]
struct ReasoningDetails {
    reasoning_tokens: Option<u64>,
}

pub(super) fn parse_chat(body: &str) -> Result<Reply, String> {
    let reply: ChatCompletion =
        serde_json::from_str(body).map_err(|e| format!("not a Chat Completions reply: {e}"))?;
    let choice = reply
        .choices
        .into_iter()
        .next()
        .ok_or("the reply has no choices")?;
    let finish = match choice.finish_reason.as_deref() {
        Some("stop") | None => FinishReason::Stop,
        Some("length") => FinishReason::MaxOutputTokens,
        Some(other) => FinishReason::Other(other.to_string()),
    };
    let (text, finish) = match (choice.message.content, choice.message.refusal) {
        (Some(text), _) => (text, finish),
        (None, Some(refusal)) => (refusal, FinishReason::Other("refusal".into())),
        (None, None) => (String::new(), finish),
    };
    let usage = reply.usage.and_then(|u| {
        if u.prompt_tokens.is_none() && u.completion_tokens.is_none() {
            return None;
        }
        Some(Usage {
            input_tokens: u.prompt_tokens.unwrap_or(0),
            cached_input_tokens: u
                .prompt_tokens_details
                .and_then(|d| d.cached_tokens)
                .or(u.prompt_cache_hit_tokens)
                .unwrap_or(0),
            cache_write_input_tokens: 0,
            output_tokens: u.completion_tokens.unwrap_or(0),
            reasoning_tokens: u
                .completion_tokens_details
                .and_then(|d| d.reasoning_tokens)
                .unwrap_or(0),
        })
    });
    Ok(Reply {
        text,
        finish,
        usage,
        model: reply.model,
    })
}

#[derive(Deserialize)]
struct ResponsesReply {
    model: Option<String>,
    status: Option<String>,
    #[serde(default)]
    output: Vec<OutputItem>,
    usage: Option<ResponsesUsage>,
    incomplete_details: Option<IncompleteDetails>,
    error: Option<Value>,
}

#[derive(Deserialize)]
struct OutputItem {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    content: Vec<OutputContent>,
}

#[derive(Deserialize)]
struct OutputContent {
    #[serde(rename = "type")]
    kind: String,
    text: Option<String>,
    refusal: Option<String>,
}

#[derive(Deserialize)]
struct IncompleteDetails {
    reason: Option<String>,
}

#[derive(Deserialize)]
struct ResponsesUsage {
    input_tokens: Option<u64>,
    output_tokens: Option<u64>,
    input_tokens_details: Option<CachedDetails>,
    output_tokens_details: Option<ReasoningDetails>,
}

pub(super) fn parse_responses(body: &str) -> Result<Reply, String> {
    let reply: ResponsesReply =
        serde_json::from_str(body).map_err(|e| format!("not a Responses API reply: {e}"))?;
    if let Some(error) = reply.error.filter(|e| !e.is_null()) {
        return Err(format!("the response failed: {error}"));
    }
    let mut text = String::new();
    let mut refused = false;
    for item in reply.output.iter().filter(|item| item.kind == "message") {
        for part in &item.content {
            match (part.kind.as_str(), &part.text, &part.refusal) {
                ("output_text", Some(t), _) => text.push_str(t),
                ("refusal", _, Some(r)) => {
                    refused = true;
                    text.push_str(r);
                }
                _ => {}
            }
        }
    }
    let finish = match (reply.status.as_deref(), reply.incomplete_details) {
        _ if refused => FinishReason::Other("refusal".into()),
        (Some("incomplete"), Some(IncompleteDetails { reason: Some(r) }))
            if r == "max_output_tokens" =>
        {
            FinishReason::MaxOutputTokens
        }
        (Some("incomplete"), details) => FinishReason::Other(
            details
                .and_then(|d| d.reason)
                .unwrap_or_else(|| "incomplete".into()),
        ),
        _ => FinishReason::Stop,
    };
    let usage = reply.usage.map(|u| Usage {
        input_tokens: u.input_tokens.unwrap_or(0),
        cached_input_tokens: u
            .input_tokens_details
            .and_then(|d| d.cached_tokens)
            .unwrap_or(0),
        cache_write_input_tokens: 0,
        output_tokens: u.output_tokens.unwrap_or(0),
        reasoning_tokens: u
            .output_tokens_details
            .and_then(|d| d.reasoning_tokens)
            .unwrap_or(0),
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

    fn request() -> ChatRequest {
        ChatRequest {
            system: Some("You write CUDA.".into()),
            messages: vec![
                Message::user("Write a kernel."),
                Message::assistant("__global__ void k() {}"),
                Message::user("Faster."),
            ],
            sampling: Sampling {
                temperature: Some(0.2),
                max_output_tokens: Some(1000),
                reasoning_effort: Some(ReasoningEffort::High),
            },
        }
    }

    #[test]
    fn chat_bodies() {
        let body = chat_body("o3", &request(), false);
        assert_eq!(
            body,
            json!({
                "model": "o3",
                "messages": [
                    {"role": "system", "content": "You write CUDA."},
                    {"role": "user", "content": "Write a kernel."},
                    {"role": "assistant", "content": "__global__ void k() {}"},
                    {"role": "user", "content": "Faster."}
                ],
                "stream": false,
                "temperature": 0.2,
                "max_completion_tokens": 1000,
                "reasoning_effort": "high"
            })
        );
        let compat = chat_body("qwen3-coder", &request(), true);
        assert_eq!(compat["max_tokens"], 1000);
        assert!(compat.get("max_completion_tokens").is_none());
        let plain = ChatRequest {
            system: None,
            messages: vec![Message::user("hi")],
            sampling: Sampling::default(),
        };
        assert_eq!(
            chat_body("m", &plain, true),
            json!({"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": false})
        );
    }

    #[test]
    fn responses_body_shape() {
        let body = responses_body("o3-pro", &request());
        assert_eq!(body["instructions"], "You write CUDA.");
        assert_eq!(body["input"].as_array().map(Vec::len), Some(3));
        assert_eq!(body["reasoning"], json!({"effort": "high"}));
        assert_eq!(body["max_output_tokens"], 1000);
        assert_eq!(body["store"], false);
    }

    #[test]
    fn chat_reply_with_details() {
        let reply = parse_chat(
            r#"{"id":"x","object":"chat.completion","model":"o3-2025-04-16","choices":[{"index":0,"message":{"role":"assistant","content":"done","refusal":null},"finish_reason":"length"}],"usage":{"prompt_tokens":100,"completion_tokens":40,"total_tokens":140,"prompt_tokens_details":{"cached_tokens":64},"completion_tokens_details":{"reasoning_tokens":30}}}"#,
        )
        .unwrap();
        assert_eq!(reply.text, "done");
        assert_eq!(reply.finish, FinishReason::MaxOutputTokens);
        assert_eq!(reply.model.as_deref(), Some("o3-2025-04-16"));
        assert_eq!(
            reply.usage,
            Some(Usage {
                input_tokens: 100,
                cached_input_tokens: 64,
                cache_write_input_tokens: 0,
                output_tokens: 40,
                reasoning_tokens: 30,
            })
        );
        // DeepSeek's cache field; a server with no usage at all.
        let reply = parse_chat(r#"{"choices":[{"message":{"content":"a"},"finish_reason":"stop"}],"usage":{"prompt_tokens":10,"completion_tokens":2,"prompt_cache_hit_tokens":8,"prompt_tokens_details":null}}"#).unwrap();
        assert_eq!(reply.usage.map(|u| u.cached_input_tokens), Some(8));
        let reply = parse_chat(r#"{"choices":[{"message":{"content":"a"}}]}"#).unwrap();
        assert_eq!(reply.usage, None);
        assert!(parse_chat(r#"{"choices":[]}"#).is_err());
        assert!(parse_chat(r#"{"choices":[{"message":{"content":"a"#).is_err());
    }

    #[test]
    fn responses_reply() {
        let reply = parse_responses(
            r#"{"id":"resp_1","object":"response","status":"completed","model":"o3-pro-2025-06-10","output":[{"type":"reasoning","id":"rs_1","summary":[]},{"type":"message","role":"assistant","content":[{"type":"output_text","text":"Hello","annotations":[]},{"type":"output_text","text":" there"}]}],"usage":{"input_tokens":50,"input_tokens_details":{"cached_tokens":10},"output_tokens":20,"output_tokens_details":{"reasoning_tokens":12},"total_tokens":70}}"#,
        )
        .unwrap();
        assert_eq!(reply.text, "Hello there");
        assert_eq!(reply.finish, FinishReason::Stop);
        let usage = reply.usage.unwrap();
        assert_eq!(
            (
                usage.input_tokens,
                usage.cached_input_tokens,
                usage.output_tokens,
                usage.reasoning_tokens
            ),
            (50, 10, 20, 12)
        );
        let cut = parse_responses(
            r#"{"status":"incomplete","incomplete_details":{"reason":"max_output_tokens"},"output":[]}"#,
        )
        .unwrap();
        assert_eq!(cut.finish, FinishReason::MaxOutputTokens);
        assert!(parse_responses(r#"{"status":"failed","error":{"code":"server_error","message":"boom"},"output":[]}"#).is_err());
    }

    #[test]
    fn responses_only_models() {
        assert!(responses_only("o3-pro-2025-06-10"));
        assert!(responses_only("codex-mini-latest"));
        assert!(!responses_only("o3"));
        assert!(!responses_only("gpt-5"));
    }
}
