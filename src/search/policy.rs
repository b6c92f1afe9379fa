//! Where the next expansion goes: the reward, UCT and PUCT selection with progressive widening
//! and virtual loss, and the linear Coder→Judge chain kept as a baseline.
//!
//! **Reward.** A candidate's value is its log speedup normalised by a target,
//! `ln(speedup) / ln(target_speedup)`, clipped to `[-1, max_value]`; a failed candidate is worth
//! `failure_value`, and an unverified one (built, not run: a compile-only run) 0, the value of
//! speedup 1. Kernel Forge scored raw milliseconds, so the exploration constant meant
//! something different for every operator: a 20 µs op explored almost blindly and a 20 ms op
//! hardly at all. A log ratio is scale-free: 2× faster is worth the same on any operator.
//!
//! **Backup.** A node's value for selection is the best reward in its subtree, not the mean.
//! We look for the single fastest kernel, so a branch with one great descendant and many
//! misfires is exactly the branch to keep digging; a mean would bury it under its failures.
//! `mean_weight` blends the mean back in for landscapes where noisy one-off wins mislead.
//!
//! **Selection.** From the root down, each node offers its open children (whose subtrees can
//! take a job now) and, when progressive widening allows one more child, a new child. A new
//! child is scored as if it were worth what the node itself is worth (an edit starts from the
//! kernel it edits) and had been visited once (UCT), or with the prior of the prescription it
//! would take (PUCT). Progressive widening lets a node with `N` visits hold at most
//! `ceil(k · N^alpha)` live children, so breadth grows with evidence; dead children give their
//! place back so a node whose prescriptions all failed can ask for new ones.
//!
//! **Virtual loss.** Every job in flight counts, for the nodes above it, as a visit that
//! returned `virtual_loss`, so concurrent selections spread over the tree instead of all
//! descending the same path while the LLM calls run.
//!
//! **Linear chain.** [`Policy::LinearChain`] is CudaForge's loop: always expand the most
//! recently evaluated correct (or unverified) kernel with its top prescription, one job at a time. It exists to
//! measure what the tree search buys.

use rand::RngExt;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use super::SearchConfig;
use super::tree::{Evaluation, Node, NodeId, NodeKind, NodeState, Tree, prescription_prior};

/// How the search picks the node to expand.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum Policy {
    /// UCB1: `Q + c · sqrt(ln N_parent / N_child)`.
    Uct { exploration: f64 },
    /// AlphaZero's rule with the Judge's ranking as the prior:
    /// `Q + c · P · sqrt(N_parent) / (1 + N_child)`.
    Puct { exploration: f64 },
    /// The baseline: expand the latest correct (or unverified) kernel with its top
    /// prescription.
    LinearChain,
}

impl Policy {
    /// How many jobs the policy can use at once.
    pub(crate) fn parallel_cap(&self) -> u32 {
        match self {
            Policy::LinearChain => 1,
            Policy::Uct { .. } | Policy::Puct { .. } => u32::MAX,
        }
    }
}

/// Progressive widening: a node with `N` visits holds at most `ceil(k · N^alpha)` live children.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Widening {
    pub k: f64,
    pub alpha: f64,
}

impl Default for Widening {
    fn default() -> Widening {
        Widening { k: 1.0, alpha: 0.5 }
    }
}

impl Widening {
    pub fn max_children(&self, visits: u32) -> usize {
        // Finite and non-negative for validated settings; the cast saturates otherwise.
        (self.k * f64::from(visits).powf(self.alpha)).ceil() as usize
    }
}

/// The reward of an evaluated candidate (see the module doc).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Reward {
    /// The speedup worth a reward of 1.
    pub target_speedup: f64,
    /// The highest reward a correct candidate can get (its lowest is -1).
    pub max_value: f64,
    /// The reward of a failed candidate.
    pub failure_value: f64,
}

impl Default for Reward {
    fn default() -> Reward {
        Reward {
            target_speedup: 4.0,
            max_value: 2.0,
            failure_value: -1.0,
        }
    }
}

impl Reward {
    pub fn value(&self, evaluation: &Evaluation) -> f64 {
        match evaluation {
            Evaluation::Correct { speedup, .. } => {
                (speedup.ln() / self.target_speedup.ln()).clamp(-1.0, self.max_value)
            }
            Evaluation::Failed { .. } => self.failure_value,
            // Neutral: as far as we know it is no better and no worse than the reference
            // (ln 1 = 0). Rewarding it as a failure would steer a compile-only run away from
            // every kernel that builds, and any positive value would be a speedup nobody
            // measured; at 0, selection among unverified kernels follows the Judge's priors
            // and the visit counts, and one measured correct kernel outranks them as soon as
            // it is faster than the reference.
            Evaluation::Unverified { .. } => 0.0,
        }
    }
}

/// The prior of a node's `index`-th prescription when the Judge ranks without a confidence:
/// 1/2, 1/4, 1/8, … so that the priors of every list the Judge ever gives a node sum to 1.
pub fn rank_prior(index: usize) -> f64 {
    // Past a thousand ranks the prior is negligible (below 1e-300) and stays positive.
    0.5f64.powi(index.min(1000) as i32 + 1)
}

/// The node to expand with an optimization, or `None` when nothing can take a job now.
pub(crate) fn select(tree: &Tree, config: &SearchConfig, rng: &mut ChaCha8Rng) -> Option<NodeId> {
    match config.policy {
        Policy::LinearChain => latest_correct(tree),
        Policy::Uct { exploration } => Scorer::new(config, exploration, false).descend(tree, rng),
        Policy::Puct { exploration } => Scorer::new(config, exploration, true).descend(tree, rng),
    }
}

/// The chain's next node: the expandable kernel (correct or unverified) evaluated last (the
/// reference at first).
fn latest_correct(tree: &Tree) -> Option<NodeId> {
    tree.nodes()
        .iter()
        .filter(|node| {
            node.is_expandable()
                && !tree.awaiting_prescriptions(node.id)
                && tree.still_worth_asking(node.id)
        })
        .max_by_key(|node| node.completed)
        .map(|node| node.id)
}

enum Choice {
    NewChild,
    Descend(NodeId),
}

struct Scorer {
    exploration: f64,
    puct: bool,
    mean_weight: f64,
    virtual_loss: Option<f64>,
    widening: Widening,
}

impl Scorer {
    fn new(config: &SearchConfig, exploration: f64, puct: bool) -> Scorer {
        Scorer {
            exploration,
            puct,
            mean_weight: config.mean_weight,
            virtual_loss: config.virtual_loss,
            widening: config.widening,
        }
    }

    fn descend(&self, tree: &Tree, rng: &mut ChaCha8Rng) -> Option<NodeId> {
        let (can_widen, open) = self.openness(tree);
        if !open[0] {
            return None;
        }
        let mut at = NodeId::ROOT;
        loop {
            let node = tree.get(at)?;
            let mut best: Vec<Choice> = Vec::new();
            let mut best_score = f64::NEG_INFINITY;
            let mut consider = |choice: Choice, score: f64| {
                if score > best_score {
                    best_score = score;
                    best.clear();
                    best.push(choice);
                } else if score == best_score {
                    best.push(choice);
                }
            };
            if can_widen[at.index()] {
                consider(Choice::NewChild, self.new_child_score(tree, node));
            }
            for child in tree.children(at).filter(|child| open[child.id.index()]) {
                consider(Choice::Descend(child.id), self.child_score(node, child));
            }
            let pick = if best.len() > 1 {
                rng.random_range(0..best.len())
            } else {
                0
            };
            // `open[at]` promised at least one choice here.
            match best.into_iter().nth(pick)? {
                Choice::NewChild => return Some(at),
                Choice::Descend(child) => at = child,
            }
        }
    }

    /// For every node: may it get a new child now, and can its subtree take a job now.
    /// Children have larger ids than their parents, so one pass from the end settles both.
    fn openness(&self, tree: &Tree) -> (Vec<bool>, Vec<bool>) {
        let count = tree.nodes().len();
        let mut can_widen = vec![false; count];
        let mut open = vec![false; count];
        for node in tree.nodes().iter().rev() {
            let index = node.id.index();
            can_widen[index] = node.is_expandable()
                && !tree.awaiting_prescriptions(node.id)
                && tree.still_worth_asking(node.id)
                && tree.live_children(node.id) < self.widening.max_children(node.stats.visits);
            let child_open = node.children.iter().any(|child| open[child.index()]);
            open[index] = match node.state {
                NodeState::Evaluated => can_widen[index] || child_open,
                // Never optimized, but a repaired descendant may be.
                NodeState::Failed => child_open,
                NodeState::InFlight | NodeState::Dead | NodeState::Abandoned { .. } => false,
            };
        }
        (can_widen, open)
    }

    fn parent_visits(&self, node: &Node) -> f64 {
        f64::from(node.stats.visits) + self.pending(node.stats.virtual_loss)
    }

    fn pending(&self, jobs: u32) -> f64 {
        if self.virtual_loss.is_some() {
            f64::from(jobs)
        } else {
            0.0
        }
    }

    /// `q` over `visits` real visits, with `pending` in-flight visits that count as losses.
    fn with_virtual_loss(&self, q: f64, visits: f64, pending: f64) -> f64 {
        match self.virtual_loss {
            Some(loss) if pending > 0.0 => (visits * q + pending * loss) / (visits + pending),
            _ => q,
        }
    }

    fn child_score(&self, parent: &Node, child: &Node) -> f64 {
        // An open child has been evaluated, so it has at least its own visit and value.
        let visits = f64::from(child.stats.visits.max(1));
        let best = child.stats.best_value.unwrap_or(0.0);
        let mean = child.stats.value_sum / visits;
        let q = (1.0 - self.mean_weight) * best + self.mean_weight * mean;
        let pending = self.pending(child.stats.virtual_loss);
        let q = self.with_virtual_loss(q, visits, pending);
        let parent_visits = self.parent_visits(parent);
        let explore = if self.puct {
            child.prior * parent_visits.sqrt() / (1.0 + visits + pending)
        } else {
            (parent_visits.ln() / (visits + pending)).sqrt()
        };
        q + self.exploration * explore
    }

    fn new_child_score(&self, tree: &Tree, node: &Node) -> f64 {
        let pending = self.pending(in_flight_optimizations(tree, node.id));
        let q = self.with_virtual_loss(node.stats.value.unwrap_or(0.0), 1.0, pending);
        let parent_visits = self.parent_visits(node);
        let explore = if self.puct {
            next_prior(tree, node) * parent_visits.sqrt() / (1.0 + pending)
        } else {
            (parent_visits.ln() / (1.0 + pending)).sqrt()
        };
        q + self.exploration * explore
    }
}

fn in_flight_optimizations(tree: &Tree, id: NodeId) -> u32 {
    let count = tree
        .children(id)
        .filter(|child| {
            child.state == NodeState::InFlight && matches!(child.kind, NodeKind::Optimize { .. })
        })
        .count();
    // Bounded by the in-flight budget.
    count as u32
}

/// The prior of the prescription a new child of `node` would take.
pub(crate) fn next_prior(tree: &Tree, node: &Node) -> f64 {
    match tree.unused_prescription(node.id) {
        Some(index) => prescription_prior(&node.prescriptions[index], index),
        None => rank_prior(node.prescriptions.len()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reward_is_scale_free_and_clipped() {
        let reward = Reward::default();
        let value = |speedup| {
            reward.value(&Evaluation::Correct {
                speedup,
                fraction_of_sol: None,
            })
        };
        assert_eq!(value(1.0), 0.0);
        assert!((value(4.0) - 1.0).abs() < 1e-12);
        assert!((value(2.0) + value(0.5)).abs() < 1e-12);
        assert_eq!(value(1e-6), -1.0);
        assert_eq!(value(1e6), 2.0);
        let failed = Evaluation::Failed {
            reason: "compile error".into(),
        };
        assert_eq!(reward.value(&failed), -1.0);
    }

    #[test]
    fn an_unverified_kernel_is_worth_the_reference() {
        let unverified = Evaluation::Unverified {
            reason: "no GPU on this machine".into(),
        };
        for reward in [
            Reward::default(),
            Reward {
                target_speedup: 1.5,
                max_value: 0.5,
                failure_value: 0.25,
            },
        ] {
            let reference = reward.value(&Evaluation::Correct {
                speedup: 1.0,
                fraction_of_sol: None,
            });
            assert_eq!(reward.value(&unverified), reference);
            assert_eq!(reward.value(&unverified), 0.0);
        }
    }

    #[test]
    fn widening_grows_with_visits() {
        let widening = Widening::default();
        let bounds: Vec<usize> = [1, 2, 4, 5, 9, 10].map(|v| widening.max_children(v)).into();
        assert_eq!(bounds, vec![1, 2, 2, 3, 3, 4]);
    }

    #[test]
    fn rank_priors_halve() {
        assert_eq!(rank_prior(0), 0.5);
        assert_eq!(rank_prior(2), 0.125);
        let last = rank_prior(usize::MAX);
        assert!(last > 0.0 && last < 1e-300);
    }
}
