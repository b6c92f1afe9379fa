//! `kforge llm test` run as a user runs it: the real binary, an empty environment but for a fake
//! key, a config file in a temp folder, and a local fake server.

mod llm_support;

use std::path::Path;

use assert_cmd::Command;
use llm_support::FAKE_KEY;
use serde_json::json;
use wiremock::matchers::{body_partial_json, header, method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

/// `kforge <args>` in `dir`, with only PATH, HOME, a config file that makes retries fast, and
/// the extra variables given.
fn kforge(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Run {
    let config = dir.join("config.toml");
    std::fs::write(
        &config,
        "[llm]\nmax_retries = 1\nretry_base_delay_s = 0.001\ntimeout_s = 10\n",
    )
    .unwrap();
    let mut command = Command::cargo_bin("kforge").unwrap();
    command
        .args(args)
        .current_dir(dir)
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("HOME", dir)
        .env("KFORGE_CONFIG", &config);
    for (name, value) in env {
        command.env(name, value);
    }
    let out = command.output().unwrap();
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

fn chat_reply(text: &str, model: &str) -> ResponseTemplate {
    ResponseTemplate::new(200).set_body_json(json!({
        "id": "1", "object": "chat.completion", "model": model,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 14, "completion_tokens": 2, "total_tokens": 16}
    }))
}

#[tokio::test]
async fn llm_test_against_a_compatible_server_prints_tokens_latency_and_cost() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .and(body_partial_json(json!({
            "model": "qwen3-coder-plus",
            "max_tokens": 1024,
            "messages": [{"role": "user", "content": "Reply with the single word: ready"}]
        })))
        .respond_with(chat_reply(
            "ready\nanything after the first line",
            "qwen3-coder-plus",
        ))
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .and(body_partial_json(json!({"model": "my-own-finetune"})))
        .respond_with(chat_reply("ready", "my-own-finetune"))
        .mount(&server)
        .await;
    let dir = tempfile::tempdir().unwrap();
    let model = format!("openai-compat:{}/v1#qwen3-coder-plus", server.uri());
    let run = kforge(dir.path(), &["llm", "test", "--model", &model], &[]);
    assert_eq!(run.code, 0, "{}{}", run.stdout, run.stderr);
    let lines: Vec<&str> = run.stdout.lines().collect();
    assert_eq!(lines[0], format!("model    {model}"));
    assert_eq!(lines[1], "reply    ready");
    assert!(
        lines[2].starts_with("latency  ") && lines[2].ends_with(" s (1 attempt)"),
        "{}",
        lines[2]
    );
    assert_eq!(lines[3], "tokens   14 in (0 cached), 2 out (0 reasoning)");
    // qwen3-coder-plus: 14 in at $1, 2 out at $5 per million.
    assert_eq!(lines[4], "cost     $0.000024");
    assert_eq!(lines.len(), 5, "{}", run.stdout);

    // The same server through the configured base URL, with a model the price table lacks.
    let run = kforge(
        dir.path(),
        &["llm", "test", "--model", "openai-compat:my-own-finetune"],
        &[("KFORGE_COMPAT_BASE_URL", &format!("{}/v1", server.uri()))],
    );
    assert_eq!(run.code, 0, "{}{}", run.stdout, run.stderr);
    assert!(
        run.stdout
            .contains("cost     unknown (the model is not in the price table"),
        "{}",
        run.stdout
    );
}

#[tokio::test]
async fn llm_test_never_prints_the_key_even_at_trace_level() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(body_partial_json(
            json!({"messages": [{"content": "good"}]}),
        ))
        .respond_with(chat_reply("fine", "gpt-4o-2024-08-06"))
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(401).set_body_json(json!({"error": {
            "message": format!("Incorrect API key provided: {FAKE_KEY}."),
            "type": "invalid_request_error", "code": "invalid_api_key"}})))
        .mount(&server)
        .await;
    let dir = tempfile::tempdir().unwrap();
    let base = format!("{}/v1", server.uri());
    let env = [("OPENAI_API_KEY", FAKE_KEY), ("RUST_LOG", "trace")];
    let test = |prompt: &str| {
        kforge(
            dir.path(),
            &[
                "-vvv",
                "llm",
                "test",
                "--model",
                "openai:gpt-4o",
                "--base-url",
                &base,
                "--prompt",
                prompt,
            ],
            &env,
        )
    };
    let rejected = test("bad");
    assert_eq!(rejected.code, 1, "{}{}", rejected.stdout, rejected.stderr);
    assert!(
        rejected
            .stderr
            .contains("openai rejected the API key (HTTP 401): check OPENAI_API_KEY"),
        "{}",
        rejected.stderr
    );
    let accepted = test("good");
    assert_eq!(accepted.code, 0, "{}{}", accepted.stdout, accepted.stderr);
    assert!(
        accepted.stdout.contains("reply    fine"),
        "{}",
        accepted.stdout
    );
    assert!(
        accepted.stderr.contains("sending LLM request"),
        "trace logs were on: {}",
        accepted.stderr
    );
    for run in [&rejected, &accepted] {
        assert!(!run.stdout.contains(FAKE_KEY), "{}", run.stdout);
        assert!(!run.stderr.contains(FAKE_KEY), "{}", run.stderr);
    }
    // The key was sent, as a header only.
    let requests = server.received_requests().await.unwrap();
    assert_eq!(requests.len(), 2);
    for request in requests {
        assert_eq!(
            request
                .headers
                .get("authorization")
                .unwrap()
                .to_str()
                .unwrap(),
            format!("Bearer {FAKE_KEY}")
        );
    }
}

#[tokio::test]
async fn llm_test_records_then_replays_with_no_server() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .and(header(
            "authorization",
            format!("Bearer {FAKE_KEY}").as_str(),
        ))
        .respond_with(chat_reply("ready to optimize", "gpt-4o-2024-08-06"))
        .expect(1)
        .mount(&server)
        .await;
    let dir = tempfile::tempdir().unwrap();
    let base = format!("{}/v1", server.uri());
    let live = kforge(
        dir.path(),
        &[
            "llm",
            "test",
            "--model",
            "openai:gpt-4o",
            "--base-url",
            &base,
            "--record",
            "run/exchanges.jsonl",
        ],
        &[("OPENAI_API_KEY", FAKE_KEY)],
    );
    assert_eq!(live.code, 0, "{}{}", live.stdout, live.stderr);
    drop(server);

    let recording = std::fs::read_to_string(dir.path().join("run/exchanges.jsonl")).unwrap();
    assert!(!recording.contains(FAKE_KEY));
    let replayed = kforge(
        dir.path(),
        &["llm", "test", "--model", "replay:run/exchanges.jsonl"],
        &[],
    );
    assert_eq!(replayed.code, 0, "{}{}", replayed.stdout, replayed.stderr);
    let body = |out: &str| -> Vec<String> {
        out.lines()
            .filter(|l| l.starts_with("reply") || l.starts_with("tokens") || l.starts_with("cost"))
            .map(str::to_string)
            .collect()
    };
    assert_eq!(body(&replayed.stdout), body(&live.stdout));
    assert!(replayed.stdout.contains("reply    ready to optimize"));

    let missed = kforge(
        dir.path(),
        &[
            "llm",
            "test",
            "--model",
            "replay:run/exchanges.jsonl",
            "--prompt",
            "something else",
        ],
        &[],
    );
    assert_eq!(missed.code, 1, "{}{}", missed.stdout, missed.stderr);
    assert!(
        missed
            .stderr
            .contains("no recorded exchange in run/exchanges.jsonl matches"),
        "{}",
        missed.stderr
    );
    assert!(missed.stderr.contains("differs from every recorded one"));
}

#[test]
fn llm_test_replays_the_shipped_fixture() {
    let dir = tempfile::tempdir().unwrap();
    let fixture =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/llm/llm-test-gpt-4o.jsonl");
    let model = format!("replay:{}", fixture.display());
    let run = kforge(dir.path(), &["llm", "test", "--model", &model], &[]);
    assert_eq!(run.code, 0, "{}{}", run.stdout, run.stderr);
    assert!(run.stdout.contains("reply    ready\n"), "{}", run.stdout);
    assert!(
        run.stdout
            .contains("tokens   14 in (0 cached), 2 out (0 reasoning)")
    );
    // gpt-4o: 14 in at $2.50, 2 out at $10 per million.
    assert!(run.stdout.contains("cost     $0.000055"), "{}", run.stdout);
}

#[test]
fn llm_test_explains_what_is_missing() {
    let dir = tempfile::tempdir().unwrap();
    let run = kforge(dir.path(), &["llm", "test"], &[]);
    assert_eq!(run.code, 2, "{}{}", run.stdout, run.stderr);
    assert!(
        run.stderr
            .contains("no coder model is configured: set llm.coder"),
        "{}",
        run.stderr
    );

    let run = kforge(dir.path(), &["llm", "test", "--model", "gpt-4o"], &[]);
    assert_eq!(run.code, 2);
    assert!(
        run.stderr.contains("did you mean openai:gpt-4o?"),
        "{}",
        run.stderr
    );

    let run = kforge(
        dir.path(),
        &["llm", "test", "--judge"],
        &[("KFORGE_JUDGE", "anthropic:claude-haiku-4-5")],
    );
    assert_eq!(run.code, 1, "{}{}", run.stdout, run.stderr);
    assert!(
        run.stderr
            .contains("no API key for anthropic: set ANTHROPIC_API_KEY"),
        "{}",
        run.stderr
    );

    // Nothing listens on port 9 of this machine.
    let run = kforge(
        dir.path(),
        &[
            "llm",
            "test",
            "--model",
            "openai-compat:http://127.0.0.1:9/v1#m",
        ],
        &[],
    );
    assert_eq!(run.code, 1, "{}{}", run.stdout, run.stderr);
    assert!(
        run.stderr
            .contains("cannot connect to http://127.0.0.1:9/v1/chat/completions"),
        "{}",
        run.stderr
    );
    assert!(
        run.stderr.contains("gave up after 2 attempts"),
        "{}",
        run.stderr
    );
}
