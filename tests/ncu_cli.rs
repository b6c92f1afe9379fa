//! `kforge ncu parse`: the real binary on real exports.

use std::path::Path;

use assert_cmd::Command;
use predicates::prelude::*;

fn fixture(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/ncu")
        .join(name)
        .display()
        .to_string()
}

fn kforge() -> Command {
    let mut command = Command::cargo_bin("kforge").unwrap();
    command.env_remove("RUST_LOG");
    command
}

#[test]
fn prints_the_judge_view() {
    kforge()
        .args(["ncu", "parse", &fixture("ncu-custom-raw.csv")])
        .assert()
        .success()
        .stdout(predicate::str::starts_with(
            "Nsight Compute: 1 kernel launch in the call, 165.1 us on the GPU\nkernel: softmax_rows\n",
        ))
        .stdout(predicate::str::contains("1. [medium] latency-bound"));
}

#[test]
fn prints_json() {
    let output = kforge()
        .args(["ncu", "parse", "--json", &fixture("kforge-default-raw.csv")])
        .output()
        .unwrap();
    assert!(output.status.success());
    let document: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(document["page"], "raw");
    assert_eq!(document["rollup"]["kernels"].as_array().unwrap().len(), 4);
    assert_eq!(
        document["rollup"]["combined"]["gpu__time_duration.sum"]["value"]["value"],
        562_208
    );
    assert_eq!(
        document["diagnosis"]["bound"]["bound"]["memory"]["dram"],
        false
    );
    assert!(document["diagnosis"]["findings"].as_array().unwrap().len() > 5);
}

#[test]
fn reads_details_exports_and_stdin() {
    let text = std::fs::read(fixture("ncu-full-details.csv")).unwrap();
    kforge()
        .args(["ncu", "parse", "-"])
        .write_stdin(text)
        .assert()
        .success()
        .stdout(predicate::str::contains("ncu's own hints"));
}

#[test]
fn a_users_section_folder_names_details_labels() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("mine.section"),
        "Identifier: \"Mine\"\nDisplayName: \"My Section\"\nHeader {\n  Metrics { Label: \"Busy\" Name: \"sm__throughput.avg.pct_of_peak_sustained_elapsed\" }\n  Metrics { Label: \"Mem\" Name: \"gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed\" }\n}\n",
    )
    .unwrap();
    let export = dir.path().join("export.csv");
    std::fs::write(
        &export,
        "\"ID\",\"Kernel Name\",\"Section Name\",\"Metric Name\",\"Metric Unit\",\"Metric Value\"\n\"0\",\"k(int)\",\"My Section\",\"Busy\",\"%\",\"91.5\"\n\"0\",\"k(int)\",\"My Section\",\"Mem\",\"%\",\"12.0\"\n",
    )
    .unwrap();
    kforge()
        .args([
            "ncu",
            "parse",
            export.to_str().unwrap(),
            "--section-folder",
            dir.path().to_str().unwrap(),
        ])
        .assert()
        .success()
        .stdout(predicate::str::contains(
            "compute-bound: SM 91.5% vs memory 12.0%",
        ));
    // Without the folder the labels stay unknown and no rule can fire.
    kforge()
        .args(["ncu", "parse", export.to_str().unwrap()])
        .assert()
        .success()
        .stdout(predicate::str::contains("no rule fired"));
}

#[test]
fn errors_and_empty_exports() {
    kforge()
        .args([
            "ncu",
            "parse",
            "--page",
            "raw",
            &fixture("ncu-full-details.csv"),
        ])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("expected an export of --page raw"));
    let dir = tempfile::tempdir().unwrap();
    let only_prof = dir.path().join("prof.txt");
    std::fs::write(
        &only_prof,
        "==PROF== Connected to process 1 (/bin/x)\n==WARNING== No kernels were profiled.\n",
    )
    .unwrap();
    kforge()
        .args(["ncu", "parse", only_prof.to_str().unwrap()])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("No kernels were profiled"));
    let empty = dir.path().join("empty.csv");
    std::fs::write(
        &empty,
        "\"ID\",\"Kernel Name\",\"gpu__time_duration.sum\"\n\"\",\"\",\"ns\"\n",
    )
    .unwrap();
    kforge()
        .args(["ncu", "parse", empty.to_str().unwrap()])
        .assert()
        .code(1)
        .stdout(predicate::str::contains("no kernels were profiled"));
    kforge()
        .args([
            "ncu",
            "parse",
            dir.path().join("missing.csv").to_str().unwrap(),
        ])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("reading"));
}
