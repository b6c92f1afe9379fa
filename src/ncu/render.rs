//! The text the Judge reads: a few hundred tokens, not ncu's two thousand metrics (giving the
//! Judge every metric did worse than a curated set). Three parts: the kernels of the call with
//! their share of its time; the curated metrics as a compact table, one line per topic of
//! short-labelled values with units (values the export lacks are left out); and the diagnosis,
//! most severe first (at most six lines), each citing the metric names and values it rests on.
//! Exports of the details page add ncu's own top optimisation hints.

use std::fmt::Write as _;

use crate::ncu::diagnose::{Diagnosis, Evidence, Finding, Rule, Severity, short_kernel_name};
use crate::ncu::metrics as m;
use crate::ncu::rollup::{KernelShare, Rollup, Weighting};
use crate::ncu::sections::SectionFile;

/// Where a table item's value comes from.
enum Source {
    Metric(&'static str),
    /// The first of these that is present.
    FirstOf(&'static [&'static str]),
    /// Stall cycles per issued instruction, by reason.
    Stall(&'static str),
    /// A cycle count per instruction, one decimal.
    Cycles(&'static str),
    /// sectors / requests.
    PerRequest(&'static str, &'static str),
    /// conflicts as a share of wavefronts.
    ConflictShare(&'static str, &'static str),
    /// static + dynamic shared memory per block.
    SharedMemory,
}

/// The table: one line per topic, each a list of short-labelled values.
const GROUPS: &[(&str, &[(&str, Source)])] = &[
    (
        "% of peak",
        &[
            ("SM", Source::Metric(m::SM_THROUGHPUT)),
            ("memory", Source::Metric(m::MEMORY_THROUGHPUT)),
            (
                "DRAM",
                Source::FirstOf(&[m::DRAM_THROUGHPUT, m::DRAM_THROUGHPUT_ALT]),
            ),
            ("L1", Source::Metric(m::L1_THROUGHPUT)),
            ("L2", Source::Metric(m::L2_THROUGHPUT)),
        ],
    ),
    (
        "DRAM",
        &[
            ("read", Source::Metric(m::DRAM_BYTES_READ)),
            ("written", Source::Metric(m::DRAM_BYTES_WRITE)),
        ],
    ),
    (
        "hit rate",
        &[
            ("L1", Source::Metric(m::L1_HIT_RATE)),
            ("L2", Source::Metric(m::L2_HIT_RATE)),
        ],
    ),
    (
        "occupancy",
        &[
            ("achieved", Source::Metric(m::ACHIEVED_OCCUPANCY)),
            ("theoretical", Source::Metric(m::THEORETICAL_OCCUPANCY)),
        ],
    ),
    (
        "blocks/SM limit",
        &[
            ("registers", Source::Metric(m::LIMIT_REGISTERS)),
            ("shared mem", Source::Metric(m::LIMIT_SHARED_MEM)),
            ("warps", Source::Metric(m::LIMIT_WARPS)),
            ("SM", Source::Metric(m::LIMIT_BLOCKS)),
        ],
    ),
    (
        "launch",
        &[
            ("grid", Source::Metric(m::GRID_SIZE)),
            ("block", Source::Metric(m::BLOCK_SIZE)),
            ("waves/SM", Source::Metric(m::WAVES_PER_SM)),
            ("regs/thread", Source::Metric(m::REGISTERS_PER_THREAD)),
            ("smem/block", Source::SharedMemory),
        ],
    ),
    (
        "work",
        &[
            ("instructions", Source::Metric(m::INSTRUCTIONS)),
            ("SM active cycles", Source::Metric(m::SM_ACTIVE_CYCLES)),
            ("FMA pipe", Source::Metric(m::FMA_PIPE)),
            ("tensor pipe", Source::Metric(m::TENSOR_PIPE)),
        ],
    ),
    (
        "warp cycles per issued instruction",
        &[
            ("total", Source::Cycles(m::WARP_LATENCY)),
            ("long scoreboard", Source::Stall("long_scoreboard")),
            ("barrier", Source::Stall("barrier")),
            ("MIO throttle", Source::Stall("mio_throttle")),
            ("short scoreboard", Source::Stall("short_scoreboard")),
            ("not selected", Source::Stall("not_selected")),
            ("math pipe throttle", Source::Stall("math_pipe_throttle")),
        ],
    ),
    (
        "branches",
        &[
            ("uniform", Source::Metric(m::BRANCH_UNIFORMITY)),
            ("divergent", Source::Metric(m::DIVERGENT_BRANCHES)),
        ],
    ),
    (
        "global loads",
        &[
            (
                "sectors/request",
                Source::PerRequest(m::GLOBAL_LOAD_SECTORS, m::GLOBAL_LOAD_REQUESTS),
            ),
            (
                "bytes used/sector",
                Source::Metric(m::GLOBAL_LOAD_BYTES_PER_SECTOR),
            ),
        ],
    ),
    (
        "global stores",
        &[
            (
                "sectors/request",
                Source::PerRequest(m::GLOBAL_STORE_SECTORS, m::GLOBAL_STORE_REQUESTS),
            ),
            (
                "bytes used/sector",
                Source::Metric(m::GLOBAL_STORE_BYTES_PER_SECTOR),
            ),
        ],
    ),
    (
        "smem bank conflicts",
        &[
            (
                "loads",
                Source::ConflictShare(m::SHARED_LOAD_CONFLICTS, m::SHARED_LOAD_WAVEFRONTS),
            ),
            (
                "stores",
                Source::ConflictShare(m::SHARED_STORE_CONFLICTS, m::SHARED_STORE_WAVEFRONTS),
            ),
        ],
    ),
];

/// Stall reasons outside the default five are shown when they take this share of the cycles.
const OTHER_STALL_SHARE: f64 = 0.10;
/// Metrics of a user's sections added to the table, at most.
const MAX_EXTRA: usize = 24;
/// Findings shown; the rest are counted.
const SHOWN_FINDINGS: usize = 6;
/// Metrics cited per finding.
const CITED_METRICS: usize = 3;
/// Kernels listed by name before "+N more".
const LISTED_KERNELS: usize = 6;
/// ncu rule messages shown (details exports), and their length.
const LISTED_RULES: usize = 3;
const RULE_CHARS: usize = 240;

/// The Judge's view of one profiled call.
pub fn render_for_judge(rollup: &Rollup, diagnosis: &Diagnosis) -> String {
    render_for_judge_with(rollup, diagnosis, &[])
}

/// As [`render_for_judge`], plus the metrics of a user's own sections that the curated table
/// does not already show, under their section labels.
pub fn render_for_judge_with(
    rollup: &Rollup,
    diagnosis: &Diagnosis,
    sections: &[SectionFile],
) -> String {
    let mut out = String::new();
    if rollup.is_empty() {
        out.push_str("Nsight Compute: no kernels were profiled in the call.\n");
        return out;
    }
    kernels(rollup, &mut out);
    table(rollup, sections, &mut out);
    findings(diagnosis, &mut out);
    rules(rollup, &mut out);
    out
}

fn kernels(rollup: &Rollup, out: &mut String) {
    let launches = rollup.kernels.len();
    let total = rollup
        .total_duration_ns
        .map(|t| format!(", {} on the GPU", format_value(t, "ns")))
        .unwrap_or_default();
    let plural = if launches == 1 { "" } else { "es" };
    let _ = writeln!(
        out,
        "Nsight Compute: {launches} kernel launch{plural} in the call{total}"
    );
    if rollup.weighting == Weighting::Equal && launches > 1 {
        out.push_str("(no durations in the export: every launch weighs the same)\n");
    }
    // Launches of one kernel are one line: their summed share and time, the longest one's shape.
    let mut groups: Vec<(&str, f64, Option<f64>, usize, &KernelShare)> = Vec::new();
    for kernel in &rollup.kernels {
        match groups.iter_mut().find(|g| g.0 == kernel.name) {
            Some(group) => {
                group.1 += kernel.share;
                group.2 = group.2.zip(kernel.duration_ns).map(|(a, b)| a + b);
                group.3 += 1;
                if kernel.share > group.4.share {
                    group.4 = kernel;
                }
            }
            None => groups.push((&kernel.name, kernel.share, kernel.duration_ns, 1, kernel)),
        }
    }
    if groups.len() == 1 {
        let times = if launches > 1 {
            format!(" (×{launches})")
        } else {
            String::new()
        };
        let _ = writeln!(
            out,
            "kernel: {}{times}",
            shorten(&short_kernel_name(groups[0].0))
        );
        return;
    }
    groups.sort_by(|a, b| b.1.total_cmp(&a.1));
    for (name, share, duration, count, longest) in groups.iter().take(LISTED_KERNELS) {
        let duration = duration
            .map(|d| format_value(d, "ns"))
            .unwrap_or_else(|| "-".to_string());
        let mut shape = Vec::new();
        if *count > 1 {
            shape.push(format!("×{count}"));
        }
        if let (Some(grid), Some(block)) =
            (longest.number(m::GRID_SIZE), longest.number(m::BLOCK_SIZE))
        {
            shape.push(format!("grid {grid:.0}×{block:.0}"));
        }
        if let Some(regs) = longest.number(m::REGISTERS_PER_THREAD) {
            shape.push(format!("{regs:.0} regs"));
        }
        if let Some(waves) = longest.number(m::WAVES_PER_SM) {
            shape.push(format!("{waves:.2} waves"));
        }
        let shape = if shape.is_empty() {
            String::new()
        } else {
            format!(" ({})", shape.join(", "))
        };
        let _ = writeln!(
            out,
            "  {:>5.1}%  {duration:>9}  {}{shape}",
            100.0 * share,
            shorten(&short_kernel_name(name))
        );
    }
    if groups.len() > LISTED_KERNELS {
        let _ = writeln!(out, "  (+{} more kernels)", groups.len() - LISTED_KERNELS);
    }
}

fn shorten(name: &str) -> String {
    const MAX: usize = 72;
    if name.chars().count() <= MAX {
        name.to_string()
    } else {
        let kept: String = name.chars().take(MAX - 1).collect();
        format!("{kept}…")
    }
}

fn table(rollup: &Rollup, sections: &[SectionFile], out: &mut String) {
    let mut lines: Vec<(String, Vec<String>)> = Vec::new();
    // The first line already gives the duration.
    let mut shown: Vec<&str> = vec![m::DURATION];
    for (topic, items) in GROUPS {
        let mut values: Vec<(String, String)> = items
            .iter()
            .filter_map(|(label, source)| {
                row_value(rollup, source, &mut shown).map(|value| ((*label).to_string(), value))
            })
            .collect();
        if topic.starts_with("warp cycles") {
            values.extend(other_stalls(rollup));
            // The total first, then the reasons from the largest.
            let first = usize::from(values.first().is_some_and(|(label, _)| label == "total"));
            values[first..].sort_by(|a, b| {
                let number = |v: &str| v.parse::<f64>().unwrap_or(0.0);
                number(&b.1).total_cmp(&number(&a.1))
            });
        }
        let values: Vec<String> = values
            .into_iter()
            .map(|(l, v)| format!("{l} {v}"))
            .collect();
        if !values.is_empty() {
            lines.push(((*topic).to_string(), values));
        }
    }
    let mut extra = Vec::new();
    for metric in sections.iter().flat_map(|s| &s.metrics) {
        if shown.contains(&metric.name.as_str()) || extra.len() >= MAX_EXTRA {
            continue;
        }
        if let Some(found) = rollup.combined.get(&metric.name)
            && let Some(value) = found.number()
        {
            let label = metric.label.as_deref().unwrap_or(&metric.name);
            extra.push(format!("{label} {}", table_value(value, &found.unit)));
            shown.push(&metric.name);
        }
    }
    if !extra.is_empty() {
        lines.push(("your sections".to_string(), extra));
    }
    if lines.is_empty() {
        out.push_str("metrics: none of kforge's curated metrics are in this export\n");
        return;
    }
    let combined = if rollup.kernels.len() > 1 {
        " (whole call: rates weighted by duration, counts summed, launch of the longest kernel, \
         registers and shared memory the maximum)"
    } else {
        ""
    };
    let _ = writeln!(out, "metrics{combined}:");
    for (topic, values) in lines {
        let _ = writeln!(out, "  {topic}: {}", values.join(", "));
    }
}

/// Stall reasons beyond the default five that still matter (full-set exports have them all).
fn other_stalls(rollup: &Rollup) -> Vec<(String, String)> {
    let Some(total) = rollup.number(m::WARP_LATENCY).filter(|t| *t > 0.0) else {
        return Vec::new();
    };
    rollup
        .combined
        .iter()
        .filter_map(|(name, metric)| {
            let reason = m::stall_reason(name)?;
            if reason == "selected" || m::DEFAULT_STALLS.contains(&reason) {
                return None;
            }
            let cycles = metric.number().filter(|c| c / total >= OTHER_STALL_SHARE)?;
            Some((reason.replace('_', " "), format!("{cycles:.1}")))
        })
        .collect()
}

/// A value for the table, where the label already says what is counted: units only where they
/// carry information (time, bytes, percent, rates).
fn table_value(value: f64, unit: &str) -> String {
    match unit {
        "ns" | "byte" | "%" | "byte/s" | "hz" => format_value(value, unit),
        _ => format_value(value, ""),
    }
}

fn row_value<'a>(
    rollup: &'a Rollup,
    source: &'a Source,
    shown: &mut Vec<&'a str>,
) -> Option<String> {
    let number = |name: &str| rollup.number(name);
    match source {
        Source::Metric(name) => {
            let metric = rollup.combined.get(*name)?;
            let value = metric.number()?;
            shown.push(name);
            Some(table_value(value, &metric.unit))
        }
        Source::FirstOf(names) => names.iter().find_map(|name| {
            let metric = rollup.combined.get(*name)?;
            let value = metric.number()?;
            shown.push(name);
            Some(table_value(value, &metric.unit))
        }),
        Source::Stall(reason) => {
            let name = m::stall_metric(reason);
            let (key, metric) = rollup.combined.get_key_value(&name)?;
            let value = metric.number()?;
            shown.push(key);
            Some(format!("{value:.1}"))
        }
        Source::Cycles(name) => {
            let value = number(name)?;
            shown.push(name);
            Some(format!("{value:.1}"))
        }
        Source::PerRequest(sectors, requests) => {
            let requests_value = number(requests).filter(|r| *r > 0.0)?;
            let sectors_value = number(sectors)?;
            shown.push(sectors);
            shown.push(requests);
            Some(format!("{:.1}", sectors_value / requests_value))
        }
        Source::ConflictShare(conflicts, wavefronts) => {
            let conflicts_value = number(conflicts)?;
            let wavefronts_value = number(wavefronts)?;
            shown.push(conflicts);
            shown.push(wavefronts);
            if wavefronts_value <= 0.0 {
                return Some("none (no traffic)".to_string());
            }
            Some(format!(
                "{:.1}% of {} wavefronts",
                100.0 * conflicts_value / wavefronts_value,
                format_value(wavefronts_value, "")
            ))
        }
        Source::SharedMemory => {
            let stat = number(m::SHARED_MEM_STATIC);
            let dynamic = number(m::SHARED_MEM_DYNAMIC);
            if stat.is_none() && dynamic.is_none() {
                return None;
            }
            shown.push(m::SHARED_MEM_STATIC);
            shown.push(m::SHARED_MEM_DYNAMIC);
            let (s, d) = (stat.unwrap_or(0.0), dynamic.unwrap_or(0.0));
            Some(format!(
                "{} ({} static + {} dynamic)",
                format_value(s + d, "byte"),
                format_value(s, "byte"),
                format_value(d, "byte")
            ))
        }
    }
}

fn findings(diagnosis: &Diagnosis, out: &mut String) {
    // The kernel list above already says how the time splits.
    let shown: Vec<&Finding> = diagnosis
        .findings
        .iter()
        .filter(|f| f.rule != Rule::KernelMix)
        .collect();
    if shown.is_empty() {
        out.push_str(
            "diagnosis: no rule fired (the metrics it needs may be missing from this section set)\n",
        );
        return;
    }
    out.push_str("diagnosis (most severe first):\n");
    for (index, finding) in shown.iter().take(SHOWN_FINDINGS).enumerate() {
        let kernel = finding
            .kernel
            .as_deref()
            .map(|k| format!("{}: ", shorten(k)))
            .unwrap_or_default();
        let cited = if finding.evidence.is_empty() {
            String::new()
        } else {
            let cited: Vec<String> = finding
                .evidence
                .iter()
                .take(CITED_METRICS)
                .map(cite)
                .collect();
            format!(" [{}]", cited.join(", "))
        };
        let _ = writeln!(
            out,
            "{}. [{}] {kernel}{}{cited}",
            index + 1,
            finding.severity,
            finding.message
        );
    }
    if shown.len() > SHOWN_FINDINGS {
        let rest = &shown[SHOWN_FINDINGS..];
        let worst = rest
            .iter()
            .map(|f| f.severity)
            .max()
            .unwrap_or(Severity::Info);
        let plural = if rest.len() == 1 { "" } else { "s" };
        let _ = writeln!(
            out,
            "(+{} more finding{plural}, {worst} or lower)",
            rest.len()
        );
    }
}

fn cite(evidence: &Evidence) -> String {
    format!(
        "{}={}",
        evidence.metric,
        format_value(evidence.value, &evidence.unit)
    )
}

fn rules(rollup: &Rollup, out: &mut String) {
    let mut hints: Vec<(f64, String, &str)> = rollup
        .kernels
        .iter()
        .flat_map(|k| {
            k.rules.iter().filter(|r| r.kind == "OPT").map(move |r| {
                let speedup = r.estimated_speedup.as_ref().map_or(0.0, |(_, s)| *s);
                (
                    speedup * k.share,
                    short_kernel_name(&k.name),
                    r.message.as_str(),
                )
            })
        })
        .collect();
    if hints.is_empty() {
        return;
    }
    hints.sort_by(|a, b| b.0.total_cmp(&a.0));
    out.push_str("ncu's own hints (estimated speedup):\n");
    let several = rollup.kernels.len() > 1;
    for (speedup, kernel, message) in hints.into_iter().take(LISTED_RULES) {
        let mut text: String = message.split_whitespace().collect::<Vec<_>>().join(" ");
        if text.chars().count() > RULE_CHARS {
            text = text.chars().take(RULE_CHARS - 1).collect::<String>() + "…";
        }
        let kernel = if several {
            format!("{kernel}: ")
        } else {
            String::new()
        };
        let _ = writeln!(out, "  - [{speedup:.0}%] {kernel}{text}");
    }
}

/// A value with its (normalised) unit, compact: `165.1 us`, `208.4 MB`, `36.9%`, `62.62M`.
pub fn format_value(value: f64, unit: &str) -> String {
    match unit {
        "ns" => {
            let abs = value.abs();
            if abs >= 1e9 {
                format!("{:.2} s", value / 1e9)
            } else if abs >= 1e6 {
                format!("{:.2} ms", value / 1e6)
            } else if abs >= 1e3 {
                format!("{:.1} us", value / 1e3)
            } else {
                format!("{value:.0} ns")
            }
        }
        "byte" => scaled(value, "B"),
        "byte/s" => scaled(value, "B/s"),
        "hz" => scaled(value, "Hz"),
        "%" => format!("{value:.1}%"),
        "" => count(value),
        other => match other.strip_prefix("byte/") {
            Some(per) => format!("{}/{per}", scaled(value, "B")),
            None => format!("{} {other}", count(value)),
        },
    }
}

fn scaled(value: f64, unit: &str) -> String {
    let abs = value.abs();
    let (divisor, prefix) = if abs >= 1e12 {
        (1e12, "T")
    } else if abs >= 1e9 {
        (1e9, "G")
    } else if abs >= 1e6 {
        (1e6, "M")
    } else if abs >= 1e3 {
        (1e3, "K")
    } else {
        (1.0, "")
    };
    if prefix.is_empty() {
        format!("{} {unit}", trim_number(value))
    } else {
        format!("{:.1} {prefix}{unit}", value / divisor)
    }
}

fn count(value: f64) -> String {
    let abs = value.abs();
    if abs >= 1e9 {
        format!("{:.2}G", value / 1e9)
    } else if abs >= 1e6 {
        format!("{:.2}M", value / 1e6)
    } else if abs >= 1e4 {
        format!("{:.1}K", value / 1e3)
    } else {
        trim_number(value)
    }
}

fn trim_number(value: f64) -> String {
    if value.fract() == 0.0 {
        format!("{value:.0}")
    } else if value.abs() >= 100.0 {
        format!("{value:.1}")
    } else {
        format!("{value:.2}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_compact_with_units() {
        assert_eq!(format_value(165_120.0, "ns"), "165.1 us");
        assert_eq!(format_value(850.0, "ns"), "850 ns");
        assert_eq!(format_value(12_345_678.0, "ns"), "12.35 ms");
        assert_eq!(format_value(208_445_952.0, "byte"), "208.4 MB");
        assert_eq!(format_value(512.0, "byte"), "512 B");
        assert_eq!(format_value(1_951_365_005_793.74, "byte/s"), "2.0 TB/s");
        assert_eq!(format_value(36.9, "%"), "36.9%");
        assert_eq!(format_value(62_619_648.0, "inst"), "62.62M inst");
        assert_eq!(format_value(3.88, ""), "3.88");
        assert_eq!(format_value(19.0, "register/thread"), "19 register/thread");
        assert_eq!(format_value(4096.0, "byte/block"), "4.1 KB/block");
        assert_eq!(format_value(32.0, "byte/sector"), "32 B/sector");
    }
}
