//! `kforge eval`, `profile` and `export` as a user runs them on a machine without a GPU: the
//! candidate is compiled (compile-only, said so), a compile error is a verdict with its log, a
//! profile is refused with a reason, and exports are written. GPU verdicts are checked on the GPU
//! host by scripts/gpu-check.sh (the candidate catalog).

use std::path::Path;

use assert_cmd::Command;

fn kforge(home: &Path) -> Command {
    let mut cmd = Command::cargo_bin("kforge").unwrap();
    cmd.env("KFORGE_CONFIG", home.join("none.toml"));
    cmd
}

/// A tiny GELU bundle imported with the real exporter.
fn gelu_bundle(dir: &Path) -> std::path::PathBuf {
    let out = dir.join("bundles");
    kforge(dir)
        .args([
            "import",
            "kernelbench/problems/gelu_activation.py",
            "--size",
            "batch_size=2",
            "--size",
            "dim=515",
            "--out",
        ])
        .arg(&out)
        .assert()
        .success();
    out.join("gelu_activation")
}

fn has_gpu() -> bool {
    kforge::gpu::list().is_ok()
}

#[test]
fn eval_profile_and_export_without_a_gpu() {
    if has_gpu() {
        eprintln!("SKIP (a GPU is present): this test pins the compile-only behaviour");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let bundle = gelu_bundle(dir.path());

    let out = kforge(dir.path())
        .arg("eval")
        .arg(&bundle)
        .arg("tests/fixtures/candidates/gelu_correct.cu")
        .arg("--json")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let result: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(result["status"], "compiled");
    assert!(result["summary"].as_str().unwrap().contains("compile-only"));
    assert!(
        result["compile"]["kernels"][0]["registers"]
            .as_u64()
            .unwrap()
            > 0
    );

    let out = kforge(dir.path())
        .arg("eval")
        .arg(&bundle)
        .arg("tests/fixtures/candidates/compile_error.cu")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("compile_error"), "{text}");
    assert!(text.contains("undefined_variable"), "{text}");

    let out = kforge(dir.path())
        .arg("profile")
        .arg(&bundle)
        .arg("--reference")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stdout).contains("not profiled: no GPU"));

    let model_new = dir.path().join("model_new.py");
    kforge(dir.path())
        .arg("export")
        .arg(&bundle)
        .arg("tests/fixtures/candidates/gelu_correct.cu")
        .arg("--kernelbench")
        .arg(&model_new)
        .assert()
        .success();
    let text = std::fs::read_to_string(&model_new).unwrap();
    assert!(text.contains("class ModelNew(nn.Module)"));
    assert!(text.contains("class Model(nn.Module)"));
    assert!(text.contains("kforge_forward_torch"));
    assert!(
        text.contains("torch::empty({2, 515}"),
        "output shape from the bundle"
    );
}

#[test]
fn bad_arguments_say_what_to_do() {
    let dir = tempfile::tempdir().unwrap();
    let out = kforge(dir.path())
        .args(["eval", "no/such/bundle", "x.cu"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(!String::from_utf8_lossy(&out.stderr).is_empty());
    let out = kforge(dir.path())
        .args(["eval", "b", "x.cu", "--trials", "2"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("at least 5"));
    let out = kforge(dir.path())
        .args(["export", "b", "x.cu"])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(2),
        "export needs --kernelbench or --torch-op"
    );
}
