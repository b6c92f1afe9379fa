//! Everything that can go wrong talking to a model, as one enum whose messages are written for the
//! person running kforge: what happened, why, and what to do. Server text inside a message has
//! passed through [`redact`], so a key echoed back by a server or proxy never reaches a log.
//! Which errors are retried is decided in one place, [`super::retry::classify`].

use std::path::PathBuf;
use std::time::Duration;

use crate::config::Secret;
use crate::paths;

use super::model::ProviderKind;

#[derive(Debug, thiserror::Error)]
pub enum LlmError {
    #[error("`{text}` is not a usable model name: {reason}")]
    BadModel { text: String, reason: String },

    #[error(
        "no {agent} model is configured: set llm.{agent} (env KFORGE_{upper}) or pass it on the \
         command line (`kforge run --{agent} M`, `kforge llm test --model M`), e.g. openai:o3",
        upper = agent.to_ascii_uppercase()
    )]
    NoModel { agent: &'static str },

    #[error("bad setting {key}: {reason}")]
    BadSetting { key: &'static str, reason: String },

    #[error("no API key for {provider}: set {env} or {key} in the config file")]
    MissingKey {
        provider: ProviderKind,
        env: &'static str,
        key: &'static str,
    },

    #[error(
        "openai-compat needs a base URL: write openai-compat:http://HOST:PORT/v1#MODEL, pass \
         --base-url, or set llm.openai_compat.base_url (env KFORGE_COMPAT_BASE_URL)"
    )]
    MissingBaseUrl,

    #[error("{provider} does not take {what}: unset it in the sampling settings for this model")]
    Unsupported {
        provider: ProviderKind,
        what: &'static str,
    },

    #[error("cannot set up the HTTP client: {detail}")]
    HttpSetup { detail: String },

    #[error(
        "the request exceeds the model's context window{}: shorten the prompt or lower \
         max_output_tokens (server said: {message})",
        limit.map(|n| format!(" ({n} tokens)")).unwrap_or_default()
    )]
    ContextLength { limit: Option<u64>, message: String },

    #[error(
        "{provider} rejected the API key (HTTP {status}): check {} (server said: {message})",
        key_hint(*provider)
    )]
    Auth {
        provider: ProviderKind,
        status: u16,
        message: String,
    },

    #[error(
        "{provider} says the account has no quota or credit left: add credit or raise the \
         spending limit, then run again (server said: {message})"
    )]
    Quota {
        provider: ProviderKind,
        message: String,
    },

    #[error(
        "{provider} rejected the request as invalid (HTTP {status}): {message}; check the model \
         name and the sampling settings (temperature, max_output_tokens, reasoning_effort)"
    )]
    InvalidRequest {
        provider: ProviderKind,
        status: u16,
        message: String,
    },

    #[error(
        "{provider} has no such model or endpoint (HTTP 404 from {url}): check the model name \
         and the base URL (server said: {message})"
    )]
    NotFound {
        provider: ProviderKind,
        url: String,
        message: String,
    },

    #[error("{provider} answered with unexpected HTTP {status} from {url}: {message}")]
    UnexpectedStatus {
        provider: ProviderKind,
        status: u16,
        url: String,
        message: String,
    },

    #[error(
        "{provider} is rate limiting requests (HTTP 429{}): {message}",
        retry_after.map(|d| format!(", asked to wait {:.1} s", d.as_secs_f64())).unwrap_or_default()
    )]
    RateLimited {
        provider: ProviderKind,
        message: String,
        retry_after: Option<Duration>,
    },

    #[error("{provider} had a server error (HTTP {status}): {message}")]
    Server {
        provider: ProviderKind,
        status: u16,
        message: String,
        retry_after: Option<Duration>,
    },

    #[error("no reply from {url} within {:.1} s (setting llm.timeout_s)", after.as_secs_f64())]
    Timeout { url: String, after: Duration },

    #[error("cannot connect to {url}: {detail}; is the server running and the base URL right?")]
    Connect { url: String, detail: String },

    #[error("the request to {url} failed: {detail}")]
    Transport { url: String, detail: String },

    #[error("the reply from {url} was cut off or malformed: {detail}")]
    BadReply { url: String, detail: String },

    #[error("gave up after {attempts} attempts; the last one failed: {last}")]
    GaveUp { attempts: u32, last: Box<LlmError> },

    #[error("cannot read the price table {}: {detail}", paths::display(path))]
    PriceTable { path: PathBuf, detail: String },

    #[error("cannot record the exchange to {}: {detail}", paths::display(path))]
    Record { path: PathBuf, detail: String },

    #[error("cannot replay {}: {detail}", paths::display(path))]
    ReplayFile { path: PathBuf, detail: String },

    #[error(
        "no recorded exchange in {} matches this request (hash {hash}): the request differs \
         from every recorded one (a changed prompt, model or sampling setting); replay the run \
         that recorded the file, or record a new one",
        paths::display(path)
    )]
    ReplayMiss { path: PathBuf, hash: String },

    #[error("the scripted client has no replies left (it served {served})")]
    ScriptExhausted { served: usize },
}

impl LlmError {
    /// The wait the server asked for, if it asked.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            LlmError::RateLimited { retry_after, .. } | LlmError::Server { retry_after, .. } => {
                *retry_after
            }
            _ => None,
        }
    }
}

fn key_hint(provider: ProviderKind) -> String {
    match provider.key_source() {
        Some((env, key)) => format!("{env} or {key}"),
        None => "the key".to_string(),
    }
}

/// Longest server message kept in an error: enough for any real API error, short enough that a
/// proxy's HTML page does not flood the terminal.
const MAX_MESSAGE_CHARS: usize = 600;

/// `text` with every occurrence of the key replaced and cut to a readable length.
pub fn redact(text: &str, key: Option<&Secret>) -> String {
    let text = match key {
        Some(key) if !key.expose().is_empty() => text.replace(key.expose(), "<redacted>"),
        _ => text.to_string(),
    };
    let text = text.trim();
    match text.char_indices().nth(MAX_MESSAGE_CHARS) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redact_removes_the_key_and_bounds_length() {
        let key = Secret::new("sk-abc123");
        assert_eq!(
            redact("bad key sk-abc123 (sk-abc123)", Some(&key)),
            "bad key <redacted> (<redacted>)"
        );
        assert_eq!(redact("  plain ", None), "plain");
        let long = "é".repeat(2000);
        let cut = redact(&long, None);
        assert_eq!(cut.chars().count(), MAX_MESSAGE_CHARS + 1);
    }

    #[test]
    fn messages_say_what_to_do() {
        let err = LlmError::ContextLength {
            limit: Some(128000),
            message: "too long".into(),
        };
        assert_eq!(
            err.to_string(),
            "the request exceeds the model's context window (128000 tokens): shorten the \
             prompt or lower max_output_tokens (server said: too long)"
        );
        let err = LlmError::Auth {
            provider: ProviderKind::Anthropic,
            status: 401,
            message: "invalid x-api-key".into(),
        };
        assert!(
            err.to_string()
                .contains("check ANTHROPIC_API_KEY or llm.anthropic.api_key")
        );
        let err = LlmError::NoModel { agent: "judge" };
        assert!(err.to_string().contains("KFORGE_JUDGE"), "{err}");
    }
}
