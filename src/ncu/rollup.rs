//! One candidate call can launch several kernels (its own, cuBLAS's, a memset): this combines
//! them into one view weighted by where the time went, and keeps each kernel's own numbers.
//!
//! Each launch's weight is its share of the summed `gpu__time_duration.sum`; when an export has
//! no durations (a user's section without them), every launch weighs the same and
//! [`Rollup::weighting`] says so. Each metric combines by one rule ([`rollup_rule`]):
//! - **Sum** for totals that add up over kernels run one after another: durations, bytes,
//!   instructions, cycles, sectors, requests, bank conflicts (counters, with their `.avg`/`.min`/
//!   `.max` per-unit roll-ups).
//! - **Duration-weighted mean** for rates and shares: percentages (`%`, `.pct`,
//!   `pct_of_peak_*`), ratios (`.ratio`), per-cycle and per-second rates, any unit with a `/`.
//!   Ratios with a natural denominator weigh by it instead, so a kernel without the events does
//!   not drag the mean to zero: bytes used per sector by the sectors, stall cycles per issued
//!   instruction by the instructions ([`natural_weight`]).
//! - **Max** for per-thread and per-block resources, where the worst kernel is what a reader must
//!   know: registers per thread, shared memory per block.
//! - **Dominant** (the value of the launch with the largest share) for launch geometry and
//!   occupancy limits (grid, block, waves, blocks-per-SM limits, device attributes) and for
//!   text values: they describe one launch and do not average.
//!
//! A metric missing from some launches is combined over the launches that have it.

use serde::{Deserialize, Serialize};

use crate::ncu::metrics;
use crate::ncu::parse::{KernelLaunch, Metric, MetricMap, MetricValue, NcuReport, RuleResult};

/// How a metric combines across kernels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RollupRule {
    Sum,
    WeightedMean,
    Max,
    Dominant,
}

/// Where the kernels' weights came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Weighting {
    /// Each launch's share of the summed `gpu__time_duration.sum`.
    Duration,
    /// No durations in the export: every launch weighs the same.
    Equal,
}

/// One launch with its share of the call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KernelShare {
    pub id: Option<u64>,
    pub name: String,
    pub duration_ns: Option<f64>,
    /// 0..=1; the shares of a roll-up sum to 1.
    pub share: f64,
    pub metrics: MetricMap,
    pub rules: Vec<RuleResult>,
}

impl KernelShare {
    pub fn number(&self, metric: &str) -> Option<f64> {
        self.metrics.get(metric).and_then(Metric::number)
    }
}

/// Every launch of one call, and the call as a whole.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Rollup {
    /// In launch order.
    pub kernels: Vec<KernelShare>,
    pub weighting: Weighting,
    /// Sum of the launches' durations (None without durations).
    pub total_duration_ns: Option<f64>,
    /// The call's metrics, each combined by its [`RollupRule`].
    pub combined: MetricMap,
}

impl Rollup {
    pub fn number(&self, metric: &str) -> Option<f64> {
        self.combined.get(metric).and_then(Metric::number)
    }

    pub fn is_empty(&self) -> bool {
        self.kernels.is_empty()
    }
}

/// The rule a metric combines by (see the module doc).
pub fn rollup_rule(name: &str, unit: &str) -> RollupRule {
    if name.starts_with("launch__registers_per_thread")
        || name.starts_with("launch__shared_mem_per_block")
    {
        return RollupRule::Max;
    }
    if name.starts_with("launch__") || name.starts_with("device__") {
        return RollupRule::Dominant;
    }
    let rate = unit == "%"
        || unit.contains('/')
        || unit == "hz"
        || [
            ".pct",
            ".ratio",
            "pct_of_peak",
            "per_cycle",
            "per_second",
            "peak_sustained",
            "max_rate",
        ]
        .iter()
        .any(|marker| name.contains(marker))
        || name.ends_with("_pct");
    if rate {
        RollupRule::WeightedMean
    } else {
        RollupRule::Sum
    }
}

/// The metric a ratio is "per", when the roll-up should weigh by it rather than by duration.
pub fn natural_weight(name: &str) -> Option<&'static str> {
    match name {
        metrics::GLOBAL_LOAD_BYTES_PER_SECTOR => Some(metrics::GLOBAL_LOAD_SECTORS),
        metrics::GLOBAL_STORE_BYTES_PER_SECTOR => Some(metrics::GLOBAL_STORE_SECTORS),
        metrics::WARP_LATENCY => Some(metrics::INSTRUCTIONS),
        _ if metrics::stall_reason(name).is_some() => Some(metrics::INSTRUCTIONS),
        _ => None,
    }
}

/// Combines the launches of one report.
pub fn rollup(report: &NcuReport) -> Rollup {
    let durations: Vec<Option<f64>> = report
        .kernels
        .iter()
        .map(|k| k.number(metrics::DURATION))
        .collect();
    let total: f64 = durations.iter().flatten().sum();
    let (weighting, weights): (Weighting, Vec<f64>) =
        if durations.iter().all(Option::is_some) && total > 0.0 {
            (
                Weighting::Duration,
                durations.iter().map(|d| d.unwrap_or(0.0) / total).collect(),
            )
        } else {
            let n = report.kernels.len().max(1) as f64;
            (Weighting::Equal, vec![1.0 / n; report.kernels.len()])
        };
    let kernels: Vec<KernelShare> = report
        .kernels
        .iter()
        .zip(&weights)
        .map(|(kernel, share)| KernelShare {
            id: kernel.id,
            name: kernel.name.clone(),
            duration_ns: kernel.number(metrics::DURATION),
            share: *share,
            metrics: kernel.metrics.clone(),
            rules: kernel.rules.clone(),
        })
        .collect();
    Rollup {
        combined: combine(&report.kernels, &weights),
        kernels,
        weighting,
        total_duration_ns: (weighting == Weighting::Duration).then_some(total),
    }
}

fn combine(kernels: &[KernelLaunch], weights: &[f64]) -> MetricMap {
    let mut names: Vec<&String> = kernels.iter().flat_map(|k| k.metrics.keys()).collect();
    names.sort();
    names.dedup();
    // The dominant launch: largest weight, the first one among equals.
    let dominant = weights
        .iter()
        .enumerate()
        .fold(None, |best: Option<(usize, f64)>, (i, w)| match best {
            Some((_, bw)) if bw >= *w => best,
            _ => Some((i, *w)),
        })
        .map(|(i, _)| i);
    let mut combined = MetricMap::new();
    for name in names {
        let present: Vec<(&Metric, f64)> = kernels
            .iter()
            .zip(weights)
            .filter_map(|(k, w)| k.metrics.get(name).map(|m| (m, *w)))
            .collect();
        let Some((first, _)) = present.first() else {
            continue;
        };
        let numbers: Option<Vec<(f64, f64)>> = present
            .iter()
            .map(|(m, w)| m.number().map(|v| (v, *w)))
            .collect();
        let rule = rollup_rule(name, &first.unit);
        let value = match (numbers, rule) {
            (None, _) | (Some(_), RollupRule::Dominant) => {
                let chosen = dominant
                    .and_then(|i| kernels[i].metrics.get(name))
                    .unwrap_or(first);
                chosen.value.clone()
            }
            (Some(numbers), RollupRule::Sum) => {
                let all_int = present
                    .iter()
                    .all(|(m, _)| matches!(m.value, MetricValue::Int(_)));
                let sum: f64 = numbers.iter().map(|(v, _)| v).sum();
                number_value(sum, all_int)
            }
            (Some(numbers), RollupRule::Max) => {
                let all_int = present
                    .iter()
                    .all(|(m, _)| matches!(m.value, MetricValue::Int(_)));
                let max = numbers.iter().map(|(v, _)| *v).fold(f64::MIN, f64::max);
                number_value(max, all_int)
            }
            (Some(numbers), RollupRule::WeightedMean) => {
                // Weigh by the ratio's denominator when every launch has it.
                let natural: Option<Vec<(f64, f64)>> = natural_weight(name).and_then(|weight| {
                    kernels
                        .iter()
                        .filter_map(|k| {
                            k.metrics.get(name).and_then(Metric::number).map(|v| (k, v))
                        })
                        .map(|(k, v)| k.number(weight).map(|w| (v, w)))
                        .collect()
                });
                let numbers = match natural {
                    Some(natural) if natural.iter().map(|(_, w)| w).sum::<f64>() > 0.0 => natural,
                    _ => numbers,
                };
                let weight: f64 = numbers.iter().map(|(_, w)| w).sum();
                if weight > 0.0 {
                    MetricValue::Float(numbers.iter().map(|(v, w)| v * w).sum::<f64>() / weight)
                } else {
                    let n = numbers.len() as f64;
                    MetricValue::Float(numbers.iter().map(|(v, _)| v).sum::<f64>() / n)
                }
            }
        };
        combined.insert(
            name.clone(),
            Metric {
                value,
                unit: first.unit.clone(),
            },
        );
    }
    combined
}

fn number_value(value: f64, integer: bool) -> MetricValue {
    // i64 holds every sum of i64 counters a real export has; the cast saturates otherwise.
    if integer && value.fract() == 0.0 && value.abs() < 9.0e15 {
        MetricValue::Int(value as i64)
    } else {
        MetricValue::Float(value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_by_name_and_unit() {
        use RollupRule::*;
        assert_eq!(rollup_rule("gpu__time_duration.sum", "ns"), Sum);
        assert_eq!(rollup_rule("dram__bytes_read.sum", "byte"), Sum);
        assert_eq!(rollup_rule("sm__cycles_active.avg", "cycle"), Sum);
        assert_eq!(
            rollup_rule("sm__throughput.avg.pct_of_peak_sustained_elapsed", "%"),
            WeightedMean
        );
        assert_eq!(rollup_rule("lts__t_sector_hit_rate.pct", "%"), WeightedMean);
        assert_eq!(
            rollup_rule(
                "smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio",
                "inst"
            ),
            WeightedMean
        );
        assert_eq!(
            rollup_rule("dram__bytes.sum.per_second", "byte/s"),
            WeightedMean
        );
        assert_eq!(
            rollup_rule("sm__maximum_warps_per_active_cycle_pct", "%"),
            WeightedMean
        );
        assert_eq!(
            rollup_rule("launch__registers_per_thread", "register/thread"),
            Max
        );
        assert_eq!(
            rollup_rule("launch__shared_mem_per_block_static", "byte/block"),
            Max
        );
        assert_eq!(rollup_rule("launch__grid_size", ""), Dominant);
        assert_eq!(
            rollup_rule("launch__occupancy_limit_registers", "block"),
            Dominant
        );
        assert_eq!(
            rollup_rule("device__attribute_multiprocessor_count", ""),
            Dominant
        );
    }
}
