//! The tree search over kernel variants: which node to expand next, when to repair, when to
//! stop. Pure and seeded: no I/O, no async, no clock (the orchestrator passes the time in), so
//! it is tested exhaustively against a simulated evaluator ([`sim`]).
//!
//! The orchestrator drives a [`Search`] as a state machine:
//!
//! ```text
//! loop {
//!     match search.next_job(elapsed) {
//!         NextJob::Expand(job) => spawn(job),      // Judge (unless job.prescription is set),
//!                                                  // search.prescribe(child, list), Coder,
//!                                                  // compile, evaluate
//!         NextJob::Wait => {}                      // wait for a job to finish
//!         NextJob::Done(reason) if no job in flight => break,
//!         NextJob::Done(_) => {}                   // let the jobs in flight finish (or cancel)
//!     }
//!     on finish:  events = search.complete(child, outcome)   // NewBest: save best/ now
//!     on failure: search.abandon(child, reason, spend)       // LLM error before evaluation
//!     append search.drain_journal() to events.jsonl
//! }
//! ```
//!
//! A compile-only run (no GPU: kernels are built, never verified nor timed) completes its jobs
//! with [`Evaluation::Unverified`]: such kernels are expanded like correct ones, so the tree
//! still grows, but none is ever the best, none stops the search near the speed of light, and
//! the run ends on its budgets.
//!
//! A run is resumed either from the journal ([`Search::replay`], the append-only log replayed
//! entry by entry) or from a snapshot ([`Search::to_json`] / [`Search::from_json`]); both
//! carry the jobs in flight, and both end a resumed run exactly where an uninterrupted one
//! ends. Measured numbers enter the search rounded to 12 significant digits (far below any
//! timing noise), so that every number the search stores survives JSON bit for bit.

pub mod budget;
mod engine;
pub mod policy;
pub mod sim;
pub mod tree;

use serde::{Deserialize, Serialize};

pub use budget::{Budget, Dollars, DoneReason, Spend};
pub use engine::{
    AssignedPrescription, Job, JobKind, JournalEntry, NextJob, Outcome, Search, SearchEvent,
    TriedResult, TriedStrategy,
};
pub use policy::{Policy, Reward, Widening};
pub use tree::{
    Evaluation, MAX_ABANDONED_PER_NODE, Node, NodeId, NodeKind, NodeState, Prescription, Stats,
    Tree,
};

/// Everything that shapes a search. Stored with the search state, so a resumed run keeps it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SearchConfig {
    pub policy: Policy,
    pub widening: Widening,
    pub reward: Reward,
    pub budget: Budget,
    /// Repair expansions a failed optimization gets (a chain, each repairing the last), after
    /// which the branch is dead.
    pub max_repairs: u32,
    /// The reward an in-flight job counts as for the nodes above it; `None` turns virtual loss
    /// off (concurrent selections then pile onto the same path).
    pub virtual_loss: Option<f64>,
    /// Weight of the subtree mean against the subtree best in a node's value, 0 to 1.
    pub mean_weight: f64,
}

impl Default for SearchConfig {
    fn default() -> SearchConfig {
        SearchConfig {
            // Tuned on the simulator's random landscapes, where 0.5 beat 0.25, 1 and 2 (PUCT and
            // UCT alike); a real run can override it.
            policy: Policy::Puct { exploration: 0.5 },
            widening: Widening::default(),
            reward: Reward::default(),
            budget: Budget::default(),
            max_repairs: 2,
            virtual_loss: Some(-1.0),
            mean_weight: 0.0,
        }
    }
}

impl SearchConfig {
    fn validate(&self) -> Result<(), SearchError> {
        let invalid = |why: &str| Err(SearchError::InvalidConfig(why.to_string()));
        let finite_non_negative = |x: f64| x.is_finite() && x >= 0.0;
        match self.policy {
            Policy::Uct { exploration } | Policy::Puct { exploration }
                if !finite_non_negative(exploration) =>
            {
                return invalid("the exploration constant must be finite and non-negative");
            }
            _ => {}
        }
        if !(self.widening.k.is_finite() && self.widening.k > 0.0) {
            return invalid("widening k must be positive");
        }
        if !(0.0..=1.0).contains(&self.widening.alpha) {
            return invalid("widening alpha must lie in [0, 1]");
        }
        if !(self.reward.target_speedup.is_finite() && self.reward.target_speedup > 1.0) {
            return invalid("the reward's target speedup must be above 1");
        }
        if !(self.reward.max_value.is_finite() && self.reward.max_value > 0.0) {
            return invalid("the reward's max value must be positive");
        }
        if !self.reward.failure_value.is_finite() {
            return invalid("the failure reward must be finite");
        }
        if self.virtual_loss.is_some_and(|loss| !loss.is_finite()) {
            return invalid("the virtual loss must be finite");
        }
        if !(0.0..=1.0).contains(&self.mean_weight) {
            return invalid("the mean weight must lie in [0, 1]");
        }
        let budget = &self.budget;
        if budget.max_in_flight == 0 {
            return invalid("at least one job must be allowed in flight");
        }
        if budget
            .max_wall_seconds
            .is_some_and(|seconds| !finite_non_negative(seconds))
        {
            return invalid("the wall-time budget must be finite and non-negative");
        }
        if budget
            .stop_at_fraction_of_sol
            .is_some_and(|fraction| !(fraction.is_finite() && fraction > 0.0))
        {
            return invalid("the speed-of-light target must be positive");
        }
        if budget
            .job_bound
            .is_some_and(|bound| !finite_non_negative(bound.seconds))
        {
            return invalid("the job bound's seconds must be finite and non-negative");
        }
        Ok(())
    }
}

/// What the search refuses.
#[derive(Debug, thiserror::Error)]
pub enum SearchError {
    #[error("invalid search settings: {0}")]
    InvalidConfig(String),
    #[error("node {0} does not exist")]
    UnknownNode(NodeId),
    #[error("node {0} is not in flight")]
    NotInFlight(NodeId),
    #[error("node {0} already has its prescription")]
    AlreadyPrescribed(NodeId),
    #[error("invalid prescriptions for node {node}: {why}")]
    InvalidPrescriptions { node: NodeId, why: String },
    #[error("invalid outcome for node {node}: {why}")]
    InvalidOutcome { node: NodeId, why: String },
    #[error("journal entry does not fit the search: {0}")]
    InvalidJournal(String),
    #[error("search snapshot: {0}")]
    Snapshot(#[from] serde_json::Error),
}

/// Rounds a measured number to 12 significant digits: its shortest decimal form then has at
/// most 12 digits, which every JSON parser (serde_json's fast default included) reads back to
/// the same f64, and rounding again changes nothing.
pub(crate) fn round_measure(x: f64) -> f64 {
    if !x.is_finite() || x == 0.0 {
        return x;
    }
    // Formatting a finite f64 always yields a parsable number.
    format!("{x:.11e}").parse().unwrap_or(x)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounded_measures_survive_json_and_rounding_again() {
        let mut x = 1.234_567_890_123_456_7e-7;
        for _ in 0..4000 {
            let rounded = round_measure(x);
            let json = serde_json::to_string(&rounded).unwrap();
            let back: f64 = serde_json::from_str(&json).unwrap();
            assert_eq!(back, rounded, "{x} -> {json}");
            assert_eq!(round_measure(rounded), rounded);
            assert!(((rounded - x) / x).abs() < 1e-11);
            x *= 1.013_713_717_3;
        }
    }

    #[test]
    fn nonsense_settings_are_refused() {
        let mut config = SearchConfig::default();
        config.widening.alpha = 1.5;
        assert!(matches!(
            config.validate(),
            Err(SearchError::InvalidConfig(_))
        ));
        let mut config = SearchConfig::default();
        config.budget.max_in_flight = 0;
        assert!(config.validate().is_err());
        assert!(SearchConfig::default().validate().is_ok());
    }
}
