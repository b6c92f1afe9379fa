//! Roll-up and diagnosis on the real exports and on hand-made kernels that each trip one rule.

use std::path::Path;

use kforge::ncu::{
    Bound, Diagnosis, Finding, Metric, MetricValue, NcuReport, Rule, Severity, Weighting, diagnose,
    parse_csv, rollup,
};

fn fixture(name: &str) -> NcuReport {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/ncu")
        .join(name);
    parse_csv(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn find<'a>(diagnosis: &'a Diagnosis, rule: Rule, kernel: Option<&str>) -> &'a Finding {
    diagnosis
        .findings
        .iter()
        .find(|f| f.rule == rule && f.kernel.as_deref() == kernel)
        .unwrap_or_else(|| {
            panic!(
                "no {rule:?} finding for {kernel:?} in {:#?}",
                diagnosis.findings
            )
        })
}

fn has(diagnosis: &Diagnosis, rule: Rule) -> bool {
    diagnosis.findings.iter().any(|f| f.rule == rule)
}

fn cites(finding: &Finding, metric: &str, value: f64) -> bool {
    finding
        .evidence
        .iter()
        .any(|e| e.metric == metric && (e.value - value).abs() < 1e-6)
}

fn assert_ranked(diagnosis: &Diagnosis) {
    for pair in diagnosis.findings.windows(2) {
        assert!(
            pair[0].severity > pair[1].severity
                || (pair[0].severity == pair[1].severity && pair[0].impact >= pair[1].impact),
            "{:?} before {:?}",
            pair[0],
            pair[1]
        );
    }
}

#[test]
fn softmax_custom_export_is_latency_bound_and_nothing_else() {
    let rolled = rollup(&fixture("ncu-custom-raw.csv"));
    assert_eq!(rolled.weighting, Weighting::Duration);
    assert_eq!(rolled.total_duration_ns, Some(165_120.0));
    assert_eq!(rolled.kernels[0].share, 1.0);
    let diagnosis = diagnose(&rolled);
    let verdict = diagnosis.bound.unwrap();
    assert_eq!(verdict.bound, Bound::Latency);
    assert_eq!(verdict.sm_pct, 36.9);
    assert_eq!(verdict.memory_pct, 40.58);
    // The custom section has no DRAM throughput metric.
    assert_eq!(verdict.dram_pct, None);
    assert_eq!(diagnosis.findings.len(), 1, "{:#?}", diagnosis.findings);
    let bound = &diagnosis.findings[0];
    assert_eq!(
        (bound.rule, bound.severity, bound.kernel.as_deref()),
        (Rule::Bound, Severity::Medium, None)
    );
    assert!(cites(
        bound,
        "sm__throughput.avg.pct_of_peak_sustained_elapsed",
        36.9
    ));
    assert!(cites(
        bound,
        "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",
        40.58
    ));
}

#[test]
fn softmax_full_export_adds_the_long_scoreboard_stall() {
    let diagnosis = diagnose(&rollup(&fixture("ncu-full-raw.csv")));
    assert_ranked(&diagnosis);
    assert_eq!(diagnosis.bound.unwrap().dram_pct, Some(40.56));
    let stall = &diagnosis.findings[0];
    assert_eq!(
        (stall.rule, stall.severity),
        (Rule::DominantStall, Severity::High)
    );
    assert!(
        stall
            .message
            .contains("long scoreboard, 28.1 of 37.7 cycles between issues (75%)"),
        "{}",
        stall.message
    );
    assert!(cites(
        stall,
        "smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio",
        28.15
    ));
    assert!(cites(
        stall,
        "smsp__average_warp_latency_per_inst_issued.ratio",
        37.69
    ));
    assert_eq!(
        find(&diagnosis, Rule::Bound, None).severity,
        Severity::Medium
    );
    // Coalesced (32 bytes per sector), 2.3% and 7.5% bank conflicts, 3.88 waves, 100% uniform
    // branches, achieved occupancy within 11 points: none of these rules fires.
    for quiet in [
        Rule::Coalescing,
        Rule::BankConflicts,
        Rule::TailEffect,
        Rule::BranchDivergence,
        Rule::OccupancyGap,
        Rule::OccupancyLimit,
        Rule::SmallGrid,
    ] {
        assert!(
            !has(&diagnosis, quiet),
            "{quiet:?}: {:#?}",
            diagnosis.findings
        );
    }
    assert_eq!(diagnosis.findings.len(), 2);
}

#[test]
fn details_export_diagnoses_from_mapped_labels() {
    let diagnosis = diagnose(&rollup(&fixture("ncu-full-details.csv")));
    let verdict = diagnosis.bound.unwrap();
    assert_eq!(
        (verdict.bound, verdict.sm_pct, verdict.memory_pct),
        (Bound::Latency, 37.01, 40.25)
    );
    assert_eq!(verdict.dram_pct, Some(40.25));
    // The details page shows no individual stall reasons.
    assert!(!has(&diagnosis, Rule::DominantStall));
}

#[test]
fn probe_call_of_four_kernels() {
    let rolled = rollup(&fixture("kforge-default-raw.csv"));
    assert_eq!(rolled.total_duration_ns, Some(562_208.0));
    let shares: Vec<f64> = rolled
        .kernels
        .iter()
        .map(|k| (k.share * 1000.0).round() / 10.0)
        .collect();
    assert_eq!(shares, [9.0, 52.6, 36.5, 2.0]);
    let sum: f64 = rolled.kernels.iter().map(|k| k.share).sum();
    assert!((sum - 1.0).abs() < 1e-12);

    // Roll-up rules: durations and bytes add, percentages weigh by duration, registers take the
    // max, launch shape comes from the longest kernel.
    assert_eq!(
        rolled.combined["gpu__time_duration.sum"].value,
        MetricValue::Int(562_208)
    );
    assert_eq!(
        rolled.number("dram__bytes_read.sum"),
        Some((67_115_264u64 + 1_073_723_392 + 4_096 + 3_840) as f64)
    );
    let weighted =
        (39.82 * 50_528.0 + 7.66 * 295_648.0 + 4.63 * 205_024.0 + 2.74 * 11_008.0) / 562_208.0;
    let sm = rolled
        .number("sm__throughput.avg.pct_of_peak_sustained_elapsed")
        .unwrap();
    assert!((sm - weighted).abs() < 1e-9, "{sm} vs {weighted}");
    assert_eq!(
        rolled.combined["launch__registers_per_thread"].value,
        MetricValue::Int(18)
    );
    assert_eq!(
        rolled.combined["launch__grid_size"].value,
        MetricValue::Int(65_536)
    );
    assert_eq!(
        rolled.combined["launch__waves_per_multiprocessor"].value,
        MetricValue::Float(62.06)
    );
    assert_eq!(
        rolled.combined["launch__shared_mem_per_block_static"].value,
        MetricValue::Int(4096)
    );

    let diagnosis = diagnose(&rolled);
    assert_ranked(&diagnosis);
    assert_eq!(
        diagnosis.bound.unwrap().bound,
        Bound::Memory { dram: false }
    );
    let mix = find(&diagnosis, Rule::KernelMix, None);
    assert!(mix.message.starts_with("4 kernels share the call's time: strided_gather 53%, bank_conflicts 36%, scale<float, 4> 9%, tiny_grid 2%"), "{}", mix.message);

    let gather = Some("strided_gather");
    let coalescing = find(&diagnosis, Rule::Coalescing, gather);
    assert_eq!(coalescing.severity, Severity::High);
    assert!(
        coalescing
            .message
            .contains("4.0 of 32 bytes used per sector (12%), 32.0 sectors per request"),
        "{}",
        coalescing.message
    );
    assert!(cites(
        coalescing,
        "smsp__sass_average_data_bytes_per_sector_mem_global_op_ld.ratio",
        4.0
    ));
    let bound = find(&diagnosis, Rule::Bound, gather);
    assert_eq!(bound.severity, Severity::Info);
    assert!(
        bound.message.contains("DRAM at 80.2% of peak"),
        "{}",
        bound.message
    );
    assert!(
        find(&diagnosis, Rule::DominantStall, gather)
            .message
            .contains("long scoreboard")
    );

    let conflicts = Some("bank_conflicts");
    let bank: Vec<&Finding> = diagnosis
        .findings
        .iter()
        .filter(|f| f.rule == Rule::BankConflicts)
        .collect();
    assert_eq!(bank.len(), 2);
    assert!(
        bank.iter()
            .all(|f| f.kernel.as_deref() == conflicts && f.severity == Severity::High)
    );
    assert!(
        bank[0].message.contains("(about 32.0-way)"),
        "{}",
        bank[0].message
    );
    let tail = find(&diagnosis, Rule::TailEffect, conflicts);
    assert_eq!(tail.severity, Severity::High);
    assert!(
        tail.message
            .contains("1.10 waves per SM (264 blocks per wave)"),
        "{}",
        tail.message
    );
    assert!(tail.message.contains("about 45%"), "{}", tail.message);
    assert!(
        find(&diagnosis, Rule::DominantStall, conflicts)
            .message
            .contains("short scoreboard")
    );
    assert!(
        find(&diagnosis, Rule::Bound, conflicts)
            .message
            .contains("the busy unit is L1/L2, not DRAM")
    );

    // scale (9%) and tiny_grid (2%) are under 10% of the call: listed, not diagnosed.
    assert!(
        diagnosis
            .findings
            .iter()
            .all(|f| !matches!(f.kernel.as_deref(), Some("scale<float, 4>" | "tiny_grid")))
    );
}

#[test]
fn pytorch_reference_call() {
    let rolled = rollup(&fixture("kforge-default-torch-raw.csv"));
    let diagnosis = diagnose(&rolled);
    assert_ranked(&diagnosis);
    let gemm = Some("cutlass::Kernel2<cutlass_80_simt_sgemm_256x128_8x4_nn_align1>");
    let occupancy = find(&diagnosis, Rule::OccupancyLimit, gemm);
    assert_eq!(occupancy.severity, Severity::High);
    assert!(
        occupancy.message.starts_with(
            "theoretical occupancy 12.5% limited by registers (202/thread) and shared memory"
        ),
        "{}",
        occupancy.message
    );
    assert!(cites(occupancy, "launch__occupancy_limit_registers", 1.0));
    assert!(cites(occupancy, "launch__occupancy_limit_shared_mem", 1.0));
    let bound = find(&diagnosis, Rule::Bound, gemm);
    assert!(
        bound.message.starts_with("compute-bound: SM 84.7%"),
        "{}",
        bound.message
    );
    let grid = find(&diagnosis, Rule::SmallGrid, gemm);
    assert_eq!(grid.severity, Severity::Low);
    assert!(
        grid.message
            .starts_with("small grid: 128 blocks for 132 SMs"),
        "{}",
        grid.message
    );

    let softmax = Some("<unnamed>::softmax_warp_forward<float, float, float, 11, 0, 0>");
    let divergence = find(&diagnosis, Rule::BranchDivergence, softmax);
    assert_eq!(divergence.severity, Severity::Low);
    assert!(cites(
        divergence,
        "smsp__sass_branch_targets_threads_divergent.sum",
        277_998.0
    ));
    assert_eq!(
        find(&diagnosis, Rule::OccupancyLimit, softmax).severity,
        Severity::Medium
    );
    assert_eq!(
        find(&diagnosis, Rule::Bound, softmax).severity,
        Severity::Medium
    );
    // The elementwise add is 2.4% of the call.
    assert!(diagnosis.findings.iter().all(|f| {
        !f.kernel
            .as_deref()
            .is_some_and(|k| k.contains("elementwise"))
    }));
}

// Hand-made kernels.

/// (metric name, value, unit as ncu prints it)
type Cell<'a> = (&'a str, f64, &'a str);

fn report(kernels: &[(&str, &[Cell<'_>])]) -> NcuReport {
    let mut text = String::from("\"ID\",\"Kernel Name\"");
    let mut names: Vec<(&str, &str)> = Vec::new();
    for (_, metrics) in kernels {
        for (name, _, unit) in *metrics {
            if !names.iter().any(|(n, _)| n == name) {
                names.push((name, unit));
            }
        }
    }
    for (name, _) in &names {
        text.push_str(&format!(",\"{name}\""));
    }
    text.push_str("\n\"\",\"\"");
    for (_, unit) in &names {
        text.push_str(&format!(",\"{unit}\""));
    }
    for (id, (kernel, metrics)) in kernels.iter().enumerate() {
        text.push_str(&format!("\n\"{id}\",\"{kernel}\""));
        for (name, _) in &names {
            let cell = metrics
                .iter()
                .find(|(n, _, _)| n == name)
                .map(|(_, v, _)| v.to_string())
                .unwrap_or_default();
            text.push_str(&format!(",\"{cell}\""));
        }
    }
    parse_csv(&text).unwrap()
}

const SM: &str = "sm__throughput.avg.pct_of_peak_sustained_elapsed";
const MEM: &str = "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed";
const DRAM: &str = "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed";

#[test]
fn bound_classification() {
    let verdict = |sm: f64, mem: f64, dram: f64| {
        diagnose(&rollup(&report(&[(
            "k",
            &[(SM, sm, "%"), (MEM, mem, "%"), (DRAM, dram, "%")],
        )])))
        .bound
        .unwrap()
        .bound
    };
    assert_eq!(verdict(20.0, 59.9, 50.0), Bound::Latency);
    assert_eq!(verdict(20.0, 85.0, 85.0), Bound::Memory { dram: true });
    assert_eq!(verdict(20.0, 85.0, 10.0), Bound::Memory { dram: false });
    assert_eq!(verdict(90.0, 30.0, 30.0), Bound::Compute);
    assert_eq!(verdict(75.0, 70.0, 70.0), Bound::Balanced);
    let latency = diagnose(&rollup(&report(&[(
        "k",
        &[(SM, 10.0, "%"), (MEM, 20.0, "%")],
    )])));
    assert_eq!(latency.findings[0].severity, Severity::High);
    // With DRAM alone the caches may be the busy units: said, and ranked low.
    let dram_only = diagnose(&rollup(&report(&[(
        "k",
        &[(SM, 10.0, "%"), (DRAM, 20.0, "%")],
    )])));
    let verdict = dram_only.bound.unwrap();
    assert!(verdict.memory_is_dram_only);
    assert_eq!(verdict.bound, Bound::Latency);
    let finding = &dram_only.findings[0];
    assert_eq!(finding.severity, Severity::Low);
    assert!(
        finding.message.starts_with("latency-bound or cache-bound"),
        "{}",
        finding.message
    );
}

#[test]
fn occupancy_limited_by_shared_memory() {
    let diagnosis = diagnose(&rollup(&report(&[(
        "k",
        &[
            ("sm__maximum_warps_per_active_cycle_pct", 25.0, "%"),
            (
                "sm__warps_active.avg.pct_of_peak_sustained_active",
                24.0,
                "%",
            ),
            ("launch__occupancy_limit_registers", 8.0, "block"),
            ("launch__occupancy_limit_shared_mem", 2.0, "block"),
            ("launch__occupancy_limit_warps", 8.0, "block"),
            ("launch__occupancy_limit_blocks", 32.0, "block"),
            (
                "launch__shared_mem_per_block_static",
                49_152.0,
                "byte/block",
            ),
            (
                "launch__shared_mem_per_block_dynamic",
                32_768.0,
                "byte/block",
            ),
        ],
    )])));
    let finding = find(&diagnosis, Rule::OccupancyLimit, None);
    assert_eq!(finding.severity, Severity::High);
    assert_eq!(
        finding.message,
        "theoretical occupancy 25.0% limited by shared memory (81.9 KB/block) to 2 blocks/SM; \
         other limits: registers 8, warps (block size) 8, blocks per SM 32"
    );
    assert!(cites(finding, "launch__occupancy_limit_shared_mem", 2.0));
    assert!(!has(&diagnosis, Rule::OccupancyGap));
}

#[test]
fn achieved_occupancy_gap() {
    let metrics: &[(&str, f64, &str)] = &[
        ("sm__maximum_warps_per_active_cycle_pct", 100.0, "%"),
        (
            "sm__warps_active.avg.pct_of_peak_sustained_active",
            60.0,
            "%",
        ),
        ("launch__grid_size", 1024.0, ""),
        ("launch__sm_count", 132.0, "SM"),
    ];
    let diagnosis = diagnose(&rollup(&report(&[("k", metrics)])));
    assert_eq!(
        find(&diagnosis, Rule::OccupancyGap, None).severity,
        Severity::Medium
    );
    // With fewer blocks than SMs the small-grid finding explains the gap instead.
    let mut small = metrics.to_vec();
    small[2] = ("launch__grid_size", 16.0, "");
    let diagnosis = diagnose(&rollup(&report(&[("k", &small)])));
    assert!(!has(&diagnosis, Rule::OccupancyGap));
    let grid = find(&diagnosis, Rule::SmallGrid, None);
    assert_eq!(grid.severity, Severity::High);
    assert!(
        grid.message
            .contains("16 blocks for 132 SMs leaves 116 SMs (88%) idle"),
        "{}",
        grid.message
    );
}

#[test]
fn coalescing_from_sectors_per_request_alone() {
    let kernel = |sectors: f64| {
        diagnose(&rollup(&report(&[(
            "k",
            &[
                (
                    "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum",
                    sectors,
                    "sector",
                ),
                (
                    "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum",
                    1000.0,
                    "",
                ),
            ],
        )])))
    };
    assert!(!has(&kernel(4000.0), Rule::Coalescing));
    let ambiguous = kernel(16_000.0);
    assert_eq!(
        find(&ambiguous, Rule::Coalescing, None).severity,
        Severity::Info
    );
    let strided = kernel(32_000.0);
    let finding = find(&strided, Rule::Coalescing, None);
    assert_eq!(finding.severity, Severity::Medium);
    assert!(
        finding.message.contains("32.0 sectors per request"),
        "{}",
        finding.message
    );
}

#[test]
fn bank_conflict_and_tail_thresholds() {
    let kernel = |conflicts: f64, waves: f64| {
        diagnose(&rollup(&report(&[(
            "k",
            &[
                (
                    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum",
                    conflicts,
                    "",
                ),
                (
                    "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum",
                    1000.0,
                    "",
                ),
                ("launch__waves_per_multiprocessor", waves, ""),
            ],
        )])))
    };
    let quiet = kernel(99.0, 3.95);
    assert!(
        !has(&quiet, Rule::BankConflicts) && !has(&quiet, Rule::TailEffect),
        "{:#?}",
        quiet.findings
    );
    let two_way = kernel(500.0, 1.5);
    let bank = find(&two_way, Rule::BankConflicts, None);
    assert_eq!(bank.severity, Severity::High);
    assert!(bank.message.contains("(about 2.0-way)"), "{}", bank.message);
    let tail = find(&two_way, Rule::TailEffect, None);
    assert_eq!(tail.severity, Severity::Medium);
    assert!(tail.message.contains("about 25%"), "{}", tail.message);
    assert_eq!(
        find(&kernel(150.0, 2.6), Rule::BankConflicts, None).severity,
        Severity::Low
    );
    assert_eq!(
        find(&kernel(150.0, 2.6), Rule::TailEffect, None).severity,
        Severity::Low
    );
    // Under one wave there is no tail (the small-grid rule covers it).
    assert!(!has(&kernel(0.0, 0.5), Rule::TailEffect));
}

#[test]
fn branch_uniformity_needs_divergent_branches() {
    let kernel = |uniform: f64, divergent: f64| {
        diagnose(&rollup(&report(&[(
            "k",
            &[
                (
                    "smsp__sass_average_branch_targets_threads_uniform.pct",
                    uniform,
                    "%",
                ),
                (
                    "smsp__sass_branch_targets_threads_divergent.sum",
                    divergent,
                    "branches",
                ),
            ],
        )])))
    };
    // 0% uniform with no divergent branch means no branches at all.
    assert!(!has(&kernel(0.0, 0.0), Rule::BranchDivergence));
    assert_eq!(
        find(&kernel(60.0, 10.0), Rule::BranchDivergence, None).severity,
        Severity::Medium
    );
    assert!(!has(&kernel(95.0, 10.0), Rule::BranchDivergence));
}

#[test]
fn repeated_launches_are_one_kernel_and_missing_durations_weigh_equally() {
    let launch: &[(&str, f64, &str)] = &[
        ("gpu__time_duration.sum", 1000.0, "ns"),
        (SM, 90.0, "%"),
        (MEM, 10.0, "%"),
    ];
    let rolled = rollup(&report(&[("k(int)", launch), ("k(int)", launch)]));
    assert_eq!(rolled.kernels.len(), 2);
    let diagnosis = diagnose(&rolled);
    assert!(!has(&diagnosis, Rule::KernelMix));
    assert!(diagnosis.findings.iter().all(|f| f.kernel.is_none()));

    let rolled = rollup(&report(&[
        ("a", &[(SM, 90.0, "%")]),
        ("b", &[(SM, 30.0, "%")]),
    ]));
    assert_eq!(rolled.weighting, Weighting::Equal);
    assert_eq!(rolled.total_duration_ns, None);
    assert_eq!(rolled.number(SM), Some(60.0));
    assert_eq!(rolled.kernels[1].share, 0.5);
}

#[test]
fn empty_report_diagnoses_nothing() {
    let rolled = rollup(
        &parse_csv("\"ID\",\"Kernel Name\",\"gpu__time_duration.sum\"\n\"\",\"\",\"ns\"\n")
            .unwrap(),
    );
    assert!(rolled.is_empty());
    let diagnosis = diagnose(&rolled);
    assert!(diagnosis.bound.is_none());
    assert!(diagnosis.findings.is_empty());
    let metric = Metric {
        value: MetricValue::Text("x".into()),
        unit: String::new(),
    };
    assert_eq!(metric.number(), None);
}
