//! The search as a state machine: hand out jobs, take their results, and keep the journal that
//! lets a killed run resume exactly.
//!
//! Every change of state goes through one [`JournalEntry`]: the live calls build the entry,
//! apply it, and queue it for the orchestrator to append to its log ([`Search::drain_journal`]);
//! a resumed run applies the logged entries in order ([`Search::replay`]). Selection draws its
//! tie-breaks from a ChaCha stream chosen by the seed and the id of the node being created, so
//! the search holds no random-number state beyond its seed.

use std::time::Duration;

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use super::budget::{Admission, DoneReason, Spend, Usage};
use super::policy::{self, rank_prior};
use super::tree::{
    Evaluation, Node, NodeId, NodeKind, NodeState, Prescription, Tree, prescription_prior,
};
use super::{SearchConfig, SearchError, round_measure};

/// What a job does to its parent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum JobKind {
    /// Apply one of the Judge's prescriptions to a correct (or unverified) kernel.
    Optimize,
    /// Fix a failed kernel (the `attempt`-th repair in its chain).
    Repair { attempt: u32 },
}

/// The prescription a job applies.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AssignedPrescription {
    /// Its position in the parent's ranked prescriptions (`None` for a repair's fix).
    pub index: Option<usize>,
    pub strategy: String,
}

/// What was already tried from a node, for the Judge's "do not repeat" and "this failed
/// because" lists.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TriedStrategy {
    pub node: NodeId,
    pub strategy: String,
    pub result: TriedResult,
    /// The best correct speedup in that node's subtree, itself included.
    pub best_speedup_in_subtree: Option<f64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "status")]
pub enum TriedResult {
    /// Still in flight.
    Pending,
    Correct {
        speedup: f64,
        fraction_of_sol: Option<f64>,
    },
    Failed {
        reason: String,
    },
    /// Built but neither verified nor timed (compile-only: no GPU).
    Unverified {
        reason: String,
    },
}

/// One expansion to run: make `child` from `parent`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Job {
    pub parent: NodeId,
    /// The node reserved for the result.
    pub child: NodeId,
    pub kind: JobKind,
    /// Set when the parent still has a prescription no child has taken: the Coder applies it
    /// and no Judge call is needed. Otherwise ask the Judge, then [`Search::prescribe`].
    pub prescription: Option<AssignedPrescription>,
    /// What the parent's other children tried (optimizations only).
    pub sibling_strategies: Vec<TriedStrategy>,
    /// What led from the reference to the parent, root first; for a repair this ends with the
    /// failed kernel and its reason.
    pub ancestor_strategies: Vec<TriedStrategy>,
    /// The run time at which the job was handed out.
    pub issued_at: Duration,
}

/// The answer to [`Search::next_job`].
#[derive(Debug, Clone, PartialEq)]
pub enum NextJob {
    Expand(Job),
    /// Nothing can start now; ask again when a job in flight finishes.
    Wait,
    /// No more jobs for this reason. Jobs still in flight may finish (or be abandoned).
    Done(DoneReason),
}

/// The evaluated result of a job.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Outcome {
    pub evaluation: Evaluation,
    /// Everything the expansion cost: Judge and Coder calls, and how long it took.
    pub cost: Spend,
}

/// What a completion tells the orchestrator.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "event")]
pub enum SearchEvent {
    /// The fastest correct candidate so far: save it now.
    NewBest {
        node: NodeId,
        speedup: f64,
        fraction_of_sol: Option<f64>,
    },
    /// These failed nodes ran out of repairs and will never be expanded.
    BranchDead { nodes: Vec<NodeId> },
}

/// One change of the search's state, as logged and replayed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "entry")]
pub enum JournalEntry {
    Issued {
        job: Job,
    },
    Prescribed {
        child: NodeId,
        prescriptions: Vec<Prescription>,
    },
    Completed {
        child: NodeId,
        outcome: Outcome,
    },
    Abandoned {
        child: NodeId,
        reason: String,
        cost: Spend,
    },
}

/// The search state: settings, seed, tree and the jobs in flight.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(try_from = "Snapshot")]
pub struct Search {
    config: SearchConfig,
    seed: u64,
    tree: Tree,
    /// Jobs handed out and not yet completed or abandoned, by child id, as they were handed
    /// out (with the prescription filled in once given), so a resumed run re-runs them with
    /// the same prompts.
    in_flight: Vec<Job>,
    /// Entries applied since the last [`Search::drain_journal`]; not part of the state.
    #[serde(skip)]
    journal: Vec<JournalEntry>,
}

/// Equal searches have equal settings, seed, tree and jobs in flight; undrained journal
/// entries are not state.
impl PartialEq for Search {
    fn eq(&self, other: &Search) -> bool {
        self.config == other.config
            && self.seed == other.seed
            && self.tree == other.tree
            && self.in_flight == other.in_flight
    }
}

#[derive(Deserialize)]
struct Snapshot {
    config: SearchConfig,
    seed: u64,
    tree: Tree,
    in_flight: Vec<Job>,
}

impl TryFrom<Snapshot> for Search {
    type Error = String;

    fn try_from(snapshot: Snapshot) -> Result<Search, String> {
        snapshot
            .config
            .validate()
            .map_err(|error| error.to_string())?;
        let mut tree = snapshot.tree;
        tree.check_consistent()?;
        let in_flight_nodes: Vec<NodeId> = tree
            .nodes()
            .iter()
            .filter(|node| node.state == NodeState::InFlight)
            .map(|node| node.id)
            .collect();
        let job_children: Vec<NodeId> = snapshot.in_flight.iter().map(|job| job.child).collect();
        if in_flight_nodes != job_children {
            return Err("the jobs in flight do not match the nodes in flight".into());
        }
        tree.rebuild_stats(&snapshot.config.reward);
        Ok(Search {
            config: snapshot.config,
            seed: snapshot.seed,
            tree,
            in_flight: snapshot.in_flight,
            journal: Vec::new(),
        })
    }
}

impl Search {
    pub fn new(config: SearchConfig, seed: u64) -> Result<Search, SearchError> {
        config.validate()?;
        Ok(Search {
            config,
            seed,
            tree: Tree::new(),
            in_flight: Vec::new(),
            journal: Vec::new(),
        })
    }

    /// A fresh search with `entries` applied in order: the resumed state of a logged run.
    pub fn replay<'a>(
        config: SearchConfig,
        seed: u64,
        entries: impl IntoIterator<Item = &'a JournalEntry>,
    ) -> Result<Search, SearchError> {
        let mut search = Search::new(config, seed)?;
        for entry in entries {
            search.apply(entry)?;
        }
        Ok(search)
    }

    pub fn config(&self) -> &SearchConfig {
        &self.config
    }

    pub fn seed(&self) -> u64 {
        self.seed
    }

    pub fn tree(&self) -> &Tree {
        &self.tree
    }

    pub fn node(&self, id: NodeId) -> Option<&Node> {
        self.tree.get(id)
    }

    /// The fastest correct candidate so far.
    pub fn best(&self) -> Option<&Node> {
        self.tree.best_correct()
    }

    /// Jobs handed out and not yet finished, by child id.
    pub fn in_flight(&self) -> &[Job] {
        &self.in_flight
    }

    /// Everything spent so far, by finished and abandoned expansions.
    pub fn spent(&self) -> Spend {
        self.tree
            .nodes()
            .iter()
            .fold(Spend::ZERO, |total, node| total.plus(node.cost))
    }

    /// Candidates that count against the node budget: in flight or evaluated, not abandoned.
    pub fn candidates(&self) -> u32 {
        let count = self
            .tree
            .nodes()
            .iter()
            .skip(1)
            .filter(|node| !matches!(node.state, NodeState::Abandoned { .. }))
            .count();
        // The node budget is a u32 and no node is created past it.
        count as u32
    }

    /// The entries applied since the last call, for the orchestrator's append-only log.
    pub fn drain_journal(&mut self) -> Vec<JournalEntry> {
        std::mem::take(&mut self.journal)
    }

    pub fn to_json(&self) -> Result<String, SearchError> {
        Ok(serde_json::to_string(self)?)
    }

    /// A search from [`Search::to_json`]'s output; its statistics are rebuilt, not read.
    pub fn from_json(json: &str) -> Result<Search, SearchError> {
        Ok(serde_json::from_str(json)?)
    }

    /// The next expansion to run, if the budgets, the policy and the jobs in flight allow one
    /// at run time `now`. Failed kernels are repaired before anything else is expanded.
    pub fn next_job(&mut self, now: Duration) -> NextJob {
        let usage = self.usage();
        let admission =
            self.config
                .budget
                .admit(&usage, now.as_secs_f64(), self.config.policy.parallel_cap());
        match admission {
            Admission::Admit => {}
            Admission::Wait => return NextJob::Wait,
            Admission::Done(reason) => return NextJob::Done(reason),
        }
        let job = if let Some((failed, attempt)) = self.next_repair() {
            self.make_job(failed, JobKind::Repair { attempt }, now)
        } else {
            let mut rng = ChaCha8Rng::seed_from_u64(self.seed);
            rng.set_stream(u64::from(self.tree.next_id().0));
            match policy::select(&self.tree, &self.config, &mut rng) {
                Some(parent) => self.make_job(parent, JobKind::Optimize, now),
                None if self.in_flight.is_empty() => return NextJob::Done(DoneReason::Exhausted),
                None => return NextJob::Wait,
            }
        };
        self.issue(job.clone());
        self.journal.push(JournalEntry::Issued { job: job.clone() });
        NextJob::Expand(job)
    }

    /// Records the Judge's answer for an in-flight job that had no prescription. For an
    /// optimization, `prescriptions` is the Judge's ranked list for the parent: the child takes
    /// the first, later siblings take the rest before the Judge is asked again. For a repair,
    /// the first entry is the fix. Returns what the Coder should apply.
    pub fn prescribe(
        &mut self,
        child: NodeId,
        prescriptions: Vec<Prescription>,
    ) -> Result<AssignedPrescription, SearchError> {
        let prescriptions = round_prescriptions(prescriptions);
        let assigned = self.apply_prescribed(child, &prescriptions)?;
        self.journal.push(JournalEntry::Prescribed {
            child,
            prescriptions,
        });
        Ok(assigned)
    }

    /// Records an evaluated job. Returns `NewBest` when the child is the fastest correct
    /// candidate so far, and `BranchDead` when a failure used up its chain's repairs. An
    /// unverified child (compile-only) returns neither: it is expandable but never the best.
    pub fn complete(
        &mut self,
        child: NodeId,
        outcome: Outcome,
    ) -> Result<Vec<SearchEvent>, SearchError> {
        self.record(JournalEntry::Completed { child, outcome })
    }

    /// Gives back the slot of a job that failed before evaluation (an LLM error or an
    /// unusable response). What it spent still counts.
    pub fn abandon(
        &mut self,
        child: NodeId,
        reason: String,
        cost: Spend,
    ) -> Result<(), SearchError> {
        self.record(JournalEntry::Abandoned {
            child,
            reason,
            cost,
        })
        .map(|_| ())
    }

    /// Applies one logged entry (see [`Search::replay`]). Not journaled again.
    pub fn apply(&mut self, entry: &JournalEntry) -> Result<Vec<SearchEvent>, SearchError> {
        self.apply_rounded(&entry.clone().rounded())
    }

    /// Applies a live change and queues it for the journal.
    fn record(&mut self, entry: JournalEntry) -> Result<Vec<SearchEvent>, SearchError> {
        let entry = entry.rounded();
        let events = self.apply_rounded(&entry)?;
        self.journal.push(entry);
        Ok(events)
    }

    fn apply_rounded(&mut self, entry: &JournalEntry) -> Result<Vec<SearchEvent>, SearchError> {
        match entry {
            JournalEntry::Issued { job } => {
                self.check_job(job)?;
                self.issue(job.clone());
                Ok(Vec::new())
            }
            JournalEntry::Prescribed {
                child,
                prescriptions,
            } => self
                .apply_prescribed(*child, prescriptions)
                .map(|_| Vec::new()),
            JournalEntry::Completed { child, outcome } => self.apply_completed(*child, outcome),
            JournalEntry::Abandoned {
                child,
                reason,
                cost,
            } => {
                self.apply_abandoned(*child, reason, cost)?;
                Ok(Vec::new())
            }
        }
    }

    fn usage(&self) -> Usage {
        let mut usage = Usage {
            nodes: self.candidates(),
            // Bounded by the in-flight budget.
            in_flight: self.in_flight.len() as u32,
            spent: Spend::ZERO,
            dearest_job: Spend::ZERO,
            best_fraction_of_sol: None,
            abandoned: 0,
        };
        for node in self.tree.nodes().iter().skip(1) {
            usage.spent = usage.spent.plus(node.cost);
            // Nodes in flight cost nothing yet, so only finished expansions count here.
            usage.dearest_job = usage.dearest_job.component_max(node.cost);
            if let Some(fraction) = node.fraction_of_sol() {
                usage.best_fraction_of_sol = Some(
                    usage
                        .best_fraction_of_sol
                        .map_or(fraction, |best| best.max(fraction)),
                );
            }
            if matches!(node.state, NodeState::Abandoned { .. }) {
                usage.abandoned += 1;
            }
        }
        usage
    }

    /// The oldest failed kernel that still has a repair left and none running or done.
    fn next_repair(&self) -> Option<(NodeId, u32)> {
        self.tree
            .nodes()
            .iter()
            .find(|node| self.needs_repair(node))
            .map(|node| (node.id, node.repair_attempt() + 1))
    }

    /// Failed, with a repair left, and no repair running or done (abandoned ones don't count).
    fn needs_repair(&self, node: &Node) -> bool {
        node.state == NodeState::Failed
            && node.repair_attempt() < self.config.max_repairs
            && self.tree.still_worth_asking(node.id)
            && self
                .tree
                .children(node.id)
                .all(|child| matches!(child.state, NodeState::Abandoned { .. }))
    }

    fn make_job(&self, parent: NodeId, kind: JobKind, now: Duration) -> Job {
        let prescription = match kind {
            JobKind::Optimize => self.tree.unused_prescription(parent).and_then(|index| {
                let node = self.tree.get(parent)?;
                Some(AssignedPrescription {
                    index: Some(index),
                    strategy: node.prescriptions.get(index)?.strategy.clone(),
                })
            }),
            JobKind::Repair { .. } => None,
        };
        let sibling_strategies = match kind {
            JobKind::Optimize => self
                .tree
                .children(parent)
                .filter_map(|sibling| self.tried(sibling))
                .collect(),
            JobKind::Repair { .. } => Vec::new(),
        };
        let ancestor_strategies = self
            .tree
            .path(parent)
            .into_iter()
            .filter_map(|id| self.tree.get(id))
            .filter_map(|ancestor| self.tried(ancestor))
            .collect();
        Job {
            parent,
            child: self.tree.next_id(),
            kind,
            prescription,
            sibling_strategies,
            ancestor_strategies,
            issued_at: now,
        }
    }

    fn tried(&self, node: &Node) -> Option<TriedStrategy> {
        let result = match (&node.state, &node.evaluation) {
            (NodeState::Abandoned { .. }, _) => return None,
            (
                _,
                Some(Evaluation::Correct {
                    speedup,
                    fraction_of_sol,
                }),
            ) => TriedResult::Correct {
                speedup: *speedup,
                fraction_of_sol: *fraction_of_sol,
            },
            (_, Some(Evaluation::Failed { reason })) => TriedResult::Failed {
                reason: reason.clone(),
            },
            (_, Some(Evaluation::Unverified { reason })) => TriedResult::Unverified {
                reason: reason.clone(),
            },
            (_, None) => TriedResult::Pending,
        };
        Some(TriedStrategy {
            node: node.id,
            strategy: node.strategy.clone()?,
            result,
            best_speedup_in_subtree: node.stats.best_speedup,
        })
    }

    /// Whether a logged job fits the tree: the next node id, a parent its kind can expand, a
    /// repair attempt that follows the chain, and only the prescription the parent would give.
    fn check_job(&self, job: &Job) -> Result<(), SearchError> {
        let invalid = |why: String| Err(SearchError::InvalidJournal(why));
        if job.child != self.tree.next_id() {
            return invalid(format!(
                "job for node {} but the next node is {}",
                job.child,
                self.tree.next_id()
            ));
        }
        let Some(parent) = self.tree.get(job.parent) else {
            return Err(SearchError::UnknownNode(job.parent));
        };
        match job.kind {
            JobKind::Optimize => {
                if !parent.is_expandable() {
                    return invalid(format!("node {} cannot be optimized", parent.id));
                }
                match &job.prescription {
                    None => {}
                    // The search always hands out the parent's best unused prescription.
                    Some(AssignedPrescription {
                        index: Some(index),
                        strategy,
                    }) if self.tree.unused_prescription(parent.id) == Some(*index)
                        && parent
                            .prescriptions
                            .get(*index)
                            .is_some_and(|known| &known.strategy == strategy) => {}
                    Some(_) => {
                        return invalid(format!(
                            "node {} has no such prescription to give",
                            parent.id
                        ));
                    }
                }
            }
            JobKind::Repair { attempt } => {
                let repairable =
                    self.needs_repair(parent) && attempt == parent.repair_attempt() + 1;
                if !repairable || job.prescription.is_some() {
                    return invalid(format!("node {} cannot get repair {attempt}", parent.id));
                }
            }
        }
        Ok(())
    }

    /// Reserves the job's child and counts it in flight.
    fn issue(&mut self, job: Job) {
        let Some(parent) = self.tree.get(job.parent) else {
            return;
        };
        let (kind, strategy, prior) = match (&job.kind, &job.prescription) {
            (
                JobKind::Optimize,
                Some(AssignedPrescription {
                    index: Some(index),
                    strategy,
                }),
            ) => (
                NodeKind::Optimize {
                    prescription: Some(*index),
                },
                Some(strategy.clone()),
                parent
                    .prescriptions
                    .get(*index)
                    .map_or_else(|| rank_prior(*index), |p| prescription_prior(p, *index)),
            ),
            // The prior the Judge's next prescription for this parent will have by rank.
            (JobKind::Optimize, _) => (
                NodeKind::Optimize { prescription: None },
                None,
                rank_prior(parent.prescriptions.len()),
            ),
            (JobKind::Repair { attempt }, _) => (NodeKind::Repair { attempt: *attempt }, None, 1.0),
        };
        let node = Node {
            id: job.child,
            parent: Some(job.parent),
            depth: parent.depth + 1,
            kind,
            state: NodeState::InFlight,
            strategy,
            prior,
            evaluation: None,
            cost: Spend::ZERO,
            completed: None,
            children: Vec::new(),
            prescriptions: Vec::new(),
            stats: Default::default(),
        };
        self.tree.push(node);
        self.tree.shift_virtual_loss(job.parent, true);
        self.in_flight.push(job);
    }

    fn apply_abandoned(
        &mut self,
        child: NodeId,
        reason: &str,
        cost: &Spend,
    ) -> Result<(), SearchError> {
        self.check_in_flight(child)?;
        check_spend(child, cost)?;
        let parent = self.parent_of(child)?;
        if let Some(node) = self.tree.node_mut(child) {
            node.state = NodeState::Abandoned {
                reason: reason.to_string(),
            };
            node.cost = *cost;
        }
        self.tree.shift_virtual_loss(parent, false);
        self.in_flight.retain(|job| job.child != child);
        Ok(())
    }

    fn apply_prescribed(
        &mut self,
        child: NodeId,
        prescriptions: &[Prescription],
    ) -> Result<AssignedPrescription, SearchError> {
        self.check_in_flight(child)?;
        let invalid = |why: &str| {
            Err(SearchError::InvalidPrescriptions {
                node: child,
                why: why.to_string(),
            })
        };
        let Some(first) = prescriptions.first() else {
            return invalid("the list is empty");
        };
        if prescriptions
            .iter()
            .any(|p| p.prior.is_some_and(|prior| !(prior > 0.0 && prior <= 1.0)))
        {
            return invalid("a prior lies outside (0, 1]");
        }
        let parent = self.parent_of(child)?;
        let node = self
            .tree
            .get(child)
            .ok_or(SearchError::UnknownNode(child))?;
        let assigned = match node.kind {
            NodeKind::Optimize { prescription: None } => {
                let parent_node = self
                    .tree
                    .node_mut(parent)
                    .ok_or(SearchError::UnknownNode(parent))?;
                let index = parent_node.prescriptions.len();
                parent_node
                    .prescriptions
                    .extend(prescriptions.iter().cloned());
                let prior = prescription_prior(first, index);
                if let Some(node) = self.tree.node_mut(child) {
                    node.kind = NodeKind::Optimize {
                        prescription: Some(index),
                    };
                    node.strategy = Some(first.strategy.clone());
                    node.prior = prior;
                }
                AssignedPrescription {
                    index: Some(index),
                    strategy: first.strategy.clone(),
                }
            }
            NodeKind::Repair { .. } if node.strategy.is_none() => {
                if let Some(node) = self.tree.node_mut(child) {
                    node.strategy = Some(first.strategy.clone());
                }
                AssignedPrescription {
                    index: None,
                    strategy: first.strategy.clone(),
                }
            }
            NodeKind::Optimize { .. } | NodeKind::Repair { .. } | NodeKind::Root => {
                return Err(SearchError::AlreadyPrescribed(child));
            }
        };
        if let Some(job) = self.in_flight.iter_mut().find(|job| job.child == child) {
            job.prescription = Some(assigned.clone());
        }
        Ok(assigned)
    }

    fn apply_completed(
        &mut self,
        child: NodeId,
        outcome: &Outcome,
    ) -> Result<Vec<SearchEvent>, SearchError> {
        self.check_in_flight(child)?;
        check_outcome(child, outcome)?;
        let parent = self.parent_of(child)?;
        let order = self
            .tree
            .nodes()
            .iter()
            .filter_map(|node| node.completed)
            .max()
            .unwrap_or(0)
            + 1;
        let value = self.config.reward.value(&outcome.evaluation);
        if let Some(node) = self.tree.node_mut(child) {
            node.evaluation = Some(outcome.evaluation.clone());
            node.cost = outcome.cost;
            node.completed = Some(order);
            node.state = match outcome.evaluation {
                // An unverified kernel built, so edits can start from it like from a correct one.
                Evaluation::Correct { .. } | Evaluation::Unverified { .. } => NodeState::Evaluated,
                Evaluation::Failed { .. } => NodeState::Failed,
            };
        }
        self.tree.shift_virtual_loss(parent, false);
        self.tree.back_up(child, value);
        self.in_flight.retain(|job| job.child != child);

        let mut events = Vec::new();
        match outcome.evaluation {
            Evaluation::Correct { .. } => {
                if let Some(best) = self.tree.best_correct().filter(|best| best.id == child) {
                    events.push(SearchEvent::NewBest {
                        node: child,
                        speedup: best.speedup().unwrap_or(1.0),
                        fraction_of_sol: best.fraction_of_sol(),
                    });
                }
            }
            // Not a failure, so it ends no repair chain, even as the last repair allowed.
            Evaluation::Unverified { .. } => {}
            Evaluation::Failed { .. } => {
                if self
                    .tree
                    .get(child)
                    .is_some_and(|node| node.repair_attempt() >= self.config.max_repairs)
                {
                    events.push(SearchEvent::BranchDead {
                        nodes: self.kill_chain(child),
                    });
                }
            }
        }
        Ok(events)
    }

    /// Marks a failed node dead, and the failed nodes of the repair chain above it.
    fn kill_chain(&mut self, failed: NodeId) -> Vec<NodeId> {
        let mut dead = Vec::new();
        let mut at = Some(failed);
        while let Some(id) = at {
            let Some(node) = self.tree.node_mut(id) else {
                break;
            };
            node.state = NodeState::Dead;
            dead.push(id);
            // A repair's parent is the failed kernel it repaired.
            at = match node.kind {
                NodeKind::Repair { .. } => node.parent,
                NodeKind::Root | NodeKind::Optimize { .. } => None,
            };
        }
        dead
    }

    fn check_in_flight(&self, child: NodeId) -> Result<(), SearchError> {
        match self.tree.get(child) {
            None => Err(SearchError::UnknownNode(child)),
            Some(node) if node.state != NodeState::InFlight => Err(SearchError::NotInFlight(child)),
            Some(_) => Ok(()),
        }
    }

    fn parent_of(&self, child: NodeId) -> Result<NodeId, SearchError> {
        self.tree
            .get(child)
            .and_then(|node| node.parent)
            .ok_or(SearchError::UnknownNode(child))
    }
}

impl JournalEntry {
    /// The entry with its measured numbers rounded as the search stores them (see the module
    /// doc of `search`), so what is logged is exactly what was applied.
    fn rounded(self) -> JournalEntry {
        match self {
            JournalEntry::Issued { job } => JournalEntry::Issued { job },
            JournalEntry::Prescribed {
                child,
                prescriptions,
            } => JournalEntry::Prescribed {
                child,
                prescriptions: round_prescriptions(prescriptions),
            },
            JournalEntry::Completed { child, outcome } => JournalEntry::Completed {
                child,
                outcome: Outcome {
                    evaluation: match outcome.evaluation {
                        Evaluation::Correct {
                            speedup,
                            fraction_of_sol,
                        } => Evaluation::Correct {
                            speedup: round_measure(speedup),
                            fraction_of_sol: fraction_of_sol.map(round_measure),
                        },
                        // Nothing measured to round.
                        unmeasured
                        @ (Evaluation::Failed { .. } | Evaluation::Unverified { .. }) => unmeasured,
                    },
                    cost: round_spend(outcome.cost),
                },
            },
            JournalEntry::Abandoned {
                child,
                reason,
                cost,
            } => JournalEntry::Abandoned {
                child,
                reason,
                cost: round_spend(cost),
            },
        }
    }
}

fn round_spend(spend: Spend) -> Spend {
    Spend {
        seconds: round_measure(spend.seconds),
        ..spend
    }
}

fn round_prescriptions(prescriptions: Vec<Prescription>) -> Vec<Prescription> {
    prescriptions
        .into_iter()
        .map(|prescription| Prescription {
            prior: prescription.prior.map(round_measure),
            ..prescription
        })
        .collect()
}

fn check_spend(node: NodeId, spend: &Spend) -> Result<(), SearchError> {
    if spend.seconds.is_finite() && spend.seconds >= 0.0 {
        Ok(())
    } else {
        Err(SearchError::InvalidOutcome {
            node,
            why: format!("took {} seconds", spend.seconds),
        })
    }
}

fn check_outcome(node: NodeId, outcome: &Outcome) -> Result<(), SearchError> {
    check_spend(node, &outcome.cost)?;
    if let Evaluation::Correct {
        speedup,
        fraction_of_sol,
    } = outcome.evaluation
    {
        if !(speedup.is_finite() && speedup > 0.0) {
            return Err(SearchError::InvalidOutcome {
                node,
                why: format!("speedup {speedup}"),
            });
        }
        if fraction_of_sol.is_some_and(|f| !(f.is_finite() && f >= 0.0)) {
            return Err(SearchError::InvalidOutcome {
                node,
                why: format!("fraction of speed of light {fraction_of_sol:?}"),
            });
        }
    }
    Ok(())
}
