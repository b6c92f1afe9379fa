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
