//! The Judge's view of each real export, pinned as snapshots (review changes with
//! `cargo insta review`), and kept to a few hundred tokens.

use std::path::Path;

use kforge::ncu::sections::parse_section;
use kforge::ncu::{diagnose, parse_csv, render_for_judge, render_for_judge_with, rollup};

fn judge_view(name: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/ncu")
        .join(name);
    let report = parse_csv(&std::fs::read_to_string(path).unwrap()).unwrap();
    let rolled = rollup(&report);
    render_for_judge(&rolled, &diagnose(&rolled))
}

/// Roughly what a tokenizer makes of it: words and punctuation runs.
fn approximate_tokens(text: &str) -> usize {
    text.split(|c: char| c.is_whitespace() || c == '_' || c == '.')
        .filter(|w| !w.is_empty())
        .count()
}

#[test]
fn custom_section_export() {
    let view = judge_view("ncu-custom-raw.csv");
    insta::assert_snapshot!("custom_raw", view);
}

#[test]
fn full_set_export() {
    let view = judge_view("ncu-full-raw.csv");
    assert!(
        approximate_tokens(&view) < 700,
        "{}",
        approximate_tokens(&view)
    );
    insta::assert_snapshot!("full_raw", view);
}

#[test]
fn full_set_details_export() {
    let view = judge_view("ncu-full-details.csv");
    assert!(view.contains("ncu's own hints"), "{view}");
    insta::assert_snapshot!("full_details", view);
}

#[test]
fn kforge_default_probe_call() {
    let view = judge_view("kforge-default-raw.csv");
    assert!(
        approximate_tokens(&view) < 900,
        "{}",
        approximate_tokens(&view)
    );
    insta::assert_snapshot!("kforge_default_probe", view);
}

#[test]
fn kforge_default_pytorch_call() {
    let view = judge_view("kforge-default-torch-raw.csv");
    insta::assert_snapshot!("kforge_default_torch", view);
}

#[test]
fn kforge_fast_probe_call() {
    let view = judge_view("kforge-fast-raw.csv");
    insta::assert_snapshot!("kforge_fast_probe", view);
}

#[test]
fn a_users_section_metrics_join_the_table() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/ncu/ncu-full-raw.csv");
    let report = parse_csv(&std::fs::read_to_string(path).unwrap()).unwrap();
    let rolled = rollup(&report);
    let section = parse_section(
        r#"Identifier: "Mine"
           Header {
             Metrics { Label: "Issue Slots Busy" Name: "sm__inst_issued.avg.pct_of_peak_sustained_elapsed" }
             Metrics { Label: "Duration" Name: "gpu__time_duration.sum" }
             Metrics { Label: "Not Collected" Name: "sm__pipe_shared_cycles_active.sum.pct_of_peak_sustained_active" }
           }"#,
        "mine.section",
    )
    .unwrap();
    let view = render_for_judge_with(&rolled, &diagnose(&rolled), &[section]);
    assert_eq!(view.matches("Issue Slots Busy").count(), 1, "{view}");
    // Already in the curated table under its short label, and not in the export: not repeated.
    assert!(!view.contains("Duration"), "{view}");
    assert!(!view.contains("Not Collected"), "{view}");
}

#[test]
fn empty_call() {
    let report = parse_csv("\"ID\",\"Kernel Name\"\n\"\",\"\"\n").unwrap();
    let rolled = rollup(&report);
    assert_eq!(
        render_for_judge(&rolled, &diagnose(&rolled)),
        "Nsight Compute: no kernels were profiled in the call.\n"
    );
}

#[test]
fn repeated_launches_are_one_kernel_line() {
    let text = "\"ID\",\"Kernel Name\",\"gpu__time_duration.sum\",\"launch__grid_size\"\n\
                \"\",\"\",\"ns\",\"\"\n\
                \"0\",\"k(int)\",\"1000\",\"64\"\n\
                \"1\",\"k(int)\",\"3000\",\"64\"\n";
    let rolled = rollup(&parse_csv(text).unwrap());
    let view = render_for_judge(&rolled, &diagnose(&rolled));
    assert!(
        view.starts_with(
            "Nsight Compute: 2 kernel launches in the call, 4.0 us on the GPU\nkernel: k (×2)\n"
        ),
        "{view}"
    );
    let text = format!("{text}\"2\",\"other(float)\",\"4000\",\"8\"\n");
    let rolled = rollup(&parse_csv(&text).unwrap());
    let view = render_for_judge(&rolled, &diagnose(&rolled));
    assert!(view.contains("   50.0%     4.0 us  k (×2)\n"), "{view}");
    assert!(view.contains("   50.0%     4.0 us  other\n"), "{view}");
}
