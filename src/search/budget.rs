//! Budgets: what a run may spend, and the one rule that decides whether another job may start.
//!
//! A run is bounded by candidate nodes, dollars, tokens, wall time and the number of expansions
//! in flight at once, and it stops early once a correct candidate is close enough to the speed
//! of light. [`Budget::admit`] is checked before every job is handed out:
//!
//! - **nodes**: a job is handed out only while the candidates in flight or evaluated (abandoned
//!   expansions excluded) number fewer than `max_nodes`, so the node budget can never be passed.
//! - **dollars and tokens**: a job starts only if `spent + (in_flight + 1) × per_job ≤ max`,
//!   where `per_job` is `job_bound` when the orchestrator gives one (the most one expansion can
//!   cost: its LLM calls' `max_tokens` at the model's price) and otherwise the dearest
//!   expansion seen so far. With `job_bound` the budget holds exactly; without it, it holds up
//!   to the amount by which an expansion outspends every earlier one.
//! - **wall time**: a job starts only if `now + per_job.seconds ≤ max_wall_seconds`, so with a
//!   bound every job that starts also ends by the deadline; in-flight jobs run side by side, so
//!   only the new job's own duration counts.
//! - **in flight**: at most `max_in_flight` jobs at once (a sequential policy caps this at 1).
//!
//! Money is counted in whole nanodollars ([`Dollars`]) so that sums are exact and a budget
//! comparison never flips on a rounding error.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// An amount of money, held as whole nanodollars so that adding many small LLM bills is exact.
/// (De)serialised as a plain number of dollars; that number survives any JSON parser exactly
/// (it has at most 16 significant digits and a small exponent for any amount under $1M).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Dollars {
    nanos: u64,
}

/// Largest amount [`Dollars::from_dollars`] accepts: a million dollars is far beyond any run,
/// and below it the JSON form round-trips exactly.
const MAX_DOLLARS: f64 = 1e6;

impl Dollars {
    pub const ZERO: Dollars = Dollars { nanos: 0 };

    /// `None` for negative, non-finite or absurd (over $1M) amounts.
    pub fn from_dollars(dollars: f64) -> Option<Dollars> {
        if dollars.is_finite() && (0.0..=MAX_DOLLARS).contains(&dollars) {
            // In range by the check above, so the cast neither saturates nor wraps.
            Some(Dollars {
                nanos: (dollars * 1e9).round() as u64,
            })
        } else {
            None
        }
    }

    /// Exact amounts; the JSON form round-trips exactly below $1M (10^15 nanodollars).
    pub fn from_nanos(nanos: u64) -> Dollars {
        Dollars { nanos }
    }

    pub fn as_dollars(self) -> f64 {
        self.nanos as f64 / 1e9
    }

    pub fn nanos(self) -> u64 {
        self.nanos
    }

    fn saturating_add(self, other: Dollars) -> Dollars {
        Dollars {
            nanos: self.nanos.saturating_add(other.nanos),
        }
    }

    fn saturating_mul(self, times: u64) -> Dollars {
        Dollars {
            nanos: self.nanos.saturating_mul(times),
        }
    }
}

impl fmt::Display for Dollars {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "${:.4}", self.as_dollars())
    }
}

impl Serialize for Dollars {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_f64(self.as_dollars())
    }
}

impl<'de> Deserialize<'de> for Dollars {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Dollars, D::Error> {
        let dollars = f64::deserialize(deserializer)?;
        Dollars::from_dollars(dollars).ok_or_else(|| {
            serde::de::Error::custom(format!("{dollars} is not an amount of dollars"))
        })
    }
}

/// What an expansion cost: its LLM bills, its tokens (in + out, all calls) and how long it took
/// from hand-out to completion (seconds).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Spend {
    pub dollars: Dollars,
    pub tokens: u64,
    pub seconds: f64,
}

impl Spend {
    pub const ZERO: Spend = Spend {
        dollars: Dollars::ZERO,
        tokens: 0,
        seconds: 0.0,
    };

    /// The sum of two spends (saturating; budgets are far below the limits).
    pub fn plus(self, other: Spend) -> Spend {
        Spend {
            dollars: self.dollars.saturating_add(other.dollars),
            tokens: self.tokens.saturating_add(other.tokens),
            seconds: self.seconds + other.seconds,
        }
    }

    /// The larger of each component.
    pub fn component_max(self, other: Spend) -> Spend {
        Spend {
            dollars: self.dollars.max(other.dollars),
            tokens: self.tokens.max(other.tokens),
            seconds: self.seconds.max(other.seconds),
        }
    }
}

/// The limits of one run. `None` means unlimited.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Budget {
    /// Candidate nodes (every node but the root and abandoned expansions).
    pub max_nodes: u32,
    /// Expansions in flight at once (LLM calls and evaluation running concurrently).
    pub max_in_flight: u32,
    pub max_dollars: Option<Dollars>,
    pub max_tokens: Option<u64>,
    /// Wall time of the run, against the `now` the orchestrator passes in.
    pub max_wall_seconds: Option<f64>,
    /// Stop once a correct candidate reaches this fraction of the speed-of-light floor.
    pub stop_at_fraction_of_sol: Option<f64>,
    /// The most one expansion can cost; makes the dollar, token and time budgets exact.
    pub job_bound: Option<Spend>,
    /// Stop when this many expansions have failed before evaluation (LLM errors), so a broken
    /// provider cannot loop forever on freed slots.
    pub max_abandoned: u32,
}

impl Default for Budget {
    fn default() -> Budget {
        Budget {
            max_nodes: 32,
            max_in_flight: 4,
            max_dollars: None,
            max_tokens: None,
            max_wall_seconds: None,
            stop_at_fraction_of_sol: Some(0.9),
            job_bound: None,
            max_abandoned: 16,
        }
    }
}

/// Why the search hands out no more jobs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DoneReason {
    NodeBudget,
    DollarBudget,
    TokenBudget,
    WallTime,
    /// A correct candidate reached the target fraction of the speed of light.
    NearSpeedOfLight,
    /// Nothing in the tree can be expanded and nothing is in flight.
    Exhausted,
    /// Too many expansions failed before evaluation (see [`Budget::max_abandoned`]).
    ExpansionsKeepFailing,
}

impl fmt::Display for DoneReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            DoneReason::NodeBudget => "node budget reached",
            DoneReason::DollarBudget => "dollar budget reached",
            DoneReason::TokenBudget => "token budget reached",
            DoneReason::WallTime => "wall-time budget reached",
            DoneReason::NearSpeedOfLight => "a candidate is near the speed of light",
            DoneReason::Exhausted => "nothing left to expand",
            DoneReason::ExpansionsKeepFailing => "too many expansions failed before evaluation",
        })
    }
}

/// What the run has used so far, as the admission rule needs it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Usage {
    pub nodes: u32,
    pub in_flight: u32,
    pub spent: Spend,
    /// The dearest finished expansion so far (component by component).
    pub dearest_job: Spend,
    pub best_fraction_of_sol: Option<f64>,
    pub abandoned: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Admission {
    Admit,
    /// Nothing now; something in flight may free room.
    Wait,
    Done(DoneReason),
}

impl Budget {
    /// The admission rule of the module doc. `parallel_cap` is the policy's own limit on jobs in
    /// flight (1 for a sequential chain). Limits that could free up when an in-flight job
    /// finishes (cheaper than estimated) answer `Wait` while something is in flight.
    pub(crate) fn admit(&self, usage: &Usage, now_seconds: f64, parallel_cap: u32) -> Admission {
        let in_flight = usage.in_flight;
        let wait_or = |reason| {
            if in_flight > 0 {
                Admission::Wait
            } else {
                Admission::Done(reason)
            }
        };
        if let (Some(target), Some(best)) =
            (self.stop_at_fraction_of_sol, usage.best_fraction_of_sol)
            && best >= target
        {
            return Admission::Done(DoneReason::NearSpeedOfLight);
        }
        if usage.abandoned >= self.max_abandoned {
            return Admission::Done(DoneReason::ExpansionsKeepFailing);
        }
        if usage.nodes >= self.max_nodes {
            return Admission::Done(DoneReason::NodeBudget);
        }
        let per_job = self.job_bound.unwrap_or(usage.dearest_job);
        let jobs_after = u64::from(in_flight) + 1;
        if let Some(max_wall) = self.max_wall_seconds {
            if now_seconds >= max_wall {
                return Admission::Done(DoneReason::WallTime);
            }
            if now_seconds + per_job.seconds > max_wall {
                return wait_or(DoneReason::WallTime);
            }
        }
        if let Some(max_dollars) = self.max_dollars
            && usage
                .spent
                .dollars
                .saturating_add(per_job.dollars.saturating_mul(jobs_after))
                > max_dollars
        {
            return wait_or(DoneReason::DollarBudget);
        }
        if let Some(max_tokens) = self.max_tokens
            && usage
                .spent
                .tokens
                .saturating_add(per_job.tokens.saturating_mul(jobs_after))
                > max_tokens
        {
            return wait_or(DoneReason::TokenBudget);
        }
        if in_flight >= self.max_in_flight.min(parallel_cap) {
            return Admission::Wait;
        }
        Admission::Admit
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn usage() -> Usage {
        Usage {
            nodes: 0,
            in_flight: 0,
            spent: Spend::ZERO,
            dearest_job: Spend::ZERO,
            best_fraction_of_sol: None,
            abandoned: 0,
        }
    }

    fn spend(dollars: f64, tokens: u64, seconds: f64) -> Spend {
        Spend {
            dollars: Dollars::from_dollars(dollars).unwrap(),
            tokens,
            seconds,
        }
    }

    #[test]
    fn dollars_round_trip_through_json_exactly() {
        let mut nanos = 1u64;
        while nanos < 1_000_000_000_000_000 / 10 {
            for n in [nanos, nanos + 1, nanos * 7 + 3, nanos * 3 - 1] {
                let dollars = Dollars::from_nanos(n);
                let json = serde_json::to_string(&dollars).unwrap();
                let back: Dollars = serde_json::from_str(&json).unwrap();
                assert_eq!(back, dollars, "{json}");
            }
            nanos = nanos * 10 + 7;
        }
    }

    #[test]
    fn dollars_reject_nonsense() {
        assert_eq!(Dollars::from_dollars(-0.01), None);
        assert_eq!(Dollars::from_dollars(f64::NAN), None);
        assert_eq!(Dollars::from_dollars(2e6), None);
        assert_eq!(Dollars::from_dollars(0.25).unwrap().nanos(), 250_000_000);
        assert!(serde_json::from_str::<Dollars>("-1.0").is_err());
    }

    #[test]
    fn dollar_budget_counts_in_flight_jobs_at_the_bound() {
        let budget = Budget {
            max_dollars: Dollars::from_dollars(1.0),
            job_bound: Some(spend(0.25, 0, 0.0)),
            ..Budget::default()
        };
        let mut u = usage();
        u.spent = spend(0.25, 0, 0.0);
        u.in_flight = 2;
        // 0.25 spent + 3 × 0.25 = 1.0: the third job still fits.
        assert_eq!(budget.admit(&u, 0.0, u32::MAX), Admission::Admit);
        u.in_flight = 3;
        assert_eq!(budget.admit(&u, 0.0, u32::MAX), Admission::Wait);
        u.in_flight = 0;
        u.spent = spend(0.80, 0, 0.0);
        assert_eq!(
            budget.admit(&u, 0.0, u32::MAX),
            Admission::Done(DoneReason::DollarBudget)
        );
    }

    #[test]
    fn without_a_bound_the_dearest_job_is_the_estimate() {
        let budget = Budget {
            max_tokens: Some(10_000),
            ..Budget::default()
        };
        let mut u = usage();
        assert_eq!(budget.admit(&u, 0.0, u32::MAX), Admission::Admit);
        u.spent = spend(0.0, 6_000, 0.0);
        u.dearest_job = spend(0.0, 4_000, 0.0);
        assert_eq!(budget.admit(&u, 0.0, u32::MAX), Admission::Admit);
        u.dearest_job = spend(0.0, 4_001, 0.0);
        assert_eq!(
            budget.admit(&u, 0.0, u32::MAX),
            Admission::Done(DoneReason::TokenBudget)
        );
    }

    #[test]
    fn a_job_starts_only_if_it_can_end_by_the_deadline() {
        let budget = Budget {
            max_wall_seconds: Some(100.0),
            job_bound: Some(spend(0.0, 0, 30.0)),
            ..Budget::default()
        };
        let mut u = usage();
        assert_eq!(budget.admit(&u, 70.0, u32::MAX), Admission::Admit);
        assert_eq!(
            budget.admit(&u, 70.5, u32::MAX),
            Admission::Done(DoneReason::WallTime)
        );
        u.in_flight = 1;
        assert_eq!(budget.admit(&u, 70.5, u32::MAX), Admission::Wait);
        assert_eq!(
            budget.admit(&u, 100.0, u32::MAX),
            Admission::Done(DoneReason::WallTime)
        );
    }

    #[test]
    fn nodes_concurrency_and_early_stop() {
        let budget = Budget {
            max_nodes: 3,
            max_in_flight: 2,
            ..Budget::default()
        };
        let mut u = usage();
        u.nodes = 2;
        u.in_flight = 1;
        assert_eq!(budget.admit(&u, 0.0, u32::MAX), Admission::Admit);
        assert_eq!(budget.admit(&u, 0.0, 1), Admission::Wait);
        u.in_flight = 2;
        assert_eq!(budget.admit(&u, 0.0, u32::MAX), Admission::Wait);
        u.nodes = 3;
        assert_eq!(
            budget.admit(&u, 0.0, u32::MAX),
            Admission::Done(DoneReason::NodeBudget)
        );
        u.nodes = 0;
        u.best_fraction_of_sol = Some(0.9);
        assert_eq!(
            budget.admit(&u, 0.0, u32::MAX),
            Admission::Done(DoneReason::NearSpeedOfLight)
        );
    }
}
