//! From numbers to a diagnosis the Judge can act on: fixed, documented rules, each finding citing
//! the metrics and values it rests on, ranked by severity and by how much of the call's time is
//! at stake.
//!
//! The rules run per kernel: a call of one kernel (however often launched) is judged as a whole;
//! in a call of several, each distinct kernel name with ≥ 10 % of the call's time is judged by its
//! longest launch and named in its findings, and kernels below that are listed but not judged
//! (a memory-bound copy and a compute-bound GEMM do not average into anything true). The
//! duration-weighted roll-up only gives [`Diagnosis::bound`], the call's headline.
//!
//! 1. **Bound** (ncu's own speed-of-light reading). `sm` = `sm__throughput.avg.pct_of_peak_
//!    sustained_elapsed`, `mem` = `gpu__compute_memory_throughput...` (the busiest memory unit;
//!    DRAM throughput when absent), `dram` = `gpu__dram_throughput...` (or `dram__throughput...`).
//!    Both below 60 % → **latency-bound**: the hardware waits; look at stalls and occupancy
//!    (high severity below 30 %, medium otherwise; low, and said to be uncertain, when only DRAM
//!    throughput was collected, since L1/L2 may be the busy units). Otherwise the larger decides: **memory-bound**
//!    (DRAM-bound when `dram` ≥ 60 %, else bound in L1/L2) or **compute-bound**; both ≥ 60 % and
//!    within 10 points → **balanced**. A bound at ≥ 80 % is near its roof (info: only doing less
//!    work of that kind helps); 60–80 % is low severity.
//! 2. **Dominant stall**: the stall reason with the most cycles per issued instruction
//!    (`smsp__average_warps_issue_stalled_<reason>_per_issue_active.ratio`, "selected" excluded),
//!    as a share of all cycles between issues (`smsp__average_warp_latency_per_inst_issued.ratio`,
//!    or the sum of the reasons present). Reported at ≥ 25 % share and ≥ 1 cycle; medium at
//!    ≥ 50 % share, high when the kernel is also latency-bound.
//! 3. **Kernel mix** (calls of several kernels): which kernels take the time (info).
//! 4. **Occupancy limit**: theoretical occupancy (`sm__maximum_warps_per_active_cycle_pct`)
//!    below 100 % is limited by the smallest of the blocks-per-SM limits
//!    (`launch__occupancy_limit_{registers,shared_mem,warps,blocks,barriers}`); the finding names
//!    it with its cause (registers per thread, shared memory per block). High at ≤ 25 %, medium at
//!    ≤ 50 %, low above.
//! 5. **Achieved vs theoretical occupancy**: a gap of ≥ 15 points
//!    (`sm__warps_active.avg.pct_of_peak_sustained_active`) means warps are not resident as the
//!    limits allow (uneven block run times, a tail, too few blocks): low, medium at ≥ 30 points.
//!    Not reported when rule 8 (small grid) already explains it.
//! 6. **Coalescing**: bytes used per 32-byte sector of global loads/stores
//!    (`smsp__sass_average_data_bytes_per_sector_mem_global_op_{ld,st}.ratio`, ideal 32) below
//!    16 (50 %) is uncoalesced: medium, high below 8 (25 %). The finding also gives sectors per
//!    request (`l1tex__t_sectors_pipe_lsu_mem_global_op_*.sum` / `..._requests_...`): a warp of 32
//!    threads each reading a contiguous 4-byte word touches 128 bytes = 4 sectors per request,
//!    8 for 8-byte and 16 for 16-byte (float4) accesses, so sectors per request alone cannot tell
//!    wide accesses from strided ones. Without the bytes-per-sector metric, more than 16 sectors
//!    per request (impossible for contiguous accesses of ≤ 16 bytes per thread) is reported as
//!    uncoalesced (medium) and 4–16 as ambiguous (info).
//! 7. **Shared-memory bank conflicts**: conflicts as a share of shared-memory wavefronts, loads
//!    and stores apart (`l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_{ld,st}.sum` /
//!    `l1tex__data_pipe_lsu_wavefronts_mem_shared_op_{ld,st}.sum`; ncu's own rule uses the same
//!    10 % threshold). An n-way conflict replays each request n times, so the share is
//!    (n − 1)/n and n ≈ 1 / (1 − share). Low from 10 %, medium from 25 %, high from 50 % (2-way).
//! 8. **Small grid**: fewer blocks (`launch__grid_size`) than SMs (`launch__sm_count`) leaves
//!    SMs idle: low below 10 % idle SMs, medium from 10 %, high from 50 %.
//! 9. **Tail effect**: with `w` = `launch__waves_per_multiprocessor` ≥ 1, the last partial wave
//!    leaves (⌈w⌉ − w)/⌈w⌉ of the launch's SM time idle (1.1 waves → 45 %). Low from 10 %,
//!    medium from 20 %, high from 40 %.
//! 10. **Branch divergence**: with divergent branch targets
//!     (`smsp__sass_branch_targets_threads_divergent.sum` > 0), branch uniformity
//!     (`smsp__sass_average_branch_targets_threads_uniform.pct`) below 90 % is low, below 70 %
//!     medium. (Uniformity reads 0 % when a kernel has no branches; the divergent count tells.)
//!
//! Ranking: severity first, then impact = the share of the call's time the finding concerns times
//! the fraction of it the rule estimates is at stake.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::ncu::metrics as m;
use crate::ncu::parse::{Metric, MetricMap};
use crate::ncu::rollup::{KernelShare, Rollup};

/// How much a finding matters, lowest first (so `Ord` sorts by severity).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Severity {
    Info,
    Low,
    Medium,
    High,
}

impl std::fmt::Display for Severity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Severity::Info => "info",
            Severity::Low => "low",
            Severity::Medium => "medium",
            Severity::High => "high",
        })
    }
}

/// Which documented rule produced a finding.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Rule {
    Bound,
    DominantStall,
    KernelMix,
    OccupancyLimit,
    OccupancyGap,
    Coalescing,
    BankConflicts,
    SmallGrid,
    TailEffect,
    BranchDivergence,
}

/// A metric value a finding rests on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Evidence {
    pub metric: String,
    pub value: f64,
    pub unit: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Finding {
    pub rule: Rule,
    pub severity: Severity,
    /// The kernel it concerns (short name), when the call has several; None for the whole call.
    pub kernel: Option<String>,
    pub message: String,
    pub evidence: Vec<Evidence>,
    /// Share of the call's time at stake (0..=1), for ranking.
    pub impact: f64,
}

/// What limits a kernel (or, in [`Diagnosis::bound`], the call as a whole).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Bound {
    Latency,
    /// `dram`: DRAM is the busy unit (else L1/L2 or the load/store path).
    Memory {
        dram: bool,
    },
    Compute,
    Balanced,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct BoundVerdict {
    pub bound: Bound,
    pub sm_pct: f64,
    pub memory_pct: f64,
    pub dram_pct: Option<f64>,
    /// The export has DRAM throughput but not the all-units memory throughput, so the caches
    /// may be busy without showing.
    pub memory_is_dram_only: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Diagnosis {
    pub bound: Option<BoundVerdict>,
    /// Most severe first.
    pub findings: Vec<Finding>,
}

/// Thresholds of the rules in the module doc.
const HIGH_THROUGHPUT: f64 = 60.0;
const NEAR_ROOF: f64 = 80.0;
const BALANCED_GAP: f64 = 10.0;
const STALL_SHARE: f64 = 0.25;
const MIN_KERNEL_SHARE: f64 = 0.10;
const OCCUPANCY_GAP: f64 = 15.0;
const SECTOR_BYTES: f64 = 32.0;
const BANK_CONFLICT_SHARE: f64 = 0.10;
const TAIL_IDLE: f64 = 0.10;
const BRANCH_UNIFORMITY: f64 = 90.0;

/// Applies the rules of the module doc.
pub fn diagnose(rollup: &Rollup) -> Diagnosis {
    let mut findings = Vec::new();
    let groups = kernel_groups(rollup);
    let several = groups.len() > 1;
    if several {
        findings.push(kernel_mix(&groups));
    }
    for group in &groups {
        if several && group.share < MIN_KERNEL_SHARE {
            continue;
        }
        let metrics = &group.launch.metrics;
        let mut local = Vec::new();
        let verdict = bound_verdict(metrics);
        if let Some(verdict) = &verdict {
            local.push(bound_finding(metrics, verdict));
        }
        local.extend(dominant_stall(metrics, verdict.map(|v| v.bound)));
        let small_grid = small_grid(metrics, &mut local);
        occupancy(metrics, small_grid, &mut local);
        coalescing(metrics, &mut local);
        bank_conflicts(metrics, &mut local);
        tail_effect(metrics, &mut local);
        divergence(metrics, &mut local);
        for mut finding in local {
            finding.kernel = several.then(|| group.name.clone());
            finding.impact *= group.share;
            findings.push(finding);
        }
    }
    findings.sort_by(|a, b| {
        b.severity
            .cmp(&a.severity)
            .then(b.impact.total_cmp(&a.impact))
    });
    Diagnosis {
        bound: bound_verdict(&rollup.combined),
        findings,
    }
}

fn number(metrics: &MetricMap, name: &str) -> Option<f64> {
    metrics.get(name).and_then(Metric::number)
}

/// A metric value with its unit, as evidence.
fn evidence(metrics: &MetricMap, name: &str) -> Option<Evidence> {
    let metric = metrics.get(name)?;
    Some(Evidence {
        metric: name.to_string(),
        value: metric.number()?,
        unit: metric.unit.clone(),
    })
}

fn bound_verdict(metrics: &MetricMap) -> Option<BoundVerdict> {
    let sm = number(metrics, m::SM_THROUGHPUT)?;
    let dram =
        number(metrics, m::DRAM_THROUGHPUT).or_else(|| number(metrics, m::DRAM_THROUGHPUT_ALT));
    let all_units = number(metrics, m::MEMORY_THROUGHPUT);
    let memory = all_units.or(dram)?;
    let bound = if sm < HIGH_THROUGHPUT && memory < HIGH_THROUGHPUT {
        Bound::Latency
    } else if sm >= HIGH_THROUGHPUT
        && memory >= HIGH_THROUGHPUT
        && (sm - memory).abs() < BALANCED_GAP
    {
        Bound::Balanced
    } else if memory >= sm {
        Bound::Memory {
            dram: dram.is_some_and(|d| d >= HIGH_THROUGHPUT),
        }
    } else {
        Bound::Compute
    };
    Some(BoundVerdict {
        bound,
        sm_pct: sm,
        memory_pct: memory,
        dram_pct: dram,
        memory_is_dram_only: all_units.is_none(),
    })
}

fn bound_finding(metrics: &MetricMap, verdict: &BoundVerdict) -> Finding {
    let mut ev: Vec<Evidence> = [m::SM_THROUGHPUT, m::MEMORY_THROUGHPUT]
        .iter()
        .filter_map(|n| evidence(metrics, n))
        .collect();
    if let Some(dram) = [m::DRAM_THROUGHPUT, m::DRAM_THROUGHPUT_ALT]
        .iter()
        .find_map(|n| evidence(metrics, n))
    {
        ev.push(dram);
    }
    let (sm, mem) = (verdict.sm_pct, verdict.memory_pct);
    let top = sm.max(mem);
    let (severity, impact, message) = match verdict.bound {
        Bound::Latency if verdict.memory_is_dram_only => (
            Severity::Low,
            1.0 - top / 100.0,
            format!(
                "latency-bound or cache-bound: SM {sm:.1}% and DRAM {mem:.1}% of peak, both \
                 under 60%; L1/L2 throughput was not collected (kforge-default has it)"
            ),
        ),
        Bound::Latency => (
            if top < 30.0 {
                Severity::High
            } else {
                Severity::Medium
            },
            1.0 - top / 100.0,
            format!(
                "latency-bound: SM {sm:.1}% and memory {mem:.1}% of peak, both under 60%: the \
                 GPU mostly waits; more parallelism or bytes in flight (see stalls, occupancy)"
            ),
        ),
        Bound::Memory { dram } => {
            let level = if dram {
                format!("DRAM at {:.1}% of peak", verdict.dram_pct.unwrap_or(mem))
            } else {
                ev.extend(
                    [m::L1_THROUGHPUT, m::L2_THROUGHPUT]
                        .iter()
                        .filter_map(|n| evidence(metrics, n)),
                );
                let levels: Vec<String> = [
                    ("DRAM", verdict.dram_pct),
                    ("L1", number(metrics, m::L1_THROUGHPUT)),
                    ("L2", number(metrics, m::L2_THROUGHPUT)),
                ]
                .iter()
                .filter_map(|(unit, value)| value.map(|v| format!("{unit} {v:.1}%")))
                .collect();
                format!("the busy unit is L1/L2, not DRAM ({})", levels.join(", "))
            };
            let advice = if mem >= NEAR_ROOF {
                "near the roof: only fewer bytes help (fuse passes, reuse in registers/shared \
                 memory, narrower types)"
            } else {
                "move fewer bytes or make each access count (coalescing, reuse)"
            };
            (
                if mem >= NEAR_ROOF {
                    Severity::Info
                } else {
                    Severity::Low
                },
                0.5 * (1.0 - mem / 100.0),
                format!("memory-bound: memory {mem:.1}% vs SM {sm:.1}% of peak, {level}; {advice}"),
            )
        }
        Bound::Compute => {
            let tensor = number(metrics, m::TENSOR_PIPE);
            let fma = number(metrics, m::FMA_PIPE);
            ev.extend(
                [m::FMA_PIPE, m::TENSOR_PIPE]
                    .iter()
                    .filter_map(|n| evidence(metrics, n)),
            );
            let tensor_hint = match (fma, tensor) {
                (Some(fma), Some(tensor)) if fma >= 50.0 && tensor < 5.0 => format!(
                    "; FMA pipe {fma:.1}% while tensor cores idle ({tensor:.1}%): matrix-shaped \
                     work could move to tensor cores"
                ),
                _ => String::new(),
            };
            (
                if sm >= NEAR_ROOF {
                    Severity::Info
                } else {
                    Severity::Low
                },
                0.5 * (1.0 - sm / 100.0),
                format!(
                    "compute-bound: SM {sm:.1}% vs memory {mem:.1}% of peak; fewer or cheaper \
                     instructions{tensor_hint}"
                ),
            )
        }
        Bound::Balanced => (
            Severity::Info,
            0.5 * (1.0 - top / 100.0),
            format!(
                "balanced: SM {sm:.1}% and memory {mem:.1}% both near peak; only less work helps"
            ),
        ),
    };
    Finding {
        rule: Rule::Bound,
        severity,
        kernel: None,
        message,
        evidence: ev,
        impact,
    }
}

/// What a stall reason means and what usually helps.
fn stall_meaning(reason: &str) -> &'static str {
    match reason {
        "long_scoreboard" => {
            "waiting on global/local memory; more loads in flight (ILP, vector loads, prefetch \
             to shared memory)"
        }
        "short_scoreboard" => {
            "waiting on shared memory or special functions; fix bank conflicts, fewer shared \
             round trips, cheaper math"
        }
        "barrier" => "warps wait at __syncthreads; fewer barriers, even work per warp",
        "mio_throttle" => {
            "shared-memory/special-function queue full; fewer, wider shared accesses, fewer \
             shuffles"
        }
        "lg_throttle" => {
            "global/local memory queue full; fewer, wider memory instructions, check for spills"
        }
        "math_pipe_throttle" => "a math pipe is saturated; use other pipes or tensor cores",
        "not_selected" => "ready warps wait their turn: the schedulers are busy",
        "wait" => "fixed-latency dependencies; more independent instructions in between",
        "tex_throttle" => "texture/L1 pipe full; fewer texture or L1 accesses",
        "branch_resolving" => "waiting for branch targets; fewer or more uniform branches",
        "dispatch_stall" => "dispatcher stalls; rarely actionable",
        "drain" => "draining writes at exit; usually small",
        "membar" => "waiting on memory fences; fewer __threadfence calls",
        "sleeping" => "warps sleeping (nanosleep, cooperative waits)",
        "no_instruction" => "instruction cache misses; smaller code",
        "imc_miss" => "constant cache misses; small, uniformly read constants",
        "gmma" => "waiting on warpgroup matrix (wgmma) operations",
        _ => "see Nsight Compute's stall-reason reference",
    }
}

fn dominant_stall(metrics: &MetricMap, bound: Option<Bound>) -> Option<Finding> {
    let mut stalls: Vec<(&str, &str, f64)> = metrics
        .iter()
        .filter_map(|(name, metric)| {
            let reason = m::stall_reason(name)?;
            (reason != "selected").then_some((name.as_str(), reason, metric.number()?))
        })
        .collect();
    if stalls.is_empty() {
        return None;
    }
    stalls.sort_by(|a, b| b.2.total_cmp(&a.2));
    let total =
        number(metrics, m::WARP_LATENCY).unwrap_or_else(|| stalls.iter().map(|s| s.2).sum());
    let (metric, reason, cycles) = stalls[0];
    if total <= 0.0 || cycles < 1.0 || cycles / total < STALL_SHARE {
        return None;
    }
    let share = cycles / total;
    let severity = if share >= 0.5 && bound == Some(Bound::Latency) {
        Severity::High
    } else if share >= 0.5 {
        Severity::Medium
    } else {
        Severity::Low
    };
    let mut ev = vec![Evidence {
        metric: metric.to_string(),
        value: cycles,
        unit: "cycle".to_string(),
    }];
    if let Some(latency) = evidence(metrics, m::WARP_LATENCY) {
        ev.push(latency);
    }
    let next = stalls
        .get(1)
        .filter(|s| s.2 / total >= 0.1)
        .map(|(_, r, c)| {
            format!(
                "; next: {} {c:.1} ({:.0}%)",
                r.replace('_', " "),
                100.0 * c / total
            )
        })
        .unwrap_or_default();
    Some(Finding {
        rule: Rule::DominantStall,
        severity,
        kernel: None,
        message: format!(
            "dominant stall: {}, {cycles:.1} of {total:.1} cycles between issues ({:.0}%): \
             {}{next}",
            reason.replace('_', " "),
            100.0 * share,
            stall_meaning(reason)
        ),
        evidence: ev,
        impact: share,
    })
}

/// The launches of one kernel name, judged by the longest.
struct KernelGroup<'a> {
    name: String,
    share: f64,
    launches: usize,
    launch: &'a KernelShare,
}

fn kernel_groups(rollup: &Rollup) -> Vec<KernelGroup<'_>> {
    let mut groups: BTreeMap<&str, KernelGroup<'_>> = BTreeMap::new();
    for kernel in &rollup.kernels {
        let group = groups.entry(kernel.name.as_str()).or_insert(KernelGroup {
            name: short_kernel_name(&kernel.name),
            share: 0.0,
            launches: 0,
            launch: kernel,
        });
        group.share += kernel.share;
        group.launches += 1;
        if kernel.share > group.launch.share {
            group.launch = kernel;
        }
    }
    let mut groups: Vec<KernelGroup<'_>> = groups.into_values().collect();
    groups.sort_by(|a, b| b.share.total_cmp(&a.share));
    groups
}

/// "void scale<float, 4>(const T1 *, T1 *, int)" → "scale<float, 4>".
pub fn short_kernel_name(name: &str) -> String {
    let name = name.trim();
    let name = name.strip_prefix("void ").unwrap_or(name);
    // Cut at the parameter list: the first '(' outside template brackets.
    let mut depth = 0i32;
    for (i, c) in name.char_indices() {
        match c {
            '<' => depth += 1,
            '>' => depth -= 1,
            '(' if depth <= 0 && i > 0 => return name[..i].trim().to_string(),
            _ => {}
        }
    }
    name.to_string()
}

fn kernel_mix(groups: &[KernelGroup<'_>]) -> Finding {
    let listed: Vec<String> = groups
        .iter()
        .take(4)
        .map(|g| {
            let launches = if g.launches > 1 {
                format!(" ×{}", g.launches)
            } else {
                String::new()
            };
            format!("{}{launches} {:.0}%", g.name, 100.0 * g.share)
        })
        .collect();
    let more = groups.len().saturating_sub(4);
    let more = if more > 0 {
        format!(", +{more} more")
    } else {
        String::new()
    };
    Finding {
        rule: Rule::KernelMix,
        severity: Severity::Info,
        kernel: None,
        message: format!(
            "{} kernels share the call's time: {}{more}; kernels under 10% are not diagnosed",
            groups.len(),
            listed.join(", ")
        ),
        evidence: Vec::new(),
        impact: 0.0,
    }
}

fn local(
    rule: Rule,
    severity: Severity,
    message: String,
    evidence: Vec<Evidence>,
    impact: f64,
) -> Finding {
    Finding {
        rule,
        severity,
        kernel: None,
        message,
        evidence,
        impact,
    }
}

fn sm_count(metrics: &MetricMap) -> Option<f64> {
    number(metrics, m::SM_COUNT).or_else(|| number(metrics, m::SM_COUNT_ATTRIBUTE))
}

/// Rule 8; returns whether it fired (rule 5 then stays quiet).
fn small_grid(metrics: &MetricMap, out: &mut Vec<Finding>) -> bool {
    let (Some(grid), Some(sms)) = (number(metrics, m::GRID_SIZE), sm_count(metrics)) else {
        return false;
    };
    if grid <= 0.0 || grid >= sms {
        return false;
    }
    let idle = 1.0 - grid / sms;
    let ev = [m::GRID_SIZE, m::SM_COUNT]
        .iter()
        .filter_map(|n| evidence(metrics, n))
        .collect();
    out.push(local(
        Rule::SmallGrid,
        if idle >= 0.5 {
            Severity::High
        } else if idle >= 0.1 {
            Severity::Medium
        } else {
            Severity::Low
        },
        format!(
            "small grid: {grid:.0} blocks for {sms:.0} SMs leaves {:.0} SMs ({:.0}%) idle; use \
             at least {sms:.0} blocks, ideally several waves",
            sms - grid,
            100.0 * idle
        ),
        ev,
        idle,
    ));
    true
}

fn occupancy(metrics: &MetricMap, small_grid: bool, out: &mut Vec<Finding>) {
    let theoretical = number(metrics, m::THEORETICAL_OCCUPANCY);
    if let Some(theoretical) = theoretical
        && theoretical < 99.5
    {
        let limits: Vec<(&str, &str, f64)> = [
            (m::LIMIT_REGISTERS, "registers"),
            (m::LIMIT_SHARED_MEM, "shared memory"),
            (m::LIMIT_WARPS, "warps (block size)"),
            (m::LIMIT_BLOCKS, "blocks per SM"),
            (m::LIMIT_BARRIERS, "barriers"),
        ]
        .iter()
        .filter_map(|(name, what)| number(metrics, name).map(|v| (*name, *what, v)))
        .collect();
        let mut ev: Vec<Evidence> = evidence(metrics, m::THEORETICAL_OCCUPANCY)
            .into_iter()
            .collect();
        let cause = match limits.iter().map(|l| l.2).reduce(f64::min) {
            Some(min) => {
                let limiting: Vec<&(&str, &str, f64)> =
                    limits.iter().filter(|l| l.2 == min).collect();
                for (name, _, _) in &limiting {
                    ev.extend(evidence(metrics, name));
                }
                let why: Vec<String> = limiting
                    .iter()
                    .map(|(name, what, _)| match *name {
                        m::LIMIT_REGISTERS => {
                            ev.extend(evidence(metrics, m::REGISTERS_PER_THREAD));
                            match number(metrics, m::REGISTERS_PER_THREAD) {
                                Some(r) => format!("registers ({r:.0}/thread)"),
                                None => (*what).to_string(),
                            }
                        }
                        m::LIMIT_SHARED_MEM => {
                            let smem = shared_memory_per_block(metrics);
                            match smem {
                                Some(b) => format!("shared memory ({}/block)", bytes(b)),
                                None => (*what).to_string(),
                            }
                        }
                        _ => (*what).to_string(),
                    })
                    .collect();
                let others: Vec<String> = limits
                    .iter()
                    .filter(|l| l.2 != min)
                    .map(|(_, what, v)| format!("{what} {v:.0}"))
                    .collect();
                let others = if others.is_empty() {
                    String::new()
                } else {
                    format!("; other limits: {}", others.join(", "))
                };
                let blocks = if min == 1.0 { "block" } else { "blocks" };
                format!(
                    " limited by {} to {min:.0} {blocks}/SM{others}",
                    why.join(" and ")
                )
            }
            None => String::new(),
        };
        out.push(local(
            Rule::OccupancyLimit,
            if theoretical <= 25.0 {
                Severity::High
            } else if theoretical <= 50.0 {
                Severity::Medium
            } else {
                Severity::Low
            },
            format!("theoretical occupancy {theoretical:.1}%{cause}"),
            ev,
            (1.0 - theoretical / 100.0) * 0.5,
        ));
    }
    let achieved = number(metrics, m::ACHIEVED_OCCUPANCY);
    if let (Some(theoretical), Some(achieved)) = (theoretical, achieved)
        && !small_grid
        && theoretical - achieved >= OCCUPANCY_GAP
    {
        let gap = theoretical - achieved;
        let ev = [m::ACHIEVED_OCCUPANCY, m::THEORETICAL_OCCUPANCY]
            .iter()
            .filter_map(|n| evidence(metrics, n))
            .collect();
        out.push(local(
            Rule::OccupancyGap,
            if gap >= 30.0 {
                Severity::Medium
            } else {
                Severity::Low
            },
            format!(
                "achieved occupancy {achieved:.1}% vs theoretical {theoretical:.1}%: uneven \
                 block run times or a tail leave slots empty"
            ),
            ev,
            gap / 100.0 * 0.5,
        ));
    }
}

fn shared_memory_per_block(metrics: &MetricMap) -> Option<f64> {
    let stat = number(metrics, m::SHARED_MEM_STATIC);
    let dynamic = number(metrics, m::SHARED_MEM_DYNAMIC);
    match (stat, dynamic) {
        (None, None) => None,
        (s, d) => Some(s.unwrap_or(0.0) + d.unwrap_or(0.0)),
    }
}

fn bytes(value: f64) -> String {
    crate::ncu::render::format_value(value, "byte")
}

fn coalescing(metrics: &MetricMap, out: &mut Vec<Finding>) {
    for (what, bps_name, sectors_name, requests_name) in [
        (
            "loads",
            m::GLOBAL_LOAD_BYTES_PER_SECTOR,
            m::GLOBAL_LOAD_SECTORS,
            m::GLOBAL_LOAD_REQUESTS,
        ),
        (
            "stores",
            m::GLOBAL_STORE_BYTES_PER_SECTOR,
            m::GLOBAL_STORE_SECTORS,
            m::GLOBAL_STORE_REQUESTS,
        ),
    ] {
        let requests = number(metrics, requests_name).filter(|r| *r > 0.0);
        let sectors = number(metrics, sectors_name);
        let per_request = requests.zip(sectors).map(|(r, s)| s / r);
        let bytes_per_sector = number(metrics, bps_name).filter(|b| *b > 0.0);
        if requests.is_none() && bytes_per_sector.is_none() {
            continue;
        }
        let mut ev: Vec<Evidence> = [bps_name, sectors_name, requests_name]
            .iter()
            .filter_map(|n| evidence(metrics, n))
            .collect();
        let spr_text = per_request
            .map(|s| format!(", {s:.1} sectors per request (contiguous 4-byte accesses need 4)"))
            .unwrap_or_default();
        if let Some(bps) = bytes_per_sector {
            let used = bps / SECTOR_BYTES;
            if used < 0.5 {
                out.push(local(
                    Rule::Coalescing,
                    if used < 0.25 {
                        Severity::High
                    } else {
                        Severity::Medium
                    },
                    format!(
                        "uncoalesced global {what}: {bps:.1} of 32 bytes used per sector \
                         ({:.0}%){spr_text}; make consecutive threads touch consecutive \
                         addresses (remap indices, transpose through shared memory)",
                        100.0 * used
                    ),
                    ev,
                    1.0 - used,
                ));
            }
        } else if let Some(spr) = per_request
            && spr > 4.5
        {
            ev.retain(|e| e.metric != bps_name);
            let (severity, message) = if spr > 16.5 {
                (
                    Severity::Medium,
                    format!(
                        "uncoalesced global {what}: {spr:.1} sectors per request, more than \
                         contiguous accesses of up to 16 bytes per thread touch (16)"
                    ),
                )
            } else {
                (
                    Severity::Info,
                    format!(
                        "global {what} touch {spr:.1} sectors per request: fine for 8- or \
                         16-byte accesses per thread, uncoalesced for 4-byte ones ({bps_name} \
                         would tell)"
                    ),
                )
            };
            out.push(local(
                Rule::Coalescing,
                severity,
                message,
                ev,
                1.0 - 4.0 / spr,
            ));
        }
    }
}

fn bank_conflicts(metrics: &MetricMap, out: &mut Vec<Finding>) {
    for (what, conflicts_name, wavefronts_name) in [
        ("loads", m::SHARED_LOAD_CONFLICTS, m::SHARED_LOAD_WAVEFRONTS),
        (
            "stores",
            m::SHARED_STORE_CONFLICTS,
            m::SHARED_STORE_WAVEFRONTS,
        ),
    ] {
        let (Some(conflicts), Some(wavefronts)) = (
            number(metrics, conflicts_name),
            number(metrics, wavefronts_name),
        ) else {
            continue;
        };
        if wavefronts <= 0.0 {
            continue;
        }
        let share = (conflicts / wavefronts).clamp(0.0, 1.0);
        if share < BANK_CONFLICT_SHARE {
            continue;
        }
        let ways = 1.0 / (1.0 - share).max(1.0 / 32.0);
        let ev = [conflicts_name, wavefronts_name]
            .iter()
            .filter_map(|n| evidence(metrics, n))
            .collect();
        out.push(local(
            Rule::BankConflicts,
            if share >= 0.5 {
                Severity::High
            } else if share >= 0.25 {
                Severity::Medium
            } else {
                Severity::Low
            },
            format!(
                "shared-memory bank conflicts on {what}: {:.0}% of {} wavefronts are replays \
                 (about {ways:.1}-way); pad the array (e.g. [32][33]) or swizzle the index",
                100.0 * share,
                crate::ncu::render::format_value(wavefronts, "")
            ),
            ev,
            share,
        ));
    }
}

fn tail_effect(metrics: &MetricMap, out: &mut Vec<Finding>) {
    let Some(waves) = number(metrics, m::WAVES_PER_SM) else {
        return;
    };
    if waves < 1.0 {
        return;
    }
    let full = waves.ceil();
    let idle = (full - waves) / full;
    if idle < TAIL_IDLE {
        return;
    }
    let per_wave = number(metrics, m::GRID_SIZE)
        .map(|grid| format!(" ({:.0} blocks per wave)", grid / waves))
        .unwrap_or_default();
    let ev = [m::WAVES_PER_SM, m::GRID_SIZE]
        .iter()
        .filter_map(|n| evidence(metrics, n))
        .collect();
    out.push(local(
        Rule::TailEffect,
        if idle >= 0.4 {
            Severity::High
        } else if idle >= 0.2 {
            Severity::Medium
        } else {
            Severity::Low
        },
        format!(
            "tail effect: {waves:.2} waves per SM{per_wave}: the last partial wave idles about \
             {:.0}% of the SM time; size the grid to whole waves or use a grid-stride loop",
            100.0 * idle
        ),
        ev,
        idle,
    ));
}

fn divergence(metrics: &MetricMap, out: &mut Vec<Finding>) {
    let (Some(uniform), Some(divergent)) = (
        number(metrics, m::BRANCH_UNIFORMITY),
        number(metrics, m::DIVERGENT_BRANCHES),
    ) else {
        return;
    };
    if divergent <= 0.0 || uniform >= BRANCH_UNIFORMITY {
        return;
    }
    let ev = [m::BRANCH_UNIFORMITY, m::DIVERGENT_BRANCHES]
        .iter()
        .filter_map(|n| evidence(metrics, n))
        .collect();
    out.push(local(
        Rule::BranchDivergence,
        if uniform < 70.0 {
            Severity::Medium
        } else {
            Severity::Low
        },
        format!(
            "branch divergence: {uniform:.1}% of branch targets uniform ({divergent:.0} \
             divergent); branch per warp, not per thread"
        ),
        ev,
        (1.0 - uniform / 100.0) * 0.5,
    ));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_names_drop_parameters_and_return_type() {
        assert_eq!(
            short_kernel_name("void scale<float, 4>(const T1 *, T1 *, int)"),
            "scale<float, 4>"
        );
        assert_eq!(
            short_kernel_name("softmax_rows(const float *, float *, int)"),
            "softmax_rows"
        );
        assert_eq!(
            short_kernel_name(
                "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, std::array<char *, 1>>(int, T2, T3)"
            ),
            "at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, std::array<char *, 1>>"
        );
        assert_eq!(short_kernel_name("kernel"), "kernel");
    }

    #[test]
    fn severities_order_from_info_to_high() {
        assert!(Severity::High > Severity::Medium);
        assert!(Severity::Low > Severity::Info);
    }
}
