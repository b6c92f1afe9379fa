//! The candidate catalog (tests/fixtures/candidates/catalog.tsv) that scripts/gpu-check.sh runs
//! on the GPU host: every correct and deliberately wrong candidate with the verdict it must get.
//! Here the catalog itself is checked (files exist, statuses are real, every wrong kind is
//! there); the verdicts need a GPU and are skipped with a message on machines without one.

use std::collections::BTreeSet;

const CATALOG: &str = include_str!("fixtures/candidates/catalog.tsv");
const STATUSES: &[&str] = &[
    "compile_error",
    "runtime_error",
    "timeout",
    "incorrect",
    "correct",
];

fn rows() -> Vec<(String, String, String)> {
    CATALOG
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .map(|l| {
            let cols: Vec<&str> = l.split('\t').collect();
            assert_eq!(
                cols.len(),
                3,
                "catalog row needs candidate, bundle, status: {l:?}"
            );
            (cols[0].into(), cols[1].into(), cols[2].into())
        })
        .collect()
}

#[test]
fn catalog_is_complete_and_consistent() {
    let rows = rows();
    for (candidate, bundle, status) in &rows {
        let path = format!("tests/fixtures/candidates/{candidate}");
        assert!(std::path::Path::new(&path).is_file(), "{path} is missing");
        assert!(
            STATUSES.contains(&status.as_str()),
            "{status} is not a status"
        );
        let problem = bundle.rsplit('/').next().unwrap();
        assert!(
            std::path::Path::new(&format!("kernelbench/problems/{problem}.py")).is_file(),
            "{bundle} is not one of our problems"
        );
    }
    let correct: BTreeSet<&str> = rows
        .iter()
        .filter(|r| r.2 == "correct")
        .map(|r| r.1.as_str())
        .collect();
    assert!(
        correct.len() >= 5,
        "correct candidates for at least 5 problems: {correct:?}"
    );
    for wrong in [
        "compile_error",
        "illegal_address",
        "infinite_loop",
        "writes_nothing",
        "partial_output",
        "wrong_for_negatives",
        "off_by_one_tail",
        "data_race",
        "modifies_input",
        "side_stream",
        "caches_output",
        "returns_zeros",
        "exit_zero",
    ] {
        assert!(
            rows.iter()
                .any(|r| r.0 == format!("{wrong}.cu") && r.2 != "correct"),
            "the catalog lacks the wrong candidate {wrong}"
        );
    }
}

#[test]
fn verdicts_need_a_gpu() {
    if kforge::gpu::list().is_err() {
        eprintln!(
            "SKIP (no GPU): the catalog's verdicts are checked on the GPU host by \
             `scripts/gpu-check.sh catalog`"
        );
        return;
    }
    eprintln!("GPU present: run `scripts/gpu-check.sh catalog` for the verdict table");
}
