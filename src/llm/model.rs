//! Model names as users write them (`provider:model`), parsed once into a [`ModelSpec`] so the
//! rest of the layer never splits strings. The syntax is documented in the module doc of
//! [`crate::llm`].

use std::fmt;

use serde::{Deserialize, Serialize};

use super::LlmError;

/// Which API a model is reached through.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ProviderKind {
    /// OpenAI: Chat Completions, or the Responses API for the models that only have that.
    #[serde(rename = "openai")]
    OpenAi,
    /// OpenAI's Responses API, whatever the model.
    #[serde(rename = "openai-responses")]
    OpenAiResponses,
    /// Anthropic Messages.
    #[serde(rename = "anthropic")]
    Anthropic,
    /// Any server speaking OpenAI Chat Completions (vLLM, SGLang, llama.cpp, Ollama, OpenRouter).
    #[serde(rename = "openai-compat")]
    OpenAiCompat,
    /// Recorded exchanges served back from a file, with no network.
    #[serde(rename = "replay")]
    Replay,
}

impl ProviderKind {
    const ALL: [ProviderKind; 5] = [
        ProviderKind::OpenAi,
        ProviderKind::OpenAiResponses,
        ProviderKind::Anthropic,
        ProviderKind::OpenAiCompat,
        ProviderKind::Replay,
    ];

    /// The prefix users write before the colon.
    pub fn name(self) -> &'static str {
        match self {
            ProviderKind::OpenAi => "openai",
            ProviderKind::OpenAiResponses => "openai-responses",
            ProviderKind::Anthropic => "anthropic",
            ProviderKind::OpenAiCompat => "openai-compat",
            ProviderKind::Replay => "replay",
        }
    }

    /// Where the key comes from, as (environment variable, settings key); `None` for replay.
    pub fn key_source(self) -> Option<(&'static str, &'static str)> {
        match self {
            ProviderKind::OpenAi | ProviderKind::OpenAiResponses => {
                Some(("OPENAI_API_KEY", "llm.openai.api_key"))
            }
            ProviderKind::Anthropic => Some(("ANTHROPIC_API_KEY", "llm.anthropic.api_key")),
            ProviderKind::OpenAiCompat => {
                Some(("KFORGE_COMPAT_API_KEY", "llm.openai_compat.api_key"))
            }
            ProviderKind::Replay => None,
        }
    }

    fn from_name(name: &str) -> Option<ProviderKind> {
        ProviderKind::ALL
            .into_iter()
            .find(|kind| kind.name() == name)
    }
}

impl fmt::Display for ProviderKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A model and the endpoint that serves it. For `replay`, `model` is the path of the file of
/// recorded exchanges.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ModelSpec {
    pub provider: ProviderKind,
    pub model: String,
    /// Overrides the provider's configured base URL (always set for `openai-compat:URL#MODEL`).
    pub base_url: Option<String>,
}

const EXAMPLES: &str = "openai:o3, anthropic:claude-sonnet-4-5, \
                        openai-compat:http://localhost:8000/v1#qwen3-coder or replay:exchanges.jsonl";

impl ModelSpec {
    /// Parses `provider:model`; see the syntax in [`crate::llm`].
    pub fn parse(text: &str) -> Result<ModelSpec, LlmError> {
        let bad = |reason: String| LlmError::BadModel {
            text: text.to_string(),
            reason: format!("{reason}; write provider:model, e.g. {EXAMPLES}"),
        };
        let text = text.trim();
        let Some((prefix, rest)) = text.split_once(':') else {
            return Err(bad(match guess_provider(text) {
                Some(kind) => format!("no provider given (did you mean {kind}:{text}?)"),
                None => "no provider given".to_string(),
            }));
        };
        let Some(provider) = ProviderKind::from_name(prefix) else {
            let known: Vec<_> = ProviderKind::ALL.iter().map(|k| k.name()).collect();
            return Err(bad(format!(
                "unknown provider `{prefix}` (known: {})",
                known.join(", ")
            )));
        };
        if rest.trim().is_empty() {
            return Err(bad(format!("no model after `{prefix}:`")));
        }
        let (model, base_url) = match provider {
            ProviderKind::OpenAiCompat if rest.contains("://") => {
                let Some((url, model)) = rest.rsplit_once('#') else {
                    return Err(bad(format!(
                        "`{rest}` is a URL with no model: write openai-compat:URL#MODEL"
                    )));
                };
                if model.trim().is_empty() {
                    return Err(bad("no model after `#`".to_string()));
                }
                (model.trim().to_string(), Some(check_url(url).map_err(bad)?))
            }
            ProviderKind::Replay | ProviderKind::OpenAiCompat => (rest.to_string(), None),
            ProviderKind::OpenAi | ProviderKind::OpenAiResponses | ProviderKind::Anthropic => {
                if rest.contains("://") {
                    return Err(bad(format!(
                        "{provider} takes a model name, not a URL (a base URL goes in \
                         --base-url or llm.{}.base_url, or use openai-compat:URL#MODEL)",
                        if provider == ProviderKind::Anthropic {
                            "anthropic"
                        } else {
                            "openai"
                        }
                    )));
                }
                (rest.trim().to_string(), None)
            }
        };
        Ok(ModelSpec {
            provider,
            model,
            base_url,
        })
    }

    /// The same model sent to another base URL (`kforge llm test --base-url`).
    pub fn with_base_url(self, url: &str) -> Result<ModelSpec, LlmError> {
        if self.provider == ProviderKind::Replay {
            return Err(LlmError::BadModel {
                text: self.to_string(),
                reason: "a replay serves a file and takes no base URL".to_string(),
            });
        }
        let base_url = check_url(url).map_err(|reason| LlmError::BadModel {
            text: self.to_string(),
            reason,
        })?;
        Ok(ModelSpec {
            base_url: Some(base_url),
            ..self
        })
    }
}

fn check_url(url: &str) -> Result<String, String> {
    let url = url.trim().trim_end_matches('/');
    if url.starts_with("http://") || url.starts_with("https://") {
        Ok(url.to_string())
    } else {
        Err(format!(
            "`{url}` is not an http:// or https:// base URL (e.g. http://localhost:8000/v1)"
        ))
    }
}

/// A hint for a name written without a provider; only for the error message.
fn guess_provider(model: &str) -> Option<ProviderKind> {
    let model = model.to_ascii_lowercase();
    if model.starts_with("claude") {
        Some(ProviderKind::Anthropic)
    } else if model.starts_with("gpt-")
        || model.starts_with("o1")
        || model.starts_with("o3")
        || model.starts_with("o4")
    {
        Some(ProviderKind::OpenAi)
    } else {
        None
    }
}

/// `provider:model`, or `openai-compat:URL#MODEL` with the query and any user part of the URL left
/// out, so a name can be shown and logged.
impl fmt::Display for ModelSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.base_url {
            Some(url) if self.provider == ProviderKind::OpenAiCompat => {
                write!(f, "{}:{}#{}", self.provider, shown_url(url), self.model)
            }
            _ => write!(f, "{}:{}", self.provider, self.model),
        }
    }
}

/// A URL as it may appear in logs and errors: no `user:password@`, no query string.
pub fn shown_url(url: &str) -> String {
    let without_query = url.split(['?', '#']).next().unwrap_or(url);
    match without_query.split_once("://") {
        Some((scheme, rest)) => match rest.split_once('/') {
            Some((authority, path)) => {
                let host = authority.rsplit('@').next().unwrap_or(authority);
                format!("{scheme}://{host}/{path}")
            }
            None => format!("{scheme}://{}", rest.rsplit('@').next().unwrap_or(rest)),
        },
        None => without_query.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_each_provider() {
        let spec = ModelSpec::parse("openai:o3").unwrap();
        assert_eq!(spec.provider, ProviderKind::OpenAi);
        assert_eq!(spec.model, "o3");
        assert_eq!(spec.base_url, None);

        let spec = ModelSpec::parse("anthropic:claude-sonnet-4-5").unwrap();
        assert_eq!(spec.provider, ProviderKind::Anthropic);
        assert_eq!(spec.to_string(), "anthropic:claude-sonnet-4-5");

        let spec = ModelSpec::parse("openai-compat:http://host:8000/v1/#qwen3-coder").unwrap();
        assert_eq!(spec.provider, ProviderKind::OpenAiCompat);
        assert_eq!(spec.model, "qwen3-coder");
        assert_eq!(spec.base_url.as_deref(), Some("http://host:8000/v1"));
        assert_eq!(
            spec.to_string(),
            "openai-compat:http://host:8000/v1#qwen3-coder"
        );

        // Ollama tags have colons of their own; only the first colon splits.
        let spec = ModelSpec::parse("openai-compat:qwen3:8b").unwrap();
        assert_eq!(spec.model, "qwen3:8b");
        assert_eq!(spec.base_url, None);

        let spec = ModelSpec::parse("replay:runs/a/llm.jsonl").unwrap();
        assert_eq!(spec.provider, ProviderKind::Replay);
        assert_eq!(spec.model, "runs/a/llm.jsonl");

        let spec = ModelSpec::parse("openai-responses:o3-pro").unwrap();
        assert_eq!(spec.provider, ProviderKind::OpenAiResponses);
    }

    #[test]
    fn bad_names_say_what_to_write() {
        let err = ModelSpec::parse("gpt-4o").unwrap_err().to_string();
        assert!(err.contains("openai:gpt-4o"), "{err}");
        let err = ModelSpec::parse("azure:gpt-4o").unwrap_err().to_string();
        assert!(err.contains("unknown provider `azure`"), "{err}");
        assert!(err.contains("openai-compat"), "{err}");
        let err = ModelSpec::parse("openai:").unwrap_err().to_string();
        assert!(err.contains("no model"), "{err}");
        let err = ModelSpec::parse("openai-compat:http://h:1/v1").unwrap_err();
        assert!(err.to_string().contains("URL#MODEL"), "{err}");
        let err = ModelSpec::parse("openai:http://h:1/v1#m").unwrap_err();
        assert!(err.to_string().contains("--base-url"), "{err}");
        let err = ModelSpec::parse("openai-compat:ftp://h/#m").unwrap_err();
        assert!(err.to_string().contains("http://"), "{err}");
    }

    #[test]
    fn base_url_override() {
        let spec = ModelSpec::parse("openai:gpt-4o")
            .unwrap()
            .with_base_url("http://127.0.0.1:9/v1/")
            .unwrap();
        assert_eq!(spec.base_url.as_deref(), Some("http://127.0.0.1:9/v1"));
        assert!(
            ModelSpec::parse("replay:x.jsonl")
                .unwrap()
                .with_base_url("http://h/v1")
                .is_err()
        );
    }

    #[test]
    fn shown_urls_hide_credentials() {
        assert_eq!(
            shown_url("https://user:pw@host:1/v1?key=abc"),
            "https://host:1/v1"
        );
        assert_eq!(shown_url("http://host:8000"), "http://host:8000");
        let spec = ModelSpec::parse("openai-compat:http://u:p@h:1/v1?k=s#m").unwrap();
        assert_eq!(spec.to_string(), "openai-compat:http://h:1/v1#m");
    }
}
