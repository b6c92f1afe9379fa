//! Every provider against a local fake server: success with usage and cost, 429 with
//! Retry-After, 500, a timeout, a body cut off mid-stream, a context-length error and a bad key
//! (neither retried); then the concurrency limit, record/replay, and a search of all logs and
//! errors for the key.

mod llm_support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use kforge::llm::record::CanonicalRequest;
use kforge::llm::{
    Cost, FinishReason, LlmClient, LlmError, ModelSpec, Recorder, Usage, client_for,
};
use llm_support::{FAKE_KEY, ask, capture_logs, cut_off_reply, http_reply, raw_server, settings};
use serde_json::{Value, json};
use wiremock::matchers::{body_partial_json, header, method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

/// What differs between providers; the scenarios are the same for all.
struct Flavor {
    /// The model as a user names it; its base URL is set to the fake server's.
    model: &'static str,
    /// Appended to the server's address to make the base URL.
    base_path: &'static str,
    endpoint: &'static str,
    auth_header: &'static str,
    auth_value: fn() -> String,
    ok_body: fn(&str) -> Value,
    served_model: &'static str,
    usage: Usage,
    cost_usd: f64,
    context_error: fn() -> Value,
    context_limit: Option<u64>,
    auth_error: fn() -> Value,
}

const OPENAI_CHAT: Flavor = Flavor {
    model: "openai:gpt-4o",
    base_path: "/v1",
    endpoint: "/v1/chat/completions",
    auth_header: "authorization",
    auth_value: || format!("Bearer {FAKE_KEY}"),
    ok_body: |text| {
        json!({
            "id": "chatcmpl-1", "object": "chat.completion", "model": "gpt-4o-2024-08-06",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text, "refusal": null},
                         "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 1200, "completion_tokens": 300, "total_tokens": 1500,
                      "prompt_tokens_details": {"cached_tokens": 1000},
                      "completion_tokens_details": {"reasoning_tokens": 0}}
        })
    },
    served_model: "gpt-4o-2024-08-06",
    usage: Usage {
        input_tokens: 1200,
        cached_input_tokens: 1000,
        cache_write_input_tokens: 0,
        output_tokens: 300,
        reasoning_tokens: 0,
    },
    // 200 × $2.50 + 1000 × $1.25 + 300 × $10 per million.
    cost_usd: 0.00475,
    context_error: || {
        json!({"error": {"message": "This model's maximum context length is 128000 tokens. However, your messages resulted in 130012 tokens. Please reduce the length of the messages.",
                         "type": "invalid_request_error", "param": "messages", "code": "context_length_exceeded"}})
    },
    context_limit: Some(128000),
    auth_error: || {
        json!({"error": {"message": format!("Incorrect API key provided: {FAKE_KEY}. You can find your API key at https://platform.openai.com/account/api-keys."),
                         "type": "invalid_request_error", "param": null, "code": "invalid_api_key"}})
    },
};

const OPENAI_RESPONSES: Flavor = Flavor {
    // o3-pro exists only in the Responses API, so `openai:` routes it there.
    model: "openai:o3-pro",
    base_path: "/v1",
    endpoint: "/v1/responses",
    auth_header: "authorization",
    auth_value: || format!("Bearer {FAKE_KEY}"),
    ok_body: |text| {
        json!({
            "id": "resp_1", "object": "response", "status": "completed", "model": "o3-pro-2025-06-10",
            "output": [{"type": "reasoning", "id": "rs_1", "summary": []},
                       {"type": "message", "id": "msg_1", "role": "assistant", "status": "completed",
                        "content": [{"type": "output_text", "text": text, "annotations": []}]}],
            "usage": {"input_tokens": 1200, "input_tokens_details": {"cached_tokens": 1000},
                      "output_tokens": 300, "output_tokens_details": {"reasoning_tokens": 200},
                      "total_tokens": 1500}
        })
    },
    served_model: "o3-pro-2025-06-10",
    usage: Usage {
        input_tokens: 1200,
        cached_input_tokens: 1000,
        cache_write_input_tokens: 0,
        output_tokens: 300,
        reasoning_tokens: 200,
    },
    // o3-pro lists no cached rate: 1200 × $20 + 300 × $80 per million.
    cost_usd: 0.048,
    context_error: || {
        json!({"error": {"message": "Your input exceeds the context window of this model. Please adjust your input and try again.",
                         "type": "invalid_request_error", "param": "input", "code": "context_length_exceeded"}})
    },
    context_limit: None,
    auth_error: || {
        json!({"error": {"message": format!("Incorrect API key provided: {FAKE_KEY}."),
                         "type": "invalid_request_error", "param": null, "code": "invalid_api_key"}})
    },
};

const ANTHROPIC: Flavor = Flavor {
    model: "anthropic:claude-sonnet-4-5",
    base_path: "",
    endpoint: "/v1/messages",
    auth_header: "x-api-key",
    auth_value: || FAKE_KEY.to_string(),
    ok_body: |text| {
        json!({
            "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5-20250929",
            "content": [{"type": "text", "text": text}],
            "stop_reason": "end_turn", "stop_sequence": null,
            "usage": {"input_tokens": 200, "cache_read_input_tokens": 1000,
                      "cache_creation_input_tokens": 0, "output_tokens": 300}
        })
    },
    served_model: "claude-sonnet-4-5-20250929",
    usage: Usage {
        input_tokens: 1200,
        cached_input_tokens: 1000,
        cache_write_input_tokens: 0,
        output_tokens: 300,
        reasoning_tokens: 0,
    },
    // 200 × $3 + 1000 × $0.30 + 300 × $15 per million.
    cost_usd: 0.0054,
    context_error: || {
        json!({"type": "error", "error": {"type": "invalid_request_error",
                                           "message": "prompt is too long: 210000 tokens > 200000 maximum"}})
    },
    context_limit: Some(200000),
    auth_error: || {
        json!({"type": "error", "error": {"type": "authentication_error",
                                           "message": format!("invalid x-api-key {FAKE_KEY}")}})
    },
};

const OPENAI_COMPAT: Flavor = Flavor {
    // A DeepSeek-style server: OpenAI's shape, its own cache field, vLLM's error shape.
    model: "openai-compat:deepseek-chat",
    base_path: "/v1",
    endpoint: "/v1/chat/completions",
    auth_header: "authorization",
    auth_value: || format!("Bearer {FAKE_KEY}"),
    ok_body: |text| {
        json!({
            "id": "1", "object": "chat.completion", "model": "deepseek-chat",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                         "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 1200, "completion_tokens": 300, "total_tokens": 1500,
                      "prompt_cache_hit_tokens": 1000, "prompt_cache_miss_tokens": 200}
        })
    },
    served_model: "deepseek-chat",
    usage: Usage {
        input_tokens: 1200,
        cached_input_tokens: 1000,
        cache_write_input_tokens: 0,
        output_tokens: 300,
        reasoning_tokens: 0,
    },
    // 200 × $0.28 + 1000 × $0.028 + 300 × $0.42 per million.
    cost_usd: 0.00021,
    context_error: || {
        json!({"object": "error", "message": "This model's maximum context length is 32768 tokens. However, you requested 40000 tokens (39000 in the messages, 1000 in the completion).",
               "type": "BadRequestError", "param": null, "code": 400})
    },
    context_limit: Some(32768),
    auth_error: || json!({"error": format!("Unauthorized: bad key {FAKE_KEY}")}),
};

impl Flavor {
    fn client(&self, base_url: &str, settings: &kforge::config::Settings) -> Arc<dyn LlmClient> {
        let spec = ModelSpec::parse(self.model)
            .unwrap()
            .with_base_url(base_url)
            .unwrap();
        client_for(&spec, settings, None).unwrap()
    }

    fn bare_model(&self) -> &'static str {
        self.model.split_once(':').unwrap().1
    }

    /// The mock that answers correctly authenticated requests for this model.
    fn matching(&self) -> wiremock::MockBuilder {
        Mock::given(method("POST"))
            .and(path(self.endpoint))
            .and(header(self.auth_header, (self.auth_value)().as_str()))
            .and(body_partial_json(json!({ "model": self.bare_model() })))
    }

    fn ok(&self, text: &str) -> ResponseTemplate {
        ResponseTemplate::new(200).set_body_json((self.ok_body)(text))
    }

    fn base(&self, server: &MockServer) -> String {
        format!("{}{}", server.uri(), self.base_path)
    }
}

fn rate_limit_body() -> Value {
    json!({"error": {"message": "Rate limit reached for requests", "type": "requests", "code": "rate_limit_exceeded"}})
}

mod scenarios {
    use super::*;

    pub async fn success_with_usage(flavor: &Flavor) {
        let server = MockServer::start().await;
        flavor
            .matching()
            .respond_with(flavor.ok("__global__ void k() {}"))
            .expect(1)
            .mount(&server)
            .await;
        let settings = settings(Duration::from_millis(10));
        let client = flavor.client(&flavor.base(&server), &settings);
        let request = ask("Write a kernel.");
        let response = client.complete(&request).await.unwrap();
        assert_eq!(response.text, "__global__ void k() {}");
        assert_eq!(response.finish, FinishReason::Stop);
        assert_eq!(response.usage, Some(flavor.usage));
        let Cost::Known(usd) = response.cost else {
            panic!("{} has a price: {:?}", flavor.model, response.cost);
        };
        assert!((usd - flavor.cost_usd).abs() < 1e-12, "{usd}");
        assert_eq!(response.model, flavor.served_model);
        assert_eq!(response.attempts, 1);
        let spec = client.spec();
        assert_eq!(
            response.request_hash,
            CanonicalRequest::new(spec.provider, &spec.model, &request).hash()
        );
        assert!(response.latency > Duration::ZERO);
    }

    pub async fn rate_limited_then_ok(flavor: &Flavor) {
        let server = MockServer::start().await;
        // The backoff would wait 1 ms; the server asks for 300 ms and wins.
        flavor
            .matching()
            .respond_with(
                ResponseTemplate::new(429)
                    .insert_header("retry-after", "0.3")
                    .set_body_json(rate_limit_body()),
            )
            .up_to_n_times(1)
            .mount(&server)
            .await;
        flavor
            .matching()
            .respond_with(flavor.ok("after the wait"))
            .mount(&server)
            .await;
        let settings = settings(Duration::from_secs(5));
        let client = flavor.client(&flavor.base(&server), &settings);
        let started = Instant::now();
        let response = client.complete(&ask("p")).await.unwrap();
        assert!(started.elapsed() >= Duration::from_millis(300));
        assert_eq!(response.text, "after the wait");
        assert_eq!(response.attempts, 2);
        assert_eq!(server.received_requests().await.unwrap().len(), 2);
    }

    pub async fn server_error_then_ok(flavor: &Flavor) {
        let server = MockServer::start().await;
        flavor
            .matching()
            .respond_with(ResponseTemplate::new(500).set_body_string("internal error"))
            .up_to_n_times(1)
            .mount(&server)
            .await;
        flavor
            .matching()
            .respond_with(flavor.ok("second time lucky"))
            .mount(&server)
            .await;
        let settings = settings(Duration::from_millis(10));
        let client = flavor.client(&flavor.base(&server), &settings);
        let response = client.complete(&ask("p")).await.unwrap();
        assert_eq!(response.text, "second time lucky");
        assert_eq!(response.attempts, 2);
    }

    pub async fn server_errors_until_the_retries_run_out(flavor: &Flavor) {
        let server = MockServer::start().await;
        flavor
            .matching()
            .respond_with(ResponseTemplate::new(503).set_body_string("overloaded"))
            .expect(3)
            .mount(&server)
            .await;
        let settings = settings(Duration::from_millis(10));
        let client = flavor.client(&flavor.base(&server), &settings);
        let err = client.complete(&ask("p")).await.unwrap_err();
        let LlmError::GaveUp { attempts: 3, last } = &err else {
            panic!("{err:?}");
        };
        assert!(
            matches!(**last, LlmError::Server { status: 503, .. }),
            "{last:?}"
        );
        assert!(
            err.to_string().contains("gave up after 3 attempts"),
            "{err}"
        );
    }

    pub async fn timeout(flavor: &Flavor) {
        let server = MockServer::start().await;
        flavor
            .matching()
            .respond_with(flavor.ok("too late").set_delay(Duration::from_secs(3)))
            .mount(&server)
            .await;
        let mut settings = settings(Duration::from_millis(10));
        settings.llm.timeout_s = 0.2;
        settings.llm.max_retries = 1;
        let client = flavor.client(&flavor.base(&server), &settings);
        let started = Instant::now();
        let err = client.complete(&ask("p")).await.unwrap_err();
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "{:?}",
            started.elapsed()
        );
        let LlmError::GaveUp { attempts: 2, last } = &err else {
            panic!("{err:?}");
        };
        assert!(matches!(**last, LlmError::Timeout { .. }), "{last:?}");
        assert!(err.to_string().contains("no reply from"), "{err}");
        assert!(err.to_string().contains("within 0.2 s"), "{err}");
    }

    pub async fn truncated_body(flavor: &Flavor) {
        let body = (flavor.ok_body)("whole answer").to_string();
        let server = raw_server(
            vec![cut_off_reply(&body), http_reply("200 OK", &body)],
            Duration::ZERO,
        )
        .await;
        let settings = settings(Duration::from_millis(10));
        let response = flavor
            .client(&server.base_url, &settings)
            .complete(&ask("p"))
            .await
            .unwrap();
        assert_eq!(response.text, "whole answer");
        assert_eq!(response.attempts, 2);

        let always_cut = raw_server(vec![cut_off_reply(&body)], Duration::ZERO).await;
        let err = flavor
            .client(&always_cut.base_url, &settings)
            .complete(&ask("p"))
            .await
            .unwrap_err();
        let LlmError::GaveUp { last, .. } = &err else {
            panic!("{err:?}");
        };
        assert!(matches!(**last, LlmError::BadReply { .. }), "{last:?}");
        assert!(err.to_string().contains("cut off or malformed"), "{err}");

        // Complete HTTP, but the JSON itself stops halfway.
        let half_json = raw_server(
            vec![http_reply("200 OK", &body[..body.len() / 2])],
            Duration::ZERO,
        )
        .await;
        let err = flavor
            .client(&half_json.base_url, &settings)
            .complete(&ask("p"))
            .await
            .unwrap_err();
        assert!(err.to_string().contains("cut off or malformed"), "{err}");
        assert_eq!(
            half_json.requests.load(std::sync::atomic::Ordering::SeqCst),
            3
        );
    }

    pub async fn context_length_is_not_retried(flavor: &Flavor) {
        let server = MockServer::start().await;
        flavor
            .matching()
            .respond_with(ResponseTemplate::new(400).set_body_json((flavor.context_error)()))
            .expect(1)
            .mount(&server)
            .await;
        let settings = settings(Duration::from_millis(10));
        let client = flavor.client(&flavor.base(&server), &settings);
        let err = client
            .complete(&ask("a very long prompt"))
            .await
            .unwrap_err();
        let LlmError::ContextLength { limit, .. } = &err else {
            panic!("{err:?}");
        };
        assert_eq!(*limit, flavor.context_limit);
        let message = err.to_string();
        assert!(
            message.starts_with("the request exceeds the model's context window"),
            "{message}"
        );
        assert!(message.contains("shorten the prompt"), "{message}");
        assert_eq!(server.received_requests().await.unwrap().len(), 1);
    }

    pub async fn bad_key_is_not_retried(flavor: &Flavor) {
        let server = MockServer::start().await;
        Mock::given(method("POST"))
            .and(path(flavor.endpoint))
            .respond_with(ResponseTemplate::new(401).set_body_json((flavor.auth_error)()))
            .expect(1)
            .mount(&server)
            .await;
        let settings = settings(Duration::from_millis(10));
        let client = flavor.client(&flavor.base(&server), &settings);
        let err = client.complete(&ask("p")).await.unwrap_err();
        assert!(matches!(err, LlmError::Auth { status: 401, .. }), "{err:?}");
        let message = err.to_string();
        let (env, _) = client.spec().provider.key_source().unwrap();
        assert!(message.contains("rejected the API key"), "{message}");
        assert!(message.contains(env), "{message}");
        assert!(!message.contains(FAKE_KEY), "{message}");
        assert!(!format!("{err:?}").contains(FAKE_KEY));
        assert_eq!(server.received_requests().await.unwrap().len(), 1);
    }
}

macro_rules! provider_suite {
    ($module:ident, $flavor:expr) => {
        mod $module {
            use super::*;

            #[tokio::test]
            async fn success_with_usage_and_cost() {
                scenarios::success_with_usage(&$flavor).await
            }
            #[tokio::test]
            async fn rate_limited_waits_for_retry_after() {
                scenarios::rate_limited_then_ok(&$flavor).await
            }
            #[tokio::test]
            async fn server_error_then_success() {
                scenarios::server_error_then_ok(&$flavor).await
            }
            #[tokio::test]
            async fn server_errors_until_retries_run_out() {
                scenarios::server_errors_until_the_retries_run_out(&$flavor).await
            }
            #[tokio::test]
            async fn timeout() {
                scenarios::timeout(&$flavor).await
            }
            #[tokio::test]
            async fn truncated_body() {
                scenarios::truncated_body(&$flavor).await
            }
            #[tokio::test]
            async fn context_length_is_not_retried() {
                scenarios::context_length_is_not_retried(&$flavor).await
            }
            #[tokio::test]
            async fn bad_key_is_not_retried() {
                scenarios::bad_key_is_not_retried(&$flavor).await
            }
        }
    };
}

provider_suite!(llm_openai_chat, OPENAI_CHAT);
provider_suite!(llm_openai_responses, OPENAI_RESPONSES);
provider_suite!(llm_anthropic, ANTHROPIC);
provider_suite!(llm_openai_compat, OPENAI_COMPAT);

#[tokio::test]
async fn llm_coder_and_judge_share_one_concurrency_limit_per_endpoint() {
    let body = (OPENAI_COMPAT.ok_body)("ok").to_string();
    let server = raw_server(
        vec![http_reply("200 OK", &body)],
        Duration::from_millis(100),
    )
    .await;
    let mut settings = settings(Duration::from_millis(10));
    settings.llm.openai_compat.max_concurrency = 2;
    let coder = OPENAI_COMPAT.client(&server.base_url, &settings);
    let judge = OPENAI_COMPAT.client(&server.base_url, &settings);
    let mut calls = tokio::task::JoinSet::new();
    for i in 0..6 {
        let client = if i % 2 == 0 {
            coder.clone()
        } else {
            judge.clone()
        };
        calls.spawn(async move { client.complete(&ask("p")).await.map(|r| r.text) });
    }
    while let Some(result) = calls.join_next().await {
        assert_eq!(result.unwrap().unwrap(), "ok");
    }
    assert_eq!(server.requests.load(std::sync::atomic::Ordering::SeqCst), 6);
    assert_eq!(
        server
            .max_in_flight
            .load(std::sync::atomic::Ordering::SeqCst),
        2
    );
}

#[tokio::test]
async fn llm_a_recorded_exchange_replays_without_network() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("run/llm-exchanges.jsonl");
    let server = MockServer::start().await;
    OPENAI_CHAT
        .matching()
        .respond_with(OPENAI_CHAT.ok("recorded answer"))
        .mount(&server)
        .await;
    let settings = settings(Duration::from_millis(10));
    let spec = ModelSpec::parse(OPENAI_CHAT.model)
        .unwrap()
        .with_base_url(&OPENAI_CHAT.base(&server))
        .unwrap();
    let recorder = Arc::new(Recorder::create(&file).unwrap());
    let live = client_for(&spec, &settings, Some(recorder)).unwrap();
    let original = live.complete(&ask("Write a kernel.")).await.unwrap();
    drop(live);
    drop(server);

    let recording = std::fs::read_to_string(&file).unwrap();
    assert_eq!(recording.lines().count(), 1);
    assert!(!recording.contains(FAKE_KEY));
    assert!(!recording.contains("127.0.0.1"), "{recording}");
    let line: Value = serde_json::from_str(recording.trim()).unwrap();
    assert_eq!(line["request"]["provider"], "openai");
    assert_eq!(line["request"]["model"], "gpt-4o");
    assert_eq!(line["request_hash"], original.request_hash.as_str());

    let replay_spec = ModelSpec::parse(&format!("replay:{}", file.display())).unwrap();
    let replay = client_for(&replay_spec, &kforge::config::Settings::default(), None).unwrap();
    let again = replay.complete(&ask("Write a kernel.")).await.unwrap();
    assert_eq!(again.text, original.text);
    assert_eq!(again.usage, original.usage);
    assert_eq!(again.cost, original.cost);
    assert_eq!(again.model, original.model);
    assert_eq!(again.request_hash, original.request_hash);

    let err = replay
        .complete(&ask("Write another kernel."))
        .await
        .unwrap_err();
    let message = err.to_string();
    assert!(message.contains("llm-exchanges.jsonl"), "{message}");
    assert!(
        message.contains("differs from every recorded one"),
        "{message}"
    );
    let LlmError::ReplayMiss { hash, .. } = &err else {
        panic!("{err:?}");
    };
    assert_eq!(hash.len(), 64);
    assert_ne!(*hash, original.request_hash);
}

/// Every log line (all crates, trace level) and every error of calls that see the key echoed by
/// the server: none may contain it.
#[tokio::test]
async fn llm_logs_and_errors_never_show_the_key() {
    let (logs, _guard) = capture_logs();
    let server = MockServer::start().await;
    let echo = |status: u16| {
        ResponseTemplate::new(status).set_body_json(
            json!({"error": {"message": format!("key {FAKE_KEY} is not valid for this request"), "type": "x"}}),
        )
    };
    Mock::given(method("POST"))
        .and(body_partial_json(
            json!({"messages": [{"role": "system"}, {"content": "auth"}]}),
        ))
        .respond_with(echo(401))
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(body_partial_json(
            json!({"messages": [{"role": "system"}, {"content": "invalid"}]}),
        ))
        .respond_with(echo(400))
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(body_partial_json(
            json!({"messages": [{"role": "system"}, {"content": "flaky"}]}),
        ))
        .respond_with(echo(500))
        .up_to_n_times(1)
        .mount(&server)
        .await;
    OPENAI_CHAT
        .matching()
        .respond_with(OPENAI_CHAT.ok("fine"))
        .mount(&server)
        .await;
    let settings = settings(Duration::from_millis(10));
    let client = OPENAI_CHAT.client(&OPENAI_CHAT.base(&server), &settings);
    let mut shown = Vec::new();
    for prompt in ["auth", "invalid", "flaky", "fine"] {
        match client.complete(&ask(prompt)).await {
            Ok(response) => shown.push(format!("{response:?}")),
            Err(err) => shown.push(format!("{err} {err:?}")),
        }
    }
    shown.push(format!("{:?}", settings.llm));
    let logs = logs.text();
    assert!(logs.contains("sending LLM request"), "{logs}");
    assert!(logs.contains("retrying"), "{logs}");
    assert!(
        logs.contains("<redacted>"),
        "the echoed key reaches the retry log, redacted"
    );
    assert!(!logs.contains(FAKE_KEY), "{logs}");
    for text in &shown {
        assert!(!text.contains(FAKE_KEY), "{text}");
    }
    assert!(shown[0].contains("rejected the API key"), "{}", shown[0]);
    assert!(
        shown[1].contains("rejected the request as invalid"),
        "{}",
        shown[1]
    );
    // The key did go to the server, in the header and nowhere else.
    let requests = server.received_requests().await.unwrap();
    assert!(requests.iter().all(|r| {
        r.headers
            .get("authorization")
            .map(|v| v.to_str().unwrap().to_string())
            == Some(format!("Bearer {FAKE_KEY}"))
            && !String::from_utf8_lossy(&r.body).contains(FAKE_KEY)
    }));
}
