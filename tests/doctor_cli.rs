//! `kforge doctor` as a user runs it, with fake nvcc, ncu and python3 first on PATH printing the
//! real error texts of those tools, and an empty kforge home so no cached tool is used.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use assert_cmd::Command;

fn fake(dir: &Path, name: &str, script: &str) {
    let path = dir.join(name);
    std::fs::write(&path, format!("#!/bin/sh\n{script}\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

fn doctor(bin: &Path, home: &Path) -> (i32, serde_json::Value) {
    let path = format!("{}:/usr/bin:/bin", bin.display());
    let out = Command::cargo_bin("kforge")
        .unwrap()
        .args(["doctor", "--json", "--need", "compile"])
        .env_clear()
        .env("PATH", path)
        .env("HOME", home)
        .env("KFORGE_HOME", home.join("kforge"))
        .env("KFORGE_CONFIG", home.join("none.toml"))
        .output()
        .unwrap();
    let report = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)));
    (out.status.code().unwrap_or(-1), report)
}

fn probe<'a>(report: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    report["probes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == name)
        .unwrap()
}

#[test]
fn fake_tools_on_path_report_their_real_errors() {
    let dir = tempfile::tempdir().unwrap();
    let bin = dir.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    fake(
        &bin,
        "nvcc",
        "case \"$1\" in --version) echo 'Cuda compilation tools, release 11.4, V11.4.48';; \
         *) echo \"nvcc fatal   : Unsupported gpu architecture 'compute_90'\" >&2; exit 1;; esac",
    );
    fake(
        &bin,
        "ncu",
        "case \"$1\" in --version) echo 'Version 2025.3.1.0 (build 36398880) (public-release)';; \
         *) echo '==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU Performance Counters on the target device 0.'; exit 1;; esac",
    );
    fake(
        &bin,
        "python3",
        "echo 'Traceback (most recent call last):' >&2; \
         echo \"ModuleNotFoundError: No module named 'torch'\" >&2; exit 1",
    );
    let (code, report) = doctor(&bin, dir.path());
    assert_eq!(code, 1, "compile is impossible with this nvcc: {report}");
    let nvcc = probe(&report, "nvcc");
    assert_eq!(nvcc["status"], "unusable");
    assert!(
        nvcc["reason"]
            .as_str()
            .unwrap()
            .contains("Unsupported gpu architecture")
    );
    assert!(nvcc["summary"].as_str().unwrap().contains("11.4.48"));
    let python = probe(&report, "python");
    assert_eq!(python["status"], "unusable");
    assert!(
        python["reason"]
            .as_str()
            .unwrap()
            .contains("No module named 'torch'"),
        "{python}"
    );
    // Without a GPU the counters cannot be checked; with one the fake's ERR_NVGPUCTRPERM shows.
    let ncu = probe(&report, "ncu");
    assert_eq!(ncu["status"], "unusable");
    assert_eq!(ncu["facts"]["version"], "2025.3.1.0");
    assert!(report["capabilities"].is_array());
}

#[test]
fn no_tools_at_all_is_missing_not_a_crash() {
    let dir = tempfile::tempdir().unwrap();
    let bin = dir.path().join("empty");
    std::fs::create_dir(&bin).unwrap();
    let (code, report) = doctor(&bin, dir.path());
    assert_eq!(code, 1);
    assert_eq!(probe(&report, "nvcc")["status"], "missing");
    assert_eq!(probe(&report, "ncu")["status"], "missing");
    assert!(
        probe(&report, "nvcc")["fix"]
            .as_str()
            .unwrap()
            .contains("setup.sh")
    );
    assert_eq!(report["ready"], false);
}

#[test]
fn config_show_says_where_each_value_came_from() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("kforge.toml"),
        "[llm]\njudge = \"anthropic:claude-sonnet-4-5\"\n",
    )
    .unwrap();
    let out = Command::cargo_bin("kforge")
        .unwrap()
        .args(["config", "show", "--set", "eval.trials=7"])
        .current_dir(dir.path())
        .env("KFORGE_CONFIG", dir.path().join("none.toml"))
        .env("KFORGE_CODER", "openai:o3")
        .env("OPENAI_API_KEY", "sk-never-printed-123")
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    let line = |key: &str| {
        text.lines()
            .find(|l| l.starts_with(&format!("{key} ")))
            .unwrap_or_else(|| panic!("no {key} in {text}"))
            .to_string()
    };
    assert!(line("eval.trials").ends_with("--set eval.trials"));
    assert!(line("llm.coder").ends_with("env KFORGE_CODER"));
    assert!(line("llm.judge").contains("project kforge.toml"));
    assert!(line("llm.openai.api_key").contains("<set>"));
    assert!(!text.contains("sk-never-printed"));
}
