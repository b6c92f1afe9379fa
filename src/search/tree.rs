//! The search tree: one node per candidate kernel, the reference at the root.
//!
//! Nodes are never removed: an expansion that failed before evaluation stays as an `Abandoned`
//! node, so node ids are stable indices and the tree written to a run directory shows every
//! attempt. Each node keeps what the search needs of its evaluation and the prescription that
//! produced it, so siblings can be told what was already tried and why it failed. An
//! evaluation is one of three kinds ([`Evaluation`]): correct (with its speedup against the
//! reference and its fraction of the speed of light), failed (compile error, crash, mismatch),
//! or unverified: built by nvcc but neither checked nor timed, as in a compile-only run on a
//! machine without a GPU. An unverified kernel is optimized further like a correct one, so a
//! compile-only run still walks a tree, but it is never the best and never stops the search
//! early: nothing is known of its speed.
//!
//! The statistics ([`Stats`]) are derived data: they are rebuilt from the evaluations in the
//! order the evaluations arrived, so a tree restored from JSON carries bit-identical values.

use std::fmt;

use serde::{Deserialize, Serialize};

use super::budget::Spend;
use super::policy::{Reward, rank_prior};

/// A node's index in the tree; the root is 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct NodeId(pub u32);

impl NodeId {
    pub const ROOT: NodeId = NodeId(0);

    pub(crate) fn index(self) -> usize {
        self.0 as usize
    }
}

impl fmt::Display for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// How a node came to be.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum NodeKind {
    /// The reference (eager PyTorch): speedup 1 by definition.
    Root,
    /// One of the parent's prescriptions applied: `prescription` is its index in the parent's
    /// ranked list, `None` until the Judge has prescribed (or if the orchestrator never did).
    Optimize { prescription: Option<usize> },
    /// The `attempt`-th repair in a chain that started at a failed optimization.
    Repair { attempt: u32 },
}

/// Where a node is in its life.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "state")]
pub enum NodeState {
    /// Handed out as a job; its LLM calls or its evaluation are running.
    InFlight,
    /// Evaluated and correct, or built but unverified (compile-only): it can be optimized
    /// further.
    Evaluated,
    /// Evaluated and wrong (compile error, crash, mismatch): never optimized, only repaired.
    Failed,
    /// Failed with no repair left (or its repair chain ran out): never expanded again.
    Dead,
    /// The expansion failed before evaluation (an LLM error); it holds no slot in any budget
    /// but the abandoned count and whatever it spent.
    Abandoned { reason: String },
}

/// What an evaluation says, reduced to what the search needs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "status")]
pub enum Evaluation {
    Correct {
        /// Reference time / candidate time (same session, interleaved timing).
        speedup: f64,
        /// Speed-of-light floor time / candidate time, when the floor is known.
        fraction_of_sol: Option<f64>,
    },
    /// Compile error, runtime error, timeout or mismatch; `reason` is what the Judge should
    /// read about it (a line, not the whole log).
    Failed { reason: String },
    /// Built, but neither verified nor timed (compile-only: no GPU). Expandable like a correct
    /// kernel, yet not correct: no speedup, never the best. `reason` says why it was not run,
    /// as the Judge reads it (a line, e.g. "compile-only: no GPU on this machine").
    Unverified { reason: String },
}

/// One of the Judge's ranked prescriptions for a node.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Prescription {
    /// The prescription as the Coder applies it and as siblings see it in "do not repeat".
    pub strategy: String,
    /// The Judge's own confidence in (0, 1], when it gave one; otherwise the prior comes from
    /// the rank ([`rank_prior`]).
    pub prior: Option<f64>,
}

/// Search statistics of a node, backed up from its subtree. Rebuilt on load, never read back.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Stats {
    /// This node's own reward, once evaluated.
    pub value: Option<f64>,
    /// Evaluations in this subtree, this node's own included.
    pub visits: u32,
    pub value_sum: f64,
    /// The best reward in this subtree (the backup that finds the fastest kernel).
    pub best_value: Option<f64>,
    /// The best correct speedup in this subtree (the root's own speedup 1 not counted).
    pub best_speedup: Option<f64>,
    /// Jobs in flight below this node.
    pub virtual_loss: u32,
}

/// One candidate kernel (or the reference).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Node {
    pub id: NodeId,
    pub parent: Option<NodeId>,
    pub depth: u32,
    pub kind: NodeKind,
    pub state: NodeState,
    /// The prescription (or repair fix) that produced this node.
    pub strategy: Option<String>,
    /// The PUCT prior of this node as a child of its parent.
    pub prior: f64,
    pub evaluation: Option<Evaluation>,
    /// What the expansion that made this node cost (zero while in flight).
    pub cost: Spend,
    /// Order in which evaluations arrived (the root is 0).
    pub completed: Option<u64>,
    pub children: Vec<NodeId>,
    /// The Judge's ranked prescriptions for expanding this node, every list it gave, in order.
    pub prescriptions: Vec<Prescription>,
    #[serde(skip_deserializing)]
    pub stats: Stats,
}

impl Node {
    pub fn is_correct(&self) -> bool {
        matches!(self.evaluation, Some(Evaluation::Correct { .. }))
    }

    pub fn speedup(&self) -> Option<f64> {
        match self.evaluation {
            Some(Evaluation::Correct { speedup, .. }) => Some(speedup),
            _ => None,
        }
    }

    pub fn fraction_of_sol(&self) -> Option<f64> {
        match self.evaluation {
            Some(Evaluation::Correct {
                fraction_of_sol, ..
            }) => fraction_of_sol,
            _ => None,
        }
    }

    /// The repair attempt this node is (0 for anything but a repair).
    pub fn repair_attempt(&self) -> u32 {
        match self.kind {
            NodeKind::Repair { attempt } => attempt,
            NodeKind::Root | NodeKind::Optimize { .. } => 0,
        }
    }

    /// In flight, evaluated or failed-but-repairable: it takes a place among its parent's
    /// children for progressive widening. Dead and abandoned nodes give their place back.
    pub fn is_live(&self) -> bool {
        matches!(
            self.state,
            NodeState::InFlight | NodeState::Evaluated | NodeState::Failed
        )
    }

    /// Correct, unverified (compile-only) or the root, and so open to optimization.
    pub fn is_expandable(&self) -> bool {
        self.state == NodeState::Evaluated
    }
}

/// Expansions of one node that may fail before evaluation before it is no longer expanded.
pub const MAX_ABANDONED_PER_NODE: usize = 3;

/// The nodes, indexed by id.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Tree {
    nodes: Vec<Node>,
}

impl Tree {
    pub(crate) fn new() -> Tree {
        let mut root = Node {
            id: NodeId::ROOT,
            parent: None,
            depth: 0,
            kind: NodeKind::Root,
            state: NodeState::Evaluated,
            strategy: None,
            prior: 1.0,
            evaluation: Some(Evaluation::Correct {
                speedup: 1.0,
                fraction_of_sol: None,
            }),
            cost: Spend::ZERO,
            completed: Some(0),
            children: Vec::new(),
            prescriptions: Vec::new(),
            stats: Stats::default(),
        };
        root.stats = root_stats();
        Tree { nodes: vec![root] }
    }

    pub fn root(&self) -> &Node {
        &self.nodes[0]
    }

    pub fn get(&self, id: NodeId) -> Option<&Node> {
        self.nodes.get(id.index())
    }

    /// Every node, by id.
    pub fn nodes(&self) -> &[Node] {
        &self.nodes
    }

    pub fn children(&self, id: NodeId) -> impl Iterator<Item = &Node> {
        self.get(id)
            .into_iter()
            .flat_map(|node| node.children.iter())
            .map(|child| &self.nodes[child.index()])
    }

    /// Children holding a place for progressive widening ([`Node::is_live`]).
    pub fn live_children(&self, id: NodeId) -> usize {
        self.children(id).filter(|child| child.is_live()).count()
    }

    /// The ids from the root down to `id`, both included (empty for an unknown id).
    pub fn path(&self, id: NodeId) -> Vec<NodeId> {
        let mut path = Vec::new();
        let mut at = self.get(id);
        while let Some(node) = at {
            path.push(node.id);
            at = node.parent.and_then(|parent| self.get(parent));
        }
        path.reverse();
        path
    }

    /// The fastest correct candidate (the root excluded; the earlier one on a tie). Unverified
    /// candidates have no speedup and are never it.
    pub fn best_correct(&self) -> Option<&Node> {
        let mut best: Option<&Node> = None;
        for node in self.nodes.iter().skip(1) {
            if let Some(speedup) = node.speedup()
                && best
                    .and_then(Node::speedup)
                    .is_none_or(|best_speedup| speedup > best_speedup)
            {
                best = Some(node);
            }
        }
        best
    }

    /// The id the next node will get.
    pub(crate) fn next_id(&self) -> NodeId {
        // A tree never holds 2^32 nodes: budgets cap it in the thousands.
        NodeId(self.nodes.len() as u32)
    }

    pub(crate) fn node_mut(&mut self, id: NodeId) -> Option<&mut Node> {
        self.nodes.get_mut(id.index())
    }

    /// Whether a child of `id` is waiting for the Judge's prescriptions; while one is, another
    /// optimization of `id` would only ask the Judge the same question again.
    /// Expansions of `id` that failed before evaluation (LLM errors, unusable replies).
    pub(crate) fn abandoned_children(&self, id: NodeId) -> usize {
        self.children(id)
            .filter(|child| matches!(child.state, NodeState::Abandoned { .. }))
            .count()
    }

    /// Whether `id` may still be expanded: a kernel whose expansions keep failing before
    /// evaluation (a reply the models cannot get right for it) is left alone, so one bad node
    /// cannot use up the run's tolerance for failures. The reference is always worth asking
    /// about: without it there is no run, and the run's own limit on failures
    /// ([`crate::search::Budget::max_abandoned`]) ends a run whose every call fails.
    pub(crate) fn still_worth_asking(&self, id: NodeId) -> bool {
        id == NodeId::ROOT || self.abandoned_children(id) < MAX_ABANDONED_PER_NODE
    }

    pub(crate) fn awaiting_prescriptions(&self, id: NodeId) -> bool {
        self.children(id).any(|child| {
            child.state == NodeState::InFlight
                && child.kind == (NodeKind::Optimize { prescription: None })
        })
    }

    /// The index of the parent's best prescription not yet taken by a live or evaluated child
    /// (an abandoned child gives its prescription back): highest prior, then highest rank.
    pub(crate) fn unused_prescription(&self, id: NodeId) -> Option<usize> {
        let node = self.get(id)?;
        let taken: Vec<usize> = self
            .children(id)
            .filter(|child| !matches!(child.state, NodeState::Abandoned { .. }))
            .filter_map(|child| match child.kind {
                NodeKind::Optimize { prescription } => prescription,
                NodeKind::Root | NodeKind::Repair { .. } => None,
            })
            .collect();
        let mut best: Option<(usize, f64)> = None;
        for (index, prescription) in node.prescriptions.iter().enumerate() {
            if taken.contains(&index) {
                continue;
            }
            let prior = prescription_prior(prescription, index);
            if best.is_none_or(|(_, best_prior)| prior > best_prior) {
                best = Some((index, prior));
            }
        }
        best.map(|(index, _)| index)
    }

    pub(crate) fn push(&mut self, node: Node) {
        if let Some(parent) = node.parent.and_then(|parent| self.node_mut(parent)) {
            parent.children.push(node.id);
        }
        self.nodes.push(node);
    }

    /// Adds (or removes) one in-flight job below every node from `parent` up to the root.
    pub(crate) fn shift_virtual_loss(&mut self, parent: NodeId, add: bool) {
        for id in self.path(parent) {
            let stats = &mut self.nodes[id.index()].stats;
            stats.virtual_loss = if add {
                stats.virtual_loss + 1
            } else {
                stats.virtual_loss.saturating_sub(1)
            };
        }
    }

    /// Records a new evaluation's reward at `id` and backs it up to the root: visits and value
    /// sums add up, best value and best speedup take the maximum.
    pub(crate) fn back_up(&mut self, id: NodeId, value: f64) {
        let speedup = self.get(id).and_then(Node::speedup);
        let path = self.path(id);
        for (step, ancestor) in path.iter().rev().enumerate() {
            let stats = &mut self.nodes[ancestor.index()].stats;
            if step == 0 {
                stats.value = Some(value);
            }
            stats.visits += 1;
            stats.value_sum += value;
            stats.best_value = Some(stats.best_value.map_or(value, |best| best.max(value)));
            if let Some(speedup) = speedup {
                stats.best_speedup = Some(stats.best_speedup.map_or(speedup, |b| b.max(speedup)));
            }
        }
    }

    /// Recomputes every node's statistics the way they were built live: backups in the order
    /// the evaluations arrived, then one virtual loss per in-flight job.
    pub(crate) fn rebuild_stats(&mut self, reward: &Reward) {
        for node in &mut self.nodes {
            node.stats = Stats::default();
        }
        self.nodes[0].stats = root_stats();
        let mut completed: Vec<(u64, NodeId)> = self
            .nodes
            .iter()
            .skip(1)
            .filter_map(|node| node.completed.map(|order| (order, node.id)))
            .collect();
        completed.sort_unstable();
        for (_, id) in completed {
            if let Some(evaluation) = self.get(id).and_then(|node| node.evaluation.as_ref()) {
                let value = reward.value(evaluation);
                self.back_up(id, value);
            }
        }
        let in_flight: Vec<NodeId> = self
            .nodes
            .iter()
            .filter(|node| node.state == NodeState::InFlight)
            .filter_map(|node| node.parent)
            .collect();
        for parent in in_flight {
            self.shift_virtual_loss(parent, true);
        }
    }

    /// Checks what a deserialised tree must satisfy for the search to run on it.
    pub(crate) fn check_consistent(&self) -> Result<(), String> {
        let Some(root) = self.nodes.first() else {
            return Err("the tree has no root".into());
        };
        if root.kind != NodeKind::Root || root.parent.is_some() {
            return Err("node 0 is not a root".into());
        }
        for (index, node) in self.nodes.iter().enumerate() {
            if node.id.index() != index {
                return Err(format!("node at index {index} says it is {}", node.id));
            }
            if index > 0 {
                let Some(parent) = node.parent.filter(|parent| parent.index() < index) else {
                    return Err(format!("node {} has no earlier parent", node.id));
                };
                if !self.nodes[parent.index()].children.contains(&node.id) {
                    return Err(format!("node {} is missing from its parent", node.id));
                }
                if node.kind == NodeKind::Root {
                    return Err(format!("node {} is a second root", node.id));
                }
            }
            for child in &node.children {
                if self.get(*child).and_then(|child| child.parent) != Some(node.id) {
                    return Err(format!("node {} lists {child} as a child", node.id));
                }
            }
        }
        Ok(())
    }
}

/// The prior of the `index`-th prescription of a node.
pub(crate) fn prescription_prior(prescription: &Prescription, index: usize) -> f64 {
    prescription.prior.unwrap_or_else(|| rank_prior(index))
}

/// The reference counts as one visit with reward 0 (speedup 1).
fn root_stats() -> Stats {
    Stats {
        value: Some(0.0),
        visits: 1,
        value_sum: 0.0,
        best_value: Some(0.0),
        best_speedup: None,
        virtual_loss: 0,
    }
}
