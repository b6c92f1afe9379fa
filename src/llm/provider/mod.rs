//! Typed endpoints: each provider's request JSON, reply JSON and error JSON, with no I/O, so the
//! wire formats are tested on their own and [`super::http`] only moves bytes. Errors from every
//! provider are sorted into one [`LlmError`] by [`error_for_status`].

mod anthropic;
mod openai;

use std::sync::OnceLock;
use std::time::Duration;

use regex::Regex;
use reqwest::header::{HeaderMap, HeaderValue};
use serde_json::Value;

use crate::config::Secret;

use super::usage::Usage;
use super::{ChatRequest, FinishReason, LlmError, ModelSpec, ProviderKind};

pub use anthropic::ANTHROPIC_DEFAULT_MAX_TOKENS;
pub use openai::responses_only;

/// The wire format an endpoint speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Api {
    /// OpenAI Chat Completions; `compat` servers get `max_tokens` instead of OpenAI's
    /// `max_completion_tokens`, which not every compatible server knows.
    ChatCompletions { compat: bool },
    /// OpenAI Responses.
    Responses,
    /// Anthropic Messages.
    Messages,
}

/// What a reply says, whatever the provider.
#[derive(Debug, Clone, PartialEq)]
pub struct Reply {
    pub text: String,
    pub finish: FinishReason,
    pub usage: Option<Usage>,
    /// The model the server says answered.
    pub model: Option<String>,
}

impl Api {
    pub fn for_spec(spec: &ModelSpec) -> Api {
        match spec.provider {
            ProviderKind::OpenAiResponses => Api::Responses,
            ProviderKind::OpenAi if responses_only(&spec.model) => Api::Responses,
            ProviderKind::OpenAi => Api::ChatCompletions { compat: false },
            ProviderKind::Anthropic => Api::Messages,
            ProviderKind::OpenAiCompat | ProviderKind::Replay => {
                Api::ChatCompletions { compat: true }
            }
        }
    }

    /// The URL to POST to, from a base URL as users write it (`.../v1` for OpenAI and compatible
    /// servers; Anthropic's without `/v1`, as its SDKs take it, though with `/v1` works too).
    pub fn endpoint_url(self, base_url: &str) -> String {
        let base = base_url.trim_end_matches('/');
        match self {
            Api::ChatCompletions { .. } => format!("{base}/chat/completions"),
            Api::Responses => format!("{base}/responses"),
            Api::Messages if base.ends_with("/v1") => format!("{base}/messages"),
            Api::Messages => format!("{base}/v1/messages"),
        }
    }

    pub fn request_body(self, model: &str, request: &ChatRequest) -> Result<Value, LlmError> {
        match self {
            Api::ChatCompletions { compat } => Ok(openai::chat_body(model, request, compat)),
            Api::Responses => Ok(openai::responses_body(model, request)),
            Api::Messages => anthropic::messages_body(model, request),
        }
    }

    /// The authentication headers, marked sensitive so no `Debug` of a request shows them.
    pub fn auth_headers(
        self,
        provider: ProviderKind,
        key: Option<&Secret>,
    ) -> Result<HeaderMap, LlmError> {
        let mut headers = HeaderMap::new();
        let secret_header = |value: String| {
            let mut value = HeaderValue::from_str(&value).map_err(|_| LlmError::BadSetting {
                key: provider.key_source().map_or("api_key", |(_, key)| key),
                reason: "the API key has characters an HTTP header cannot carry (a stray \
                         newline or quote?)"
                    .to_string(),
            })?;
            value.set_sensitive(true);
            Ok::<_, LlmError>(value)
        };
        match (self, key) {
            (Api::Messages, key) => {
                headers.insert(
                    "anthropic-version",
                    HeaderValue::from_static(anthropic::API_VERSION),
                );
                if let Some(key) = key {
                    headers.insert("x-api-key", secret_header(key.expose().to_string())?);
                }
            }
            (Api::ChatCompletions { .. } | Api::Responses, Some(key)) => {
                headers.insert(
                    "authorization",
                    secret_header(format!("Bearer {}", key.expose()))?,
                );
            }
            (Api::ChatCompletions { .. } | Api::Responses, None) => {}
        }
        Ok(headers)
    }

    /// Reads a successful reply; the error is a description for [`LlmError::BadReply`].
    pub fn parse_reply(self, body: &str) -> Result<Reply, String> {
        match self {
            Api::ChatCompletions { .. } => openai::parse_chat(body),
            Api::Responses => openai::parse_responses(body),
            Api::Messages => anthropic::parse_messages(body),
        }
    }
}

/// The parts of an error body that decide what the error is.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ApiError {
    pub message: String,
    pub code: Option<String>,
    pub kind: Option<String>,
    /// A context size the server reported as a number (llama.cpp's `n_ctx`).
    pub context_limit: Option<u64>,
}

/// Reads the error shapes seen in the wild: OpenAI's and vLLM's `{"error": {message, type,
/// code}}`, Anthropic's `{"type": "error", "error": {type, message}}`, Ollama's `{"error": "..."}`,
/// vLLM's flat `{"message", "type", "code"}`, FastAPI's `{"detail": "..."}`, or plain text.
pub fn parse_error_body(body: &str) -> ApiError {
    let text = |v: Option<&Value>| -> Option<String> {
        match v? {
            Value::String(s) => Some(s.clone()),
            Value::Number(n) => Some(n.to_string()),
            _ => None,
        }
    };
    let Ok(json) = serde_json::from_str::<Value>(body) else {
        return ApiError {
            message: if body.trim().is_empty() {
                "(empty reply body)".to_string()
            } else {
                body.trim().to_string()
            },
            ..ApiError::default()
        };
    };
    let inner = match json.get("error") {
        Some(Value::Object(_)) => &json["error"],
        _ => &json,
    };
    let message = text(json.get("error"))
        .or_else(|| text(inner.get("message")))
        .or_else(|| text(inner.get("detail")))
        .or_else(|| text(json.get("message")))
        .unwrap_or_else(|| body.trim().to_string());
    ApiError {
        message,
        code: text(inner.get("code")),
        kind: text(inner.get("type")),
        context_limit: inner.get("n_ctx").and_then(Value::as_u64),
    }
}

/// One error for a non-2xx reply. `body` must already be redacted.
pub fn error_for_status(
    provider: ProviderKind,
    status: u16,
    url: &str,
    body: &str,
    retry_after: Option<Duration>,
) -> LlmError {
    let error = parse_error_body(body);
    let message = error.message.clone();
    if is_quota(&error) {
        return LlmError::Quota { provider, message };
    }
    match status {
        401 | 403 => LlmError::Auth {
            provider,
            status,
            message,
        },
        429 => LlmError::RateLimited {
            provider,
            message,
            retry_after,
        },
        _ if status >= 400 && is_context_length(&error) => LlmError::ContextLength {
            limit: error
                .context_limit
                .or_else(|| context_limit(&error.message)),
            message,
        },
        404 => LlmError::NotFound {
            provider,
            url: url.to_string(),
            message,
        },
        408 | 409 | 425 | 500..=599 => LlmError::Server {
            provider,
            status,
            message,
            retry_after,
        },
        400..=499 => LlmError::InvalidRequest {
            provider,
            status,
            message,
        },
        _ => LlmError::UnexpectedStatus {
            provider,
            status,
            url: url.to_string(),
            message,
        },
    }
}

fn matches_any(error: &ApiError, names: &[&str]) -> bool {
    [&error.code, &error.kind]
        .into_iter()
        .flatten()
        .any(|value| names.contains(&value.as_str()))
}

fn is_quota(error: &ApiError) -> bool {
    let message = error.message.to_lowercase();
    matches_any(error, &["insufficient_quota"])
        || message.contains("exceeded your current quota")
        || message.contains("credit balance is too low")
}

fn is_context_length(error: &ApiError) -> bool {
    static PHRASES: OnceLock<Regex> = OnceLock::new();
    let phrases = PHRASES.get_or_init(|| {
        Regex::new(
            r"(?i)maximum context length|context window|context length|context size|context limit|prompt is too long",
        )
        .expect("a constant pattern that compiles (unit-tested)")
    });
    matches_any(
        error,
        &["context_length_exceeded", "exceed_context_size_error"],
    ) || phrases.is_match(&error.message)
}

/// The context size a message states, in the wordings of OpenAI, vLLM and Anthropic.
fn context_limit(message: &str) -> Option<u64> {
    static PATTERNS: OnceLock<Vec<Regex>> = OnceLock::new();
    let patterns = PATTERNS.get_or_init(|| {
        [
            r"(?i)maximum context length is (\d+)",
            r"(?i)context (?:window|length|size|limit) (?:of|is) (\d+)",
            r"(?i)> ?(\d+) maximum",
            r"(?i)exceed context limit: \d+ \+ \d+ > (\d+)",
        ]
        .into_iter()
        .map(|p| Regex::new(p).expect("constant patterns that compile (unit-tested)"))
        .collect()
    });
    patterns.iter().find_map(|p| {
        p.captures(message)
            .and_then(|c| c.get(1))
            .and_then(|m| m.as_str().parse().ok())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn classify(status: u16, body: &str) -> LlmError {
        error_for_status(ProviderKind::OpenAi, status, "http://h/v1", body, None)
    }

    #[test]
    fn openai_errors() {
        let body = r#"{"error":{"message":"This model's maximum context length is 128000 tokens. However, your messages resulted in 130012 tokens.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}"#;
        assert!(matches!(
            classify(400, body),
            LlmError::ContextLength {
                limit: Some(128000),
                ..
            }
        ));
        let body = r#"{"error":{"message":"You exceeded your current quota, please check your plan and billing details.","type":"insufficient_quota","param":null,"code":"insufficient_quota"}}"#;
        assert!(matches!(classify(429, body), LlmError::Quota { .. }));
        let body = r#"{"error":{"message":"Incorrect API key provided: sk-abc***.","type":"invalid_request_error","code":"invalid_api_key"}}"#;
        let err = classify(401, body);
        assert!(matches!(err, LlmError::Auth { status: 401, .. }));
        assert!(err.to_string().contains("Incorrect API key"), "{err}");
        let body = r#"{"error":{"message":"Rate limit reached for gpt-4o","type":"requests","code":"rate_limit_exceeded"}}"#;
        assert!(matches!(classify(429, body), LlmError::RateLimited { .. }));
        let body = r#"{"error":{"message":"Unsupported value: 'temperature'","type":"invalid_request_error","code":"unsupported_value"}}"#;
        assert!(matches!(
            classify(400, body),
            LlmError::InvalidRequest { status: 400, .. }
        ));
        let body =
            r#"{"error":{"message":"The model `gpt-9` does not exist","code":"model_not_found"}}"#;
        assert!(matches!(classify(404, body), LlmError::NotFound { .. }));
        assert!(matches!(
            classify(503, "<html>upstream down</html>"),
            LlmError::Server { status: 503, .. }
        ));
    }

    #[test]
    fn anthropic_errors() {
        let provider = ProviderKind::Anthropic;
        let body = r#"{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 210000 tokens > 200000 maximum"}}"#;
        let err = error_for_status(provider, 400, "u", body, None);
        assert!(
            matches!(
                err,
                LlmError::ContextLength {
                    limit: Some(200000),
                    ..
                }
            ),
            "{err:?}"
        );
        let body = r#"{"type":"error","error":{"type":"invalid_request_error","message":"input length and `max_tokens` exceed context limit: 197000 + 8192 > 200000, decrease input length or `max_tokens` and try again"}}"#;
        assert!(matches!(
            error_for_status(provider, 400, "u", body, None),
            LlmError::ContextLength {
                limit: Some(200000),
                ..
            }
        ));
        let body = r#"{"type":"error","error":{"type":"invalid_request_error","message":"Your credit balance is too low to access the Anthropic API."}}"#;
        assert!(matches!(
            error_for_status(provider, 400, "u", body, None),
            LlmError::Quota { .. }
        ));
        let body = r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#;
        assert!(matches!(
            error_for_status(provider, 529, "u", body, Some(Duration::from_secs(2))),
            LlmError::Server {
                status: 529,
                retry_after: Some(_),
                ..
            }
        ));
        let body = r#"{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}"#;
        assert!(matches!(
            error_for_status(provider, 401, "u", body, None),
            LlmError::Auth { .. }
        ));
    }

    #[test]
    fn compatible_server_errors() {
        // vLLM
        let body = r#"{"object":"error","message":"This model's maximum context length is 32768 tokens. However, you requested 40000 tokens.","type":"BadRequestError","param":null,"code":400}"#;
        assert!(matches!(
            classify(400, body),
            LlmError::ContextLength {
                limit: Some(32768),
                ..
            }
        ));
        // llama.cpp server
        let body = r#"{"error":{"code":400,"message":"the request exceeds the available context size, try increasing it","type":"exceed_context_size_error","n_prompt_tokens":9000,"n_ctx":8192}}"#;
        assert!(matches!(
            classify(400, body),
            LlmError::ContextLength {
                limit: Some(8192),
                ..
            }
        ));
        // Ollama
        let parsed = parse_error_body(r#"{"error":"model 'qwen9' not found"}"#);
        assert_eq!(parsed.message, "model 'qwen9' not found");
        assert_eq!(parse_error_body("").message, "(empty reply body)");
        assert_eq!(
            parse_error_body(r#"{"detail":"Not Found"}"#).message,
            "Not Found"
        );
    }

    #[test]
    fn endpoint_urls() {
        assert_eq!(
            Api::ChatCompletions { compat: true }.endpoint_url("http://h:8000/v1/"),
            "http://h:8000/v1/chat/completions"
        );
        assert_eq!(
            Api::Responses.endpoint_url("https://api.openai.com/v1"),
            "https://api.openai.com/v1/responses"
        );
        assert_eq!(
            Api::Messages.endpoint_url("https://api.anthropic.com"),
            "https://api.anthropic.com/v1/messages"
        );
        assert_eq!(
            Api::Messages.endpoint_url("http://proxy/v1"),
            "http://proxy/v1/messages"
        );
    }

    #[test]
    fn api_per_model() {
        let api = |name: &str| Api::for_spec(&ModelSpec::parse(name).unwrap());
        assert_eq!(api("openai:o3"), Api::ChatCompletions { compat: false });
        assert_eq!(api("openai:o3-pro"), Api::Responses);
        assert_eq!(api("openai:gpt-5-codex"), Api::Responses);
        assert_eq!(api("openai-responses:gpt-4.1"), Api::Responses);
        assert_eq!(api("anthropic:claude-haiku-4-5"), Api::Messages);
        assert_eq!(
            api("openai-compat:http://h/v1#m"),
            Api::ChatCompletions { compat: true }
        );
    }

    #[test]
    fn keys_go_only_into_sensitive_headers() {
        let key = Secret::new("sk-test-header-1");
        let headers = Api::Responses
            .auth_headers(ProviderKind::OpenAi, Some(&key))
            .unwrap();
        let auth = &headers["authorization"];
        assert!(auth.is_sensitive());
        assert!(!format!("{headers:?}").contains("sk-test"));
        let headers = Api::Messages
            .auth_headers(ProviderKind::Anthropic, Some(&key))
            .unwrap();
        assert!(headers["x-api-key"].is_sensitive());
        assert_eq!(headers["anthropic-version"], anthropic::API_VERSION);
        let bad = Secret::new("sk-bad\nkey");
        let err = Api::Messages
            .auth_headers(ProviderKind::Anthropic, Some(&bad))
            .unwrap_err()
            .to_string();
        assert!(!err.contains("sk-bad"), "{err}");
        assert!(err.contains("llm.anthropic.api_key"), "{err}");
    }
}
