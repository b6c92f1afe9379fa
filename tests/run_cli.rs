//! `kforge demo` and `kforge run` as a user runs them on a machine without a GPU: the shipped
//! scripted session walks a real tree through the real nvcc (compile-only, said so), a run is
//! resumed with a raised budget, the run directory keeps no home-folder paths, and bad
//! invocations say what to do. The same session on the GPU host goes through verification,
//! timing and profiling in scripts/gpu-check.sh (`run` step).

use std::path::Path;

use assert_cmd::Command;

fn kforge(home: &Path) -> Command {
    let mut cmd = Command::cargo_bin("kforge").unwrap();
    cmd.env("KFORGE_CONFIG", home.join("none.toml"));
    cmd
}

fn has_gpu() -> bool {
    kforge::gpu::list().is_ok()
}

fn files_under(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(files_under(&path));
        } else {
            out.push(path);
        }
    }
    out
}

fn run_dir(runs: &Path) -> std::path::PathBuf {
    let mut dirs: Vec<_> = std::fs::read_dir(runs)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(dirs.len(), 1, "{dirs:?}");
    dirs.pop().unwrap()
}

#[test]
fn the_demo_walks_a_scripted_session_compile_only() {
    if has_gpu() {
        eprintln!("SKIP (a GPU is present): this test pins the compile-only demo");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let runs = dir.path().join("runs");
    let out = kforge(dir.path())
        .arg("demo")
        .arg("--runs")
        .arg(&runs)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("scripted demo"), "{stdout}");
    assert!(stderr.contains("compile-only"), "{stderr}");
    assert!(stdout.contains("8 candidates"), "{stdout}");
    assert!(stdout.contains("8 built (not verified)"), "{stdout}");
    assert!(stdout.contains("no correct kernel"), "{stdout}");

    let root = run_dir(&runs);
    for file in ["events.jsonl", "tree.json", "summary.json", "llm.jsonl"] {
        assert!(root.join(file).is_file(), "{file}");
    }
    // Real nvcc builds: ptxas reported registers for the first kernel.
    let log = std::fs::read_to_string(root.join("nodes/1/compile.log")).unwrap();
    assert!(log.contains("registers"), "{log}");
    let eval: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(root.join("nodes/1/eval.json")).unwrap())
            .unwrap();
    assert_eq!(eval["status"], "compiled");
    // The Judge of node 3 read node 1 (its parent) and was told why there is no profile.
    let home = dirs::home_dir().unwrap();
    let home = home.to_string_lossy();
    for file in files_under(&root) {
        let Ok(text) = std::fs::read_to_string(&file) else {
            continue;
        };
        assert!(
            !text.contains(home.as_ref()),
            "{} spells out the home folder",
            file.display()
        );
    }
}

#[test]
fn a_run_is_resumed_with_a_raised_budget() {
    if has_gpu() {
        eprintln!("SKIP (a GPU is present): this test pins compile-only runs");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let bundles = dir.path().join("bundles");
    kforge(dir.path())
        .args([
            "import",
            "kernelbench/problems/softmax_rows.py",
            "--size",
            "batch_size=4",
            "--size",
            "dim=512",
            "--out",
        ])
        .arg(&bundles)
        .assert()
        .success();
    let runs = dir.path().join("runs");
    let run = |args: &[&str]| {
        let out = kforge(dir.path())
            .arg("run")
            .args(args)
            .args(["--lines", "--json"])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(out.status.success(), "{stderr}");
        let summary: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        (summary, stderr)
    };
    let bundle = bundles.join("softmax_rows");
    let (first, stderr) = run(&[
        bundle.to_str().unwrap(),
        "--scripted",
        "demo/softmax_rows",
        "--max-nodes",
        "3",
        "--runs",
        runs.to_str().unwrap(),
        "--name",
        "r",
    ]);
    assert_eq!(first["nodes"], 3, "{first}");
    assert!(
        first["run_dir"].as_str().unwrap().ends_with("runs/r"),
        "{first}"
    );
    let kept: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(runs.join("r/summary.json")).unwrap())
            .unwrap();
    assert!(kept.get("run_dir").is_none(), "{kept}");
    assert!(stderr.contains("node 3 (from"), "{stderr}");
    let (second, _) = run(&[
        "--resume",
        runs.join("r").to_str().unwrap(),
        "--max-nodes",
        "5",
    ]);
    assert_eq!(second["nodes"], 5, "{second}");
    assert_eq!(second["stopped_because"], "node budget reached");
    let events = std::fs::read_to_string(runs.join("r/events.jsonl")).unwrap();
    assert_eq!(events.matches("\"event\":\"started\"").count(), 1);
    assert_eq!(events.matches("\"event\":\"resumed\"").count(), 1);
    // The first three nodes were not redone.
    assert_eq!(
        events.matches("\"entry\":\"completed\"").count(),
        5,
        "{events}"
    );
}

#[test]
fn bad_runs_say_what_to_do() {
    let dir = tempfile::tempdir().unwrap();
    let fails = |args: &[&str], expected: &str| {
        let out = kforge(dir.path())
            .env_remove("KFORGE_CODER")
            .env_remove("KFORGE_JUDGE")
            .arg("run")
            .args(args)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(expected), "{args:?}: {stderr}");
    };
    fails(&[], "required");
    fails(
        &["--resume", dir.path().to_str().unwrap()],
        "not a kforge run directory",
    );
    fails(&["no-such-bundle"], "no coder model is configured");
    fails(
        &["no-such-bundle", "--scripted", "demo/softmax_rows"],
        "no-such-bundle",
    );
    fails(
        &[
            "kernelbench/problems/gelu_activation.py",
            "--policy",
            "greedy",
        ],
        "unknown --policy greedy",
    );
}

/// Answers like OpenAI's Chat Completions: the Judge's JSON or the Coder's kernel, by prompt.
struct FakeOpenAi {
    kernel: String,
}

impl wiremock::Respond for FakeOpenAi {
    fn respond(&self, request: &wiremock::Request) -> wiremock::ResponseTemplate {
        let body: serde_json::Value = serde_json::from_slice(&request.body).unwrap();
        let prompt = body["messages"].to_string();
        let text = if prompt.contains("critical_issue") {
            r#"{"critical_issue": "the tail is skipped", "fix": "bound the loop by cols"}"#
                .to_string()
        } else if prompt.contains("prescriptions") {
            r#"{"bottleneck": {"diagnosis": "not measured here", "evidence": [{"metric": "evaluation", "value": "compile-only"}]},
                "prescriptions": [{"rank": 1, "edit": "load float4", "rationale": "fewer loads", "prediction": "time -20%"},
                                  {"rank": 2, "edit": "one warp per row", "rationale": "less sync", "prediction": "time -10%"}]}"#
                .to_string()
        } else {
            format!("Here it is.\n\n```cuda\n{}```\n", self.kernel)
        };
        wiremock::ResponseTemplate::new(200).set_body_json(serde_json::json!({
            "id": "chatcmpl-1", "object": "chat.completion", "model": "gpt-4o-2024-08-06",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                         "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 1200, "completion_tokens": 300, "total_tokens": 1500}
        }))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_run_pays_for_each_call_once_and_keeps_no_key() {
    if has_gpu() {
        eprintln!("SKIP (a GPU is present): this test pins compile-only runs");
        return;
    }
    let server = wiremock::MockServer::start().await;
    let kernel =
        std::fs::read_to_string("tests/fixtures/candidates/softmax_rows_correct.cu").unwrap();
    wiremock::Mock::given(wiremock::matchers::method("POST"))
        .and(wiremock::matchers::path("/v1/chat/completions"))
        .respond_with(FakeOpenAi { kernel })
        .mount(&server)
        .await;
    let dir = tempfile::tempdir().unwrap();
    let base_url = format!("{}/v1", server.uri());
    let root = dir.path().to_path_buf();
    let run = move |args: Vec<String>| {
        let root = root.clone();
        let base_url = base_url.clone();
        tokio::task::spawn_blocking(move || {
            let mut command = kforge(&root);
            command
                .env("OPENAI_API_KEY", "sk-test-secret-4242")
                .env("OPENAI_BASE_URL", &base_url)
                .args(&args);
            command.output().unwrap()
        })
    };
    let out = run(vec![
        "import".into(),
        "kernelbench/problems/softmax_rows.py".into(),
        "--size".into(),
        "batch_size=4".into(),
        "--size".into(),
        "dim=512".into(),
        "--out".into(),
        dir.path().join("bundles").to_string_lossy().into_owned(),
    ])
    .await
    .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let runs = dir.path().join("runs");
    let args = |extra: &[&str]| -> Vec<String> {
        let mut args: Vec<String> = vec!["run".into()];
        args.extend(extra.iter().map(|s| s.to_string()));
        args.extend(["--lines", "--json"].map(String::from));
        args
    };
    let bundle = dir.path().join("bundles/softmax_rows");
    // Without a GPU, models are not paid for unmeasured kernels unless asked to be.
    let out = run(args(&[
        bundle.to_str().unwrap(),
        "--coder",
        "openai:gpt-4o",
        "--judge",
        "openai:gpt-4o",
        "--runs",
        runs.to_str().unwrap(),
    ]))
    .await
    .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--compile-only"));
    assert!(server.received_requests().await.unwrap().is_empty());
    let out = run(args(&[
        bundle.to_str().unwrap(),
        "--coder",
        "openai:gpt-4o",
        "--judge",
        "openai:gpt-4o",
        "--max-nodes",
        "3",
        "--parallel",
        "2",
        "--max-dollars",
        "5",
        "--compile-only",
        "--runs",
        runs.to_str().unwrap(),
        "--name",
        "live",
    ]))
    .await
    .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(summary["nodes"], 3, "{summary}");
    let served = server.received_requests().await.unwrap().len();
    let recorded = std::fs::read_to_string(runs.join("live/llm.jsonl"))
        .unwrap()
        .lines()
        .count();
    assert_eq!(served, recorded, "every call recorded once");
    assert_eq!(summary["tokens"], 1500 * served as u64, "{summary}");
    // gpt-4o at list price: 1200 in and 300 out per call.
    let dollars = summary["dollars"].as_f64().unwrap();
    assert!(
        (dollars - served as f64 * (1200.0 * 2.5e-6 + 300.0 * 10e-6)).abs() < 1e-9,
        "{dollars}"
    );

    // Raise the budget and resume: only the new node's calls reach the server.
    let out = run(args(&[
        "--resume",
        runs.join("live").to_str().unwrap(),
        "--max-nodes",
        "4",
    ]))
    .await
    .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(summary["nodes"], 4, "{summary}");
    let served_after = server.received_requests().await.unwrap().len();
    let recorded = std::fs::read_to_string(runs.join("live/llm.jsonl"))
        .unwrap()
        .lines()
        .count();
    assert_eq!(served_after, recorded);
    assert!(
        served_after > served && served_after <= served + 2,
        "{served} then {served_after}"
    );
    for file in files_under(&runs.join("live")) {
        if let Ok(text) = std::fs::read_to_string(&file) {
            assert!(
                !text.contains("sk-test-secret-4242"),
                "{} holds the key",
                file.display()
            );
        }
    }
}
