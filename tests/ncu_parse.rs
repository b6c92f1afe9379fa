//! The ncu CSV parser on real H200 exports (tests/fixtures/ncu/README.md says where each comes
//! from) and on hand-made edge cases.

use std::path::Path;

use kforge::ncu::{
    KernelLaunch, MessageLevel, MetricValue, NcuReport, Page, ParseError, parse_csv,
    parse_details_csv, parse_raw_csv,
};

fn fixture(name: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/ncu")
        .join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn value<'a>(kernel: &'a KernelLaunch, metric: &str) -> &'a MetricValue {
    &kernel
        .metrics
        .get(metric)
        .unwrap_or_else(|| panic!("{metric} missing from {}", kernel.name))
        .value
}

fn unit<'a>(kernel: &'a KernelLaunch, metric: &str) -> &'a str {
    &kernel.metrics[metric].unit
}

#[test]
fn custom_section_export_with_program_output_before_the_table() {
    let report = parse_raw_csv(&fixture("ncu-custom-raw.csv")).unwrap();
    assert_eq!(report.page, Page::Raw);
    assert_eq!(report.kernels.len(), 1);
    let kernel = &report.kernels[0];
    assert_eq!(kernel.name, "softmax_rows(const float *, float *, int)");
    assert_eq!(kernel.id, Some(0));
    assert_eq!(kernel.block_size.as_deref(), Some("(256, 1, 1)"));
    assert_eq!(kernel.grid_size.as_deref(), Some("(4096, 1, 1)"));
    assert_eq!(kernel.compute_capability.as_deref(), Some("9.0"));
    assert!(!kernel.truncated);
    // 293 columns, 11 of them identity columns.
    assert_eq!(kernel.metrics.len(), 282);

    assert_eq!(
        value(kernel, "gpu__time_duration.sum"),
        &MetricValue::Int(165_120)
    );
    assert_eq!(unit(kernel, "gpu__time_duration.sum"), "ns");
    assert_eq!(
        value(kernel, "dram__bytes_read.sum"),
        &MetricValue::Int(208_445_952)
    );
    assert_eq!(unit(kernel, "dram__bytes_read.sum"), "byte");
    assert_eq!(
        value(kernel, "dram__bytes_write.sum"),
        &MetricValue::Int(113_927_168)
    );
    assert_eq!(
        value(kernel, "dram__bytes_write.avg"),
        &MetricValue::Float(2_373_482.67)
    );
    assert_eq!(
        value(
            kernel,
            "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed"
        ),
        &MetricValue::Float(40.58)
    );
    assert_eq!(
        value(kernel, "sm__throughput.avg.pct_of_peak_sustained_elapsed"),
        &MetricValue::Float(36.9)
    );
    assert_eq!(
        value(kernel, "sm__warps_active.avg.pct_of_peak_sustained_active"),
        &MetricValue::Float(89.44)
    );
    assert_eq!(
        value(kernel, "launch__registers_per_thread"),
        &MetricValue::Int(19)
    );
    assert_eq!(
        unit(kernel, "launch__registers_per_thread"),
        "register/thread"
    );
    assert_eq!(
        value(kernel, "launch__waves_per_multiprocessor"),
        &MetricValue::Float(3.88)
    );
    assert_eq!(
        value(kernel, "device__attribute_total_memory"),
        &MetricValue::Int(150_109_880_320)
    );
    assert_eq!(
        value(kernel, "launch__cluster_scheduling_policy"),
        &MetricValue::Text("PolicySpread".into())
    );
    assert_eq!(value(kernel, "launch__kernel_name"), &MetricValue::Empty);

    let warnings: Vec<&str> = report.messages_of(MessageLevel::Warning).collect();
    assert_eq!(warnings.len(), 1);
    assert!(warnings[0].starts_with("Note: Running with unmodified GPU clocks"));
    let prof: Vec<&str> = report.messages_of(MessageLevel::Prof).collect();
    assert_eq!(
        prof,
        [
            "Connected to process 597 (/usr/bin/python3.12)",
            "Disconnected from process 597"
        ]
    );
    // "max abs diff ..." and "cand 278.4 us ..." are the program's own lines.
    assert_eq!(report.other_lines, 2);
    assert!(report.warnings.is_empty(), "{:?}", report.warnings);
}

#[test]
fn full_set_export() {
    let report = parse_raw_csv(&fixture("ncu-full-raw.csv")).unwrap();
    assert_eq!(report.kernels.len(), 1);
    let kernel = &report.kernels[0];
    assert_eq!(kernel.metrics.len(), 2238 - 11);
    assert_eq!(
        value(kernel, "gpu__time_duration.sum"),
        &MetricValue::Int(165_696)
    );
    assert_eq!(
        value(
            kernel,
            "smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio"
        ),
        &MetricValue::Float(28.15)
    );
    assert_eq!(
        value(kernel, "smsp__average_warp_latency_per_inst_issued.ratio"),
        &MetricValue::Float(37.69)
    );
    assert_eq!(
        value(kernel, "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum"),
        &MetricValue::Int(12_582_912)
    );
    assert_eq!(
        value(kernel, "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum"),
        &MetricValue::Int(3_145_728)
    );
    assert_eq!(
        value(
            kernel,
            "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum"
        ),
        &MetricValue::Int(13_309)
    );
    assert_eq!(
        value(kernel, "dram__bytes.sum.per_second"),
        &MetricValue::Float(1_951_365_005_793.74)
    );
    assert_eq!(unit(kernel, "dram__bytes.sum.per_second"), "byte/s");
    assert_eq!(unit(kernel, "sm__cycles_elapsed.avg.per_second"), "hz");
    assert_eq!(
        value(kernel, "sm__maximum_warps_per_active_cycle_pct"),
        &MetricValue::Int(100)
    );
    // The FBSP/LTS triage metrics are empty cells in this export.
    assert_eq!(
        value(
            kernel,
            "FBSP.TriageCompute.dramc__throughput.avg.pct_of_peak_sustained_elapsed"
        ),
        &MetricValue::Empty
    );
    let warnings: Vec<&str> = report.messages_of(MessageLevel::Warning).collect();
    assert!(
        warnings.iter().any(|w| w
            .starts_with("Unable to access the following 6 metrics: ctc__rx_bytes_data_user.sum")),
        "{warnings:?}"
    );
}

#[test]
fn details_export_maps_stock_labels_and_keeps_rules() {
    let report = parse_details_csv(&fixture("ncu-full-details.csv")).unwrap();
    assert_eq!(report.page, Page::Details);
    assert_eq!(report.kernels.len(), 1);
    let kernel = &report.kernels[0];
    assert_eq!(kernel.name, "softmax_rows(const float *, float *, int)");
    assert_eq!(
        value(kernel, "gpu__time_duration.sum"),
        &MetricValue::Int(166_528)
    );
    assert_eq!(
        value(
            kernel,
            "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed"
        ),
        &MetricValue::Float(40.25)
    );
    // The same label in another section is another metric.
    assert_eq!(
        value(kernel, "dram__bytes.sum.per_second"),
        &MetricValue::Float(1_936_392_006_149.12)
    );
    assert_eq!(
        value(kernel, "sm__warps_active.avg.pct_of_peak_sustained_active"),
        &MetricValue::Float(89.65)
    );
    assert_eq!(
        value(kernel, "sm__maximum_warps_per_active_cycle_pct"),
        &MetricValue::Int(100)
    );
    assert_eq!(
        value(kernel, "launch__occupancy_limit_registers"),
        &MetricValue::Int(10)
    );
    assert_eq!(
        value(kernel, "launch__registers_per_thread"),
        &MetricValue::Int(19)
    );
    assert_eq!(
        value(kernel, "launch__waves_per_multiprocessor"),
        &MetricValue::Float(3.88)
    );
    assert_eq!(
        value(
            kernel,
            "smsp__issue_active.avg.pct_of_peak_sustained_active"
        ),
        &MetricValue::Float(38.64)
    );
    assert_eq!(
        value(
            kernel,
            "smsp__sass_average_branch_targets_threads_uniform.pct"
        ),
        &MetricValue::Int(100)
    );
    assert_eq!(unit(kernel, "dram__cycles_elapsed.avg.per_second"), "hz");
    // PM Sampling's labels are not mapped: kept under "<section>: <label>".
    assert_eq!(
        value(kernel, "PM Sampling: Maximum Buffer Size"),
        &MetricValue::Int(30_998_528)
    );
    assert!(!report.warnings.is_empty());

    let rules: Vec<(&str, &str)> = kernel
        .rules
        .iter()
        .map(|r| (r.section.as_str(), r.rule.as_str()))
        .collect();
    assert_eq!(rules.len(), 10, "{rules:?}");
    assert_eq!(rules[0], ("SpeedOfLight", "SOLBottleneck"));
    assert_eq!(kernel.rules[0].kind, "OPT");
    assert_eq!(kernel.rules[0].estimated_speedup, None);
    assert!(
        kernel.rules[0]
            .message
            .starts_with("This workload exhibits low compute throughput")
    );
    let occupancy = kernel
        .rules
        .iter()
        .find(|r| r.rule == "AchievedOccupancy")
        .unwrap();
    assert_eq!(
        occupancy.estimated_speedup,
        Some(("global".to_string(), 10.35))
    );
}

#[test]
fn kforge_default_export_of_four_kernels() {
    let report = parse_raw_csv(&fixture("kforge-default-raw.csv")).unwrap();
    let names: Vec<&str> = report.kernels.iter().map(|k| k.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "void scale<float, 4>(const T1 *, T1 *, int)",
            "strided_gather(const float *, float *, int, int)",
            "bank_conflicts(float *, int)",
            "tiny_grid(float *, int)",
        ]
    );
    let ids: Vec<Option<u64>> = report.kernels.iter().map(|k| k.id).collect();
    assert_eq!(ids, [Some(0), Some(1), Some(2), Some(3)]);
    let durations: Vec<Option<f64>> = report
        .kernels
        .iter()
        .map(|k| k.number("gpu__time_duration.sum"))
        .collect();
    assert_eq!(
        durations,
        [
            Some(50_528.0),
            Some(295_648.0),
            Some(205_024.0),
            Some(11_008.0)
        ]
    );
    let conflicts = &report.kernels[2];
    assert_eq!(
        value(
            conflicts,
            "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum"
        ),
        &MetricValue::Int(18_411_520)
    );
    assert_eq!(
        value(conflicts, "launch__waves_per_multiprocessor"),
        &MetricValue::Float(1.1)
    );
    assert_eq!(
        value(conflicts, "launch__shared_mem_per_block_static"),
        &MetricValue::Int(4096)
    );
    assert_eq!(
        value(
            &report.kernels[1],
            "smsp__sass_average_data_bytes_per_sector_mem_global_op_ld.ratio"
        ),
        &MetricValue::Int(4)
    );
    assert_eq!(
        unit(
            &report.kernels[1],
            "smsp__sass_average_data_bytes_per_sector_mem_global_op_ld.ratio"
        ),
        "byte/sector"
    );
    // An export made with --import has no program output and no ncu messages.
    assert!(report.messages.is_empty());
    assert_eq!(report.other_lines, 0);
}

/// Every numeric metric of `other` must match the base-unit export, unit included.
fn assert_same_values(base: &NcuReport, other: &NcuReport, relative: f64) -> usize {
    assert_eq!(base.kernels.len(), other.kernels.len());
    let mut compared = 0;
    for (b, o) in base.kernels.iter().zip(&other.kernels) {
        assert_eq!(b.name, o.name);
        for (name, metric) in &o.metrics {
            let (Some(theirs), Some(ours)) = (metric.number(), b.metrics.get(name)) else {
                continue;
            };
            let Some(expected) = ours.number() else {
                continue;
            };
            assert_eq!(metric.unit, ours.unit, "{name} of {}", b.name);
            // Auto units print 6 decimals of the unit ncu picked; for Gbyte that is 1000 bytes.
            let resolution = if metric.unit == "byte" { 1000.0 } else { 1.0 };
            let close = (theirs - expected).abs() <= resolution
                || (theirs - expected).abs() <= relative * expected.abs();
            assert!(close, "{name} of {}: {theirs} vs {expected}", b.name);
            compared += 1;
        }
    }
    compared
}

#[test]
fn auto_scaled_units_normalise_to_the_base_export() {
    let base = parse_raw_csv(&fixture("kforge-default-raw.csv")).unwrap();
    let auto = parse_raw_csv(&fixture("kforge-default-raw-autounits.csv")).unwrap();
    let kernel = &auto.kernels[0];
    assert_eq!(
        value(kernel, "gpu__time_duration.sum"),
        &MetricValue::Int(50_528)
    );
    assert_eq!(unit(kernel, "gpu__time_duration.sum"), "ns");
    assert_eq!(
        value(kernel, "dram__bytes_read.sum"),
        &MetricValue::Int(67_115_000)
    );
    assert_eq!(unit(kernel, "dram__bytes_read.sum"), "byte");
    assert_eq!(
        value(kernel, "launch__shared_mem_config_size"),
        &MetricValue::Int(32_768)
    );
    let compared = assert_same_values(&base, &auto, 1e-3);
    assert!(compared > 1000, "{compared}");
}

#[test]
fn kforge_details_export_matches_the_raw_one() {
    let raw = parse_raw_csv(&fixture("kforge-default-raw.csv")).unwrap();
    let details = parse_details_csv(&fixture("kforge-default-details.csv")).unwrap();
    assert!(details.warnings.is_empty(), "{:?}", details.warnings);
    let conflicts = &details.kernels[2];
    assert_eq!(conflicts.name, "bank_conflicts(float *, int)");
    assert_eq!(
        value(conflicts, "gpu__time_duration.sum"),
        &MetricValue::Int(205_020)
    );
    assert_eq!(
        value(conflicts, "launch__shared_mem_per_block_static"),
        &MetricValue::Int(4_100)
    );
    assert_eq!(
        value(conflicts, "smsp__sass_branch_targets_threads_divergent.sum"),
        &MetricValue::Int(0)
    );
    // Every metric of the section is there under its name, for every kernel.
    for kernel in &details.kernels {
        assert_eq!(kernel.metrics.len(), 45, "{}", kernel.name);
    }
    // Details print 3-4 significant digits.
    let compared = assert_same_values(&raw, &details, 5e-3);
    assert_eq!(compared, 4 * 45);
}

#[test]
fn library_kernel_names_with_commas_in_templates() {
    let report = parse_csv(&fixture("kforge-default-torch-raw.csv")).unwrap();
    let names: Vec<&str> = report.kernels.iter().map(|k| k.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "void cutlass::Kernel2<cutlass_80_simt_sgemm_256x128_8x4_nn_align1>(T1::Params)",
            "void at::vectorized_elementwise_kernel<4, at::CUDAFunctorOnSelf_add<float>, std::array<char *, 2>>(int, T2, T3)",
            "void <unnamed>::softmax_warp_forward<float, float, float, 11, 0, 0>(T2 *, const T1 *, int, int, int, const bool *, int, bool)",
        ]
    );
    assert_eq!(
        value(&report.kernels[0], "launch__registers_per_thread"),
        &MetricValue::Int(202)
    );
    assert_eq!(
        value(
            &report.kernels[2],
            "smsp__sass_branch_targets_threads_divergent.sum"
        ),
        &MetricValue::Int(277_998)
    );
}

#[test]
fn page_is_detected_and_checked() {
    assert_eq!(
        parse_csv(&fixture("ncu-full-details.csv")).unwrap().page,
        Page::Details
    );
    assert_eq!(
        parse_csv(&fixture("ncu-custom-raw.csv")).unwrap().page,
        Page::Raw
    );
    assert_eq!(
        parse_raw_csv(&fixture("ncu-full-details.csv")).unwrap_err(),
        ParseError::WrongPage {
            expected: Page::Raw,
            found: Page::Details
        }
    );
    assert!(matches!(
        parse_details_csv(&fixture("ncu-custom-raw.csv")),
        Err(ParseError::WrongPage {
            expected: Page::Details,
            found: Page::Raw
        })
    ));
}

// Hand-made edge cases.

const HEADER: &str = r#""ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size","Device","CC","dram__bytes_read.sum","gpu__time_duration.sum","launch__registers_per_thread","sm__throughput.avg.pct_of_peak_sustained_elapsed""#;
const UNITS: &str = r#""","","","","","","","","","","","Mbyte","usecond","register/thread","%""#;

fn row(id: u32, name: &str, values: &str) -> String {
    format!(
        r#""{id}","42","probe","127.0.0.1","{name}","1","7","(256, 1, 1)","(64, 1, 1)","0","9.0",{values}"#
    )
}

#[test]
fn header_and_units_without_rows_is_an_empty_report() {
    let report = parse_raw_csv(&format!("{HEADER}\n{UNITS}\n")).unwrap();
    assert!(report.is_empty());
    assert!(report.warnings.is_empty());
}

#[test]
fn only_profiler_lines_is_no_table() {
    let text = "==PROF== Connected to process 9 (/bin/probe)\nprobe done\n==PROF== Disconnected from process 9\n==WARNING== No kernels were profiled.\n";
    let err = parse_raw_csv(text).unwrap_err();
    let ParseError::NoTable { messages } = &err else {
        panic!("{err}")
    };
    assert_eq!(messages.len(), 3);
    assert_eq!(messages[2].level, MessageLevel::Warning);
    assert!(
        err.to_string().contains("No kernels were profiled."),
        "{err}"
    );
    assert!(matches!(parse_raw_csv(""), Err(ParseError::NoTable { .. })));
}

#[test]
fn two_kernels_with_commas_in_names_n_a_and_units() {
    let text = [
        "some program output".to_string(),
        HEADER.to_string(),
        UNITS.to_string(),
        row(
            0,
            "void foo<float, 4>(float *, int)",
            r#""1,234.5","12.5","32","n/a""#,
        ),
        row(1, "bar(int)", r#""0.5","2","","55.25""#),
        "program output after the table".to_string(),
        "==PROF== Disconnected from process 42".to_string(),
    ]
    .join("\r\n");
    let report = parse_raw_csv(&text).unwrap();
    assert_eq!(report.kernels.len(), 2);
    let foo = &report.kernels[0];
    assert_eq!(foo.name, "void foo<float, 4>(float *, int)");
    assert_eq!(foo.grid_size.as_deref(), Some("(64, 1, 1)"));
    assert_eq!(
        value(foo, "dram__bytes_read.sum"),
        &MetricValue::Int(1_234_500_000)
    );
    assert_eq!(unit(foo, "dram__bytes_read.sum"), "byte");
    assert_eq!(
        value(foo, "gpu__time_duration.sum"),
        &MetricValue::Int(12_500)
    );
    assert_eq!(unit(foo, "gpu__time_duration.sum"), "ns");
    assert_eq!(
        value(foo, "sm__throughput.avg.pct_of_peak_sustained_elapsed"),
        &MetricValue::NotAvailable
    );
    assert_eq!(
        foo.number("sm__throughput.avg.pct_of_peak_sustained_elapsed"),
        None
    );
    let bar = &report.kernels[1];
    assert_eq!(
        value(bar, "dram__bytes_read.sum"),
        &MetricValue::Int(500_000)
    );
    assert_eq!(
        value(bar, "launch__registers_per_thread"),
        &MetricValue::Empty
    );
    assert_eq!(
        value(bar, "sm__throughput.avg.pct_of_peak_sustained_elapsed"),
        &MetricValue::Float(55.25)
    );
    assert_eq!(report.other_lines, 2);
    assert_eq!(report.messages.len(), 1);
}

#[test]
fn truncated_last_row_keeps_what_it_has() {
    let cut = row(1, "bar(int)", r#""0.5","2"#);
    let text = format!(
        "{HEADER}\n{UNITS}\n{}\n{cut}",
        row(0, "foo(int)", r#""1","2","3","4""#)
    );
    let report = parse_raw_csv(&text).unwrap();
    assert_eq!(report.kernels.len(), 2);
    assert!(!report.kernels[0].truncated);
    let bar = &report.kernels[1];
    assert!(bar.truncated);
    assert_eq!(
        value(bar, "dram__bytes_read.sum"),
        &MetricValue::Int(500_000)
    );
    // The cut-off cell reads what it holds; the missing columns are absent.
    assert_eq!(
        value(bar, "gpu__time_duration.sum"),
        &MetricValue::Int(2_000)
    );
    assert!(!bar.metrics.contains_key("launch__registers_per_thread"));
    assert_eq!(report.warnings.len(), 1);
    assert!(
        report.warnings[0].contains("bar(int)"),
        "{:?}",
        report.warnings
    );
}

#[test]
fn missing_units_row_reads_values_without_units() {
    let text = format!(
        "{HEADER}\n{}\n",
        row(0, "foo(int)", r#""1,024","2","3","4.5""#)
    );
    let report = parse_raw_csv(&text).unwrap();
    assert_eq!(report.kernels.len(), 1);
    let foo = &report.kernels[0];
    assert_eq!(value(foo, "dram__bytes_read.sum"), &MetricValue::Int(1024));
    assert_eq!(unit(foo, "dram__bytes_read.sum"), "");
    assert_eq!(report.warnings.len(), 1);
    assert!(report.warnings[0].contains("no units row"));
}

#[test]
fn details_rows_group_by_launch() {
    let header = r#""ID","Kernel Name","Section Name","Metric Name","Metric Unit","Metric Value""#;
    let text = [
        header,
        r#""0","foo(int)","GPU Speed Of Light Throughput","Duration","usecond","1.50""#,
        r#""1","foo(int)","GPU Speed Of Light Throughput","Duration","nsecond","900""#,
        r#""0","foo(int)","Launch Statistics","Registers Per Thread","register/thread","40""#,
        r#""0","foo(int)","My Section","My Label","","7""#,
    ]
    .join("\n");
    let report = parse_details_csv(&text).unwrap();
    assert_eq!(report.kernels.len(), 2);
    assert_eq!(
        report.kernels[0].number("gpu__time_duration.sum"),
        Some(1_500.0)
    );
    assert_eq!(
        report.kernels[0].number("launch__registers_per_thread"),
        Some(40.0)
    );
    assert_eq!(report.kernels[0].number("My Section: My Label"), Some(7.0));
    assert_eq!(
        report.kernels[1].number("gpu__time_duration.sum"),
        Some(900.0)
    );
    assert!(report.kernels[0].rules.is_empty());
}

#[test]
fn a_details_export_without_its_metric_columns_is_an_error() {
    let text =
        "\"ID\",\"Kernel Name\",\"Metric Name\",\"Metric Value\"\n\"0\",\"k\",\"Duration\",\"1\"\n";
    assert_eq!(
        parse_details_csv(text).unwrap_err(),
        ParseError::MissingColumn("Section Name")
    );
    let text = "\"ID\",\"gpu__time_duration.sum\"\n\"\",\"ns\"\n\"0\",\"1\"\n";
    assert_eq!(
        parse_raw_csv(text).unwrap_err(),
        ParseError::MissingColumn("Kernel Name")
    );
}
