//! The HTTP client behind every real provider: reqwest carries the request, [`super::provider`]
//! says what the JSON means, [`super::retry`] says whether to try again. Each attempt holds a
//! permit of the endpoint's concurrency limit (shared by every client of that provider and base
//! URL in the process) and has its own timeout; waits between attempts hold no permit.
//!
//! The key goes only into a sensitive header. Server text that reaches an error has the key
//! replaced ([`redact`]), URLs are shown without query or user part ([`shown_url`]), and no log
//! line carries headers or bodies.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant, SystemTime};

use tokio::sync::Semaphore;

use crate::config::{LlmSettings, Secret};

use super::provider::{self, Api, Reply};
use super::record::{CanonicalRequest, RecordedExchange, RecordedResponse, Recorder};
use super::retry::{self, RetryClass, RetryPolicy};
use super::{
    ChatRequest, ChatResponse, LlmClient, LlmError, LlmFuture, ModelSpec, PriceTable, ProviderKind,
    redact, shown_url,
};

const OPENAI_BASE_URL: &str = "https://api.openai.com/v1";
const ANTHROPIC_BASE_URL: &str = "https://api.anthropic.com";

#[derive(Debug)]
pub struct HttpClient {
    spec: ModelSpec,
    api: Api,
    url: String,
    /// `url` as errors and logs may show it.
    shown_url: String,
    key: Option<Secret>,
    http: reqwest::Client,
    timeout: Duration,
    limit: Arc<Semaphore>,
    retry: RetryPolicy,
    prices: Arc<PriceTable>,
    recorder: Option<Arc<Recorder>>,
}

impl HttpClient {
    pub fn new(
        spec: ModelSpec,
        llm: &LlmSettings,
        prices: Arc<PriceTable>,
        recorder: Option<Arc<Recorder>>,
    ) -> Result<HttpClient, LlmError> {
        let (settings, default_base) = match spec.provider {
            ProviderKind::OpenAi | ProviderKind::OpenAiResponses => {
                (&llm.openai, Some(OPENAI_BASE_URL))
            }
            ProviderKind::Anthropic => (&llm.anthropic, Some(ANTHROPIC_BASE_URL)),
            ProviderKind::OpenAiCompat => (&llm.openai_compat, None),
            ProviderKind::Replay => {
                return Err(LlmError::BadModel {
                    text: spec.to_string(),
                    reason: "a replay has no HTTP endpoint".into(),
                });
            }
        };
        let base_url = spec
            .base_url
            .clone()
            .or_else(|| settings.base_url.clone())
            .or_else(|| default_base.map(str::to_string))
            .ok_or(LlmError::MissingBaseUrl)?;
        let key = settings
            .api_key
            .clone()
            .filter(|key| !key.expose().is_empty());
        // A local compatible server (vLLM, Ollama) usually takes no key.
        if key.is_none()
            && spec.provider != ProviderKind::OpenAiCompat
            && let Some((env, key)) = spec.provider.key_source()
        {
            return Err(LlmError::MissingKey {
                provider: spec.provider,
                env,
                key,
            });
        }
        let api = Api::for_spec(&spec);
        let url = api.endpoint_url(&base_url);
        if reqwest::Url::parse(&url).is_err() {
            return Err(LlmError::BadSetting {
                key: "base_url",
                reason: format!("`{}` is not a URL", shown_url(&base_url)),
            });
        }
        let timeout = retry::seconds("llm.timeout_s", llm.timeout_s)?;
        if timeout.is_zero() {
            return Err(LlmError::BadSetting {
                key: "llm.timeout_s",
                reason: "a timeout of 0 s would fail every call".into(),
            });
        }
        // No redirects: reqwest would carry `x-api-key` to wherever a redirect points, and no
        // provider redirects its API calls.
        let http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| LlmError::HttpSetup {
                detail: error_chain(&e),
            })?;
        let limit = endpoint_limit(
            format!("{}|{url}", spec.provider),
            settings.max_concurrency as usize,
        );
        Ok(HttpClient {
            shown_url: shown_url(&url),
            spec,
            api,
            url,
            key,
            http,
            timeout,
            limit,
            retry: RetryPolicy::from_settings(llm)?,
            prices,
            recorder,
        })
    }

    async fn call(&self, request: &ChatRequest) -> Result<ChatResponse, LlmError> {
        let canonical = CanonicalRequest::new(self.spec.provider, &self.spec.model, request);
        let request_hash = canonical.hash();
        let body = self.api.request_body(&self.spec.model, request)?;
        let started = Instant::now();
        let mut attempts = 0;
        let reply = loop {
            attempts += 1;
            tracing::debug!(model = %self.spec, url = %self.shown_url, attempt = attempts, "sending LLM request");
            let err = match self.attempt(&body).await {
                Ok(reply) => break reply,
                Err(err) => err,
            };
            let class = retry::classify(&err);
            if class == RetryClass::Fatal {
                return Err(err);
            }
            if attempts > self.retry.max_retries {
                return Err(if attempts == 1 {
                    err
                } else {
                    LlmError::GaveUp {
                        attempts,
                        last: Box::new(err),
                    }
                });
            }
            let wait = self.retry.delay(attempts, &err);
            tracing::warn!(
                model = %self.spec,
                attempt = attempts,
                wait_ms = wait.as_millis() as u64,
                rate_limited = class == RetryClass::RateLimited,
                "LLM call failed, retrying: {err}"
            );
            tokio::time::sleep(wait).await;
        };
        let latency = started.elapsed();
        let served_model = reply.model.unwrap_or_else(|| self.spec.model.clone());
        let cost = self.prices.cost(
            &[self.spec.model.as_str(), served_model.as_str()],
            reply.usage.as_ref(),
        );
        tracing::debug!(
            model = %self.spec,
            latency_ms = latency.as_millis() as u64,
            attempts,
            input_tokens = reply.usage.map(|u| u.input_tokens),
            output_tokens = reply.usage.map(|u| u.output_tokens),
            "LLM reply"
        );
        if let Some(recorder) = &self.recorder {
            recorder.record(&RecordedExchange {
                request_hash: request_hash.clone(),
                request: canonical,
                response: RecordedResponse {
                    text: reply.text.clone(),
                    finish: reply.finish.clone(),
                    usage: reply.usage,
                    model: served_model.clone(),
                    latency_ms: latency.as_millis() as u64,
                },
            })?;
        }
        Ok(ChatResponse {
            text: reply.text,
            finish: reply.finish,
            usage: reply.usage,
            cost,
            latency,
            model: served_model,
            request_hash,
            attempts,
        })
    }

    /// One HTTP exchange, holding a permit of the endpoint's concurrency limit.
    async fn attempt(&self, body: &serde_json::Value) -> Result<Reply, LlmError> {
        let _permit = self
            .limit
            .acquire()
            .await
            .map_err(|_| LlmError::HttpSetup {
                detail: "the concurrency limit was closed".into(),
            })?;
        let response = self
            .http
            .post(&self.url)
            .headers(
                self.api
                    .auth_headers(self.spec.provider, self.key.as_ref())?,
            )
            .timeout(self.timeout)
            .json(body)
            .send()
            .await
            .map_err(|e| self.transport_error(&e))?;
        let status = response.status();
        let retry_after = retry::retry_after(response.headers(), SystemTime::now());
        let bytes = response
            .bytes()
            .await
            .map_err(|e| self.transport_error(&e))?;
        let text = String::from_utf8_lossy(&bytes);
        if !status.is_success() {
            return Err(provider::error_for_status(
                self.spec.provider,
                status.as_u16(),
                &self.shown_url,
                &redact(&text, self.key.as_ref()),
                retry_after,
            ));
        }
        self.api
            .parse_reply(&text)
            .map_err(|detail| LlmError::BadReply {
                url: self.shown_url.clone(),
                detail: redact(&detail, self.key.as_ref()),
            })
    }

    fn transport_error(&self, err: &reqwest::Error) -> LlmError {
        let url = self.shown_url.clone();
        let detail = redact(&error_chain(err), self.key.as_ref());
        if err.is_timeout() {
            LlmError::Timeout {
                url,
                after: self.timeout,
            }
        } else if err.is_connect() {
            LlmError::Connect { url, detail }
        } else if err.is_body() || err.is_decode() {
            LlmError::BadReply { url, detail }
        } else {
            LlmError::Transport { url, detail }
        }
    }
}

impl LlmClient for HttpClient {
    fn complete<'a>(&'a self, request: &'a ChatRequest) -> LlmFuture<'a> {
        Box::pin(self.call(request))
    }

    fn spec(&self) -> &ModelSpec {
        &self.spec
    }
}

/// What failed and its innermost cause (the most specific one, e.g. "Connection refused"),
/// without the URL reqwest puts in (it is shown apart).
fn error_chain(err: &reqwest::Error) -> String {
    let mut innermost = None;
    let mut source: Option<&dyn std::error::Error> = std::error::Error::source(err);
    while let Some(cause) = source {
        innermost = Some(cause.to_string());
        source = cause.source();
    }
    let head = if err.is_timeout() {
        "timed out"
    } else if err.is_connect() {
        "connection failed"
    } else if err.is_body() {
        "reading the body failed"
    } else if err.is_decode() {
        "decoding the body failed"
    } else {
        "request failed"
    };
    match innermost {
        Some(cause) => format!("{head}: {cause}"),
        None => head.to_string(),
    }
}

/// The semaphore that bounds requests in flight to one endpoint, created with `permits` (at least
/// 1) by the first client of that endpoint and shared by all later ones.
fn endpoint_limit(endpoint: String, permits: usize) -> Arc<Semaphore> {
    static LIMITS: OnceLock<Mutex<HashMap<String, Arc<Semaphore>>>> = OnceLock::new();
    let mut limits = LIMITS
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    limits
        .entry(endpoint)
        .or_insert_with(|| Arc::new(Semaphore::new(permits.max(1))))
        .clone()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Settings;

    fn client(spec: &str, settings: &Settings) -> Result<HttpClient, LlmError> {
        HttpClient::new(
            ModelSpec::parse(spec).unwrap(),
            &settings.llm,
            PriceTable::shipped(),
            None,
        )
    }

    #[test]
    fn keys_and_urls_are_checked_up_front() {
        let mut settings = Settings::default();
        let err = client("openai:gpt-4o", &settings).unwrap_err().to_string();
        assert!(err.contains("OPENAI_API_KEY"), "{err}");
        let err = client("anthropic:claude-haiku-4-5", &settings)
            .unwrap_err()
            .to_string();
        assert!(err.contains("ANTHROPIC_API_KEY"), "{err}");
        assert!(matches!(
            client("openai-compat:qwen3-coder", &settings),
            Err(LlmError::MissingBaseUrl)
        ));
        // A compatible server needs no key.
        let compat = client("openai-compat:http://127.0.0.1:9/v1#m", &settings).unwrap();
        assert_eq!(compat.url, "http://127.0.0.1:9/v1/chat/completions");

        settings.llm.openai.api_key = Some(Secret::new("sk-x"));
        settings.llm.openai.base_url = Some("http://proxy.local/v1".into());
        let openai = client("openai:o3-pro", &settings).unwrap();
        assert_eq!(openai.url, "http://proxy.local/v1/responses");

        settings.llm.timeout_s = 0.0;
        let err = client("openai:o3", &settings).unwrap_err().to_string();
        assert!(err.contains("llm.timeout_s"), "{err}");
    }

    #[test]
    fn one_limit_per_endpoint() {
        let a = endpoint_limit("test|a".into(), 3);
        let again = endpoint_limit("test|a".into(), 10);
        let b = endpoint_limit("test|b".into(), 0);
        assert!(Arc::ptr_eq(&a, &again));
        assert_eq!(a.available_permits(), 3);
        assert_eq!(b.available_permits(), 1);
    }
}
