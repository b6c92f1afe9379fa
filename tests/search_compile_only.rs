//! Compile-only runs (no GPU: kernels are built by nvcc, never verified nor timed): an
//! unverified kernel is optimized further like a correct one but is never the best, a run of
//! them ends on its budgets rather than near the speed of light, a correct kernel among them is
//! still the best, the journal and the snapshot carry them, and the Coder is told what an
//! unverified sibling was.

mod agents_support;

use std::time::Duration;

use agents_support::{Fixtures, show};
use kforge::agents::{CoderTask, History, Prompts, coder_request};
use kforge::llm::Sampling;
use kforge::search::sim::{
    Landscape, RandomLandscape, SimSettings, Simulator, Step, path_words, unit_hash,
};
use kforge::search::{
    Budget, DoneReason, Evaluation, Job, JobKind, JournalEntry, NextJob, Node, NodeId, NodeKind,
    NodeState, Outcome, Policy, Prescription, Search, SearchConfig, SearchEvent, Spend,
    TriedResult, TriedStrategy, Widening,
};

const NO_GPU: &str = "compile-only: no GPU on this machine";

fn unverified() -> Evaluation {
    Evaluation::Unverified {
        reason: NO_GPU.into(),
    }
}

fn correct(speedup: f64, fraction_of_sol: Option<f64>) -> Evaluation {
    Evaluation::Correct {
        speedup,
        fraction_of_sol,
    }
}

fn outcome(evaluation: Evaluation) -> Outcome {
    Outcome {
        evaluation,
        cost: Spend::ZERO,
    }
}

fn is_unverified(node: &Node) -> bool {
    matches!(node.evaluation, Some(Evaluation::Unverified { .. }))
}

/// Every kernel that builds comes back unverified, as an nvcc-only evaluation reports it;
/// compile errors (the landscape's failures) stay failures.
struct CompileOnly(RandomLandscape);

impl Landscape for CompileOnly {
    fn prescriptions(&self, path: &[Step], given: usize) -> Vec<Prescription> {
        self.0.prescriptions(path, given)
    }

    fn evaluate(&self, path: &[Step]) -> Evaluation {
        match self.0.evaluate(path) {
            Evaluation::Correct { .. } => unverified(),
            other => other,
        }
    }
}

/// About half the kernels that build come back unverified, the others measured.
struct Mixed(RandomLandscape);

impl Landscape for Mixed {
    fn prescriptions(&self, path: &[Step], given: usize) -> Vec<Prescription> {
        self.0.prescriptions(path, given)
    }

    fn evaluate(&self, path: &[Step]) -> Evaluation {
        match self.0.evaluate(path) {
            Evaluation::Correct { .. } if unit_hash(self.0.seed, &path_words(path, 7)) < 0.5 => {
                unverified()
            }
            other => other,
        }
    }
}

fn policies() -> [Policy; 3] {
    [
        Policy::Puct { exploration: 0.5 },
        Policy::Uct { exploration: 0.5 },
        Policy::LinearChain,
    ]
}

fn config(policy: Policy, max_nodes: u32, stop_at_fraction_of_sol: Option<f64>) -> SearchConfig {
    SearchConfig {
        policy,
        budget: Budget {
            max_nodes,
            stop_at_fraction_of_sol,
            max_abandoned: 1000,
            ..Budget::default()
        },
        ..SearchConfig::default()
    }
}

fn expand(search: &mut Search) -> Job {
    match search.next_job(Duration::ZERO) {
        NextJob::Expand(job) => job,
        other => panic!("expected a job, got {other:?}"),
    }
}

fn prescriptions(strategies: &[&str]) -> Vec<Prescription> {
    strategies
        .iter()
        .map(|strategy| Prescription {
            strategy: strategy.to_string(),
            prior: None,
        })
        .collect()
}

#[test]
fn an_unverified_kernel_is_optimized_further_not_repaired() {
    let mut search = Search::new(config(Policy::LinearChain, 10, Some(0.9)), 3).unwrap();
    let first = expand(&mut search);
    search
        .prescribe(first.child, prescriptions(&["a", "b"]))
        .unwrap();
    let events = search.complete(first.child, outcome(unverified())).unwrap();
    assert_eq!(events, Vec::new(), "an unverified kernel is no new best");

    let node = search.node(first.child).unwrap();
    assert_eq!(node.state, NodeState::Evaluated);
    assert!(node.is_expandable());
    assert!(!node.is_correct());
    assert_eq!(node.speedup(), None);
    assert_eq!(node.fraction_of_sol(), None);
    assert_eq!(node.stats.value, Some(0.0));
    assert!(search.best().is_none());
    assert_eq!(search.tree().root().stats.best_speedup, None);

    // The chain goes on from the unverified kernel with an optimization, not a repair.
    let next = expand(&mut search);
    assert_eq!(next.parent, first.child);
    assert_eq!(next.kind, JobKind::Optimize);
    assert_eq!(
        next.ancestor_strategies,
        vec![TriedStrategy {
            node: first.child,
            strategy: "a".into(),
            result: TriedResult::Unverified {
                reason: NO_GPU.into()
            },
            best_speedup_in_subtree: None,
        }]
    );
}

#[test]
fn an_unverified_last_repair_ends_no_chain() {
    let config = SearchConfig {
        max_repairs: 1,
        ..config(Policy::LinearChain, 10, Some(0.9))
    };
    let mut search = Search::new(config, 5).unwrap();
    let first = expand(&mut search);
    search
        .prescribe(first.child, prescriptions(&["a"]))
        .unwrap();
    let failed = Evaluation::Failed {
        reason: "compile error: identifier undefined".into(),
    };
    assert_eq!(
        search.complete(first.child, outcome(failed)).unwrap(),
        Vec::new()
    );
    let repair = expand(&mut search);
    assert_eq!(repair.parent, first.child);
    assert_eq!(repair.kind, JobKind::Repair { attempt: 1 });
    search
        .prescribe(repair.child, prescriptions(&["declare it"]))
        .unwrap();
    // As the last repair allowed, a failure would kill the chain; a build that could not be
    // run is no failure.
    let events = search
        .complete(repair.child, outcome(unverified()))
        .unwrap();
    assert_eq!(events, Vec::new());
    assert_eq!(search.node(first.child).unwrap().state, NodeState::Failed);
    assert_eq!(
        search.node(repair.child).unwrap().state,
        NodeState::Evaluated
    );
    let next = expand(&mut search);
    assert_eq!((next.parent, next.kind), (repair.child, JobKind::Optimize));
}

#[test]
fn a_correct_kernel_among_unverified_ones_is_the_best() {
    let mut search = Search::new(config(Policy::LinearChain, 10, Some(0.9)), 7).unwrap();
    fn complete(search: &mut Search, evaluation: Evaluation) -> (Job, Vec<SearchEvent>) {
        let job = expand(search);
        search
            .prescribe(job.child, prescriptions(&["edit"]))
            .unwrap();
        let events = search.complete(job.child, outcome(evaluation)).unwrap();
        (job, events)
    }
    let (one, events) = complete(&mut search, correct(1.5, Some(0.3)));
    assert_eq!(
        events,
        vec![SearchEvent::NewBest {
            node: one.child,
            speedup: 1.5,
            fraction_of_sol: Some(0.3)
        }]
    );
    let (two, events) = complete(&mut search, unverified());
    assert_eq!(two.parent, one.child);
    assert_eq!(events, Vec::new());
    assert_eq!(search.best().map(|best| best.id), Some(one.child));
    let (three, events) = complete(&mut search, correct(1.2, Some(0.25)));
    assert_eq!(
        three.parent, two.child,
        "the chain goes through the unverified kernel"
    );
    assert_eq!(events, Vec::new(), "1.2× is slower than the best");
    assert_eq!(search.best().map(|best| best.id), Some(one.child));
    let (four, events) = complete(&mut search, correct(2.0, Some(0.4)));
    assert!(matches!(
        events.as_slice(),
        [SearchEvent::NewBest { node, speedup, .. }] if *node == four.child && *speedup == 2.0
    ));
    // The unverified kernel is told as such, with what edits on top of it reached.
    assert!(
        four.ancestor_strategies
            .iter()
            .any(|tried| tried.node == two.child
                && tried.result
                    == TriedResult::Unverified {
                        reason: NO_GPU.into()
                    }
                && tried.best_speedup_in_subtree == Some(1.2))
    );
    let tree = search.tree();
    assert_eq!(tree.root().stats.best_speedup, Some(2.0));
    let two = tree.get(two.child).unwrap();
    assert_eq!(two.speedup(), None);
    assert_eq!(two.stats.best_speedup, Some(2.0));
    assert_eq!(two.stats.value, Some(0.0));
}

#[test]
fn a_compile_only_run_walks_a_tree_and_ends_on_its_node_budget() {
    let mut expanded_unverified = 0;
    for seed in 0..30 {
        let policy = policies()[(seed % 3) as usize];
        // So low a target that any measured kernel would reach it.
        let config = config(policy, 30, Some(0.01));
        let landscape = RandomLandscape::new(seed);

        let mut search = Search::new(config.clone(), seed).unwrap();
        let compile_only = CompileOnly(landscape);
        let mut sim = Simulator::new(&compile_only, SimSettings::default());
        let reason = sim.run(&mut search).unwrap();
        assert_eq!(reason, DoneReason::NodeBudget, "seed {seed}");
        assert_eq!(search.candidates(), 30, "seed {seed}");
        assert!(search.best().is_none(), "seed {seed}");
        assert!(
            !sim.events()
                .iter()
                .any(|event| matches!(event, SearchEvent::NewBest { .. })),
            "seed {seed}"
        );
        let tree = search.tree();
        assert!(tree.nodes().iter().skip(1).all(|node| !node.is_correct()));
        assert_eq!(tree.root().stats.best_speedup, None, "seed {seed}");
        let deepest = tree.nodes().iter().map(|node| node.depth).max().unwrap();
        assert!(
            deepest >= 3,
            "seed {seed}: the tree stayed flat ({deepest})"
        );
        expanded_unverified += tree
            .nodes()
            .iter()
            .filter(|node| is_unverified(node))
            .filter(|node| {
                tree.children(node.id)
                    .any(|child| matches!(child.kind, NodeKind::Optimize { .. }))
            })
            .count();

        // The same run with measured kernels stops at once: the target is reachable.
        let mut measured = Search::new(config, seed).unwrap();
        let reason = Simulator::new(&landscape, SimSettings::default())
            .run(&mut measured)
            .unwrap();
        assert_eq!(reason, DoneReason::NearSpeedOfLight, "seed {seed}");
    }
    assert!(expanded_unverified > 60, "{expanded_unverified}");
}

#[test]
fn among_mixed_results_the_best_is_the_fastest_measured_kernel() {
    let mut unverified_parents = 0;
    for seed in 0..30 {
        let policy = policies()[(seed % 3) as usize];
        let landscape = Mixed(RandomLandscape::new(seed));
        let mut search = Search::new(config(policy, 40, None), seed).unwrap();
        let mut sim = Simulator::new(&landscape, SimSettings::default());
        sim.run(&mut search).unwrap();
        let tree = search.tree();
        let fastest = tree
            .nodes()
            .iter()
            .skip(1)
            .filter_map(Node::speedup)
            .fold(None, |best: Option<f64>, s| {
                Some(best.map_or(s, |b| b.max(s)))
            });
        let best = search.best();
        assert_eq!(best.and_then(Node::speedup), fastest, "seed {seed}");
        assert!(best.is_none_or(Node::is_correct), "seed {seed}");
        assert_eq!(tree.root().stats.best_speedup, fastest, "seed {seed}");
        let mut last = f64::NEG_INFINITY;
        for event in sim.events() {
            if let SearchEvent::NewBest { node, speedup, .. } = event {
                assert!(tree.get(*node).unwrap().is_correct(), "seed {seed}");
                assert!(*speedup > last, "seed {seed}");
                last = *speedup;
            }
        }
        unverified_parents += tree
            .nodes()
            .iter()
            .filter(|node| {
                node.parent
                    .and_then(|parent| tree.get(parent))
                    .is_some_and(is_unverified)
            })
            .count();
    }
    assert!(unverified_parents > 50, "{unverified_parents}");
}

#[test]
fn journal_and_snapshot_carry_unverified_kernels() {
    for seed in 0..24 {
        let base = RandomLandscape {
            fail_rate: 0.3,
            ..RandomLandscape::new(seed)
        };
        if seed % 2 == 0 {
            interrupt_and_resume(seed, &CompileOnly(base));
        } else {
            interrupt_and_resume(seed, &Mixed(base));
        }
    }
}

/// Stops a run partway, checks that its journal and its snapshot both restore it, and that
/// both resumed runs end where the uninterrupted run ends.
fn interrupt_and_resume<L: Landscape>(seed: u64, landscape: &L) {
    let mut config = config(policies()[(seed % 3) as usize], 35, None);
    config.budget.max_in_flight = 1 + (seed % 4) as u32;
    let settings = SimSettings {
        seed,
        abandon_rate: 0.1,
        ..SimSettings::default()
    };
    let mut expected = Search::new(config.clone(), seed).unwrap();
    Simulator::new(landscape, settings)
        .run(&mut expected)
        .unwrap();

    let mut search = Search::new(config.clone(), seed).unwrap();
    let mut sim = Simulator::new(landscape, settings);
    let has_unverified = |journal: &[JournalEntry]| {
        journal.iter().any(|entry| {
            matches!(
                entry,
                JournalEntry::Completed { outcome, .. }
                    if matches!(outcome.evaluation, Evaluation::Unverified { .. })
            )
        })
    };
    // Stop a few steps after the first unverified kernel, at a point that varies by seed.
    let mut steps_after = (seed as usize * 5) % 30;
    while !has_unverified(sim.journal()) || steps_after > 0 {
        if has_unverified(sim.journal()) {
            steps_after -= 1;
        }
        if sim.step(&mut search).unwrap().is_some() {
            break;
        }
    }
    let journal = sim.journal().to_vec();
    assert!(
        has_unverified(&journal),
        "seed {seed}: nothing unverified to carry"
    );
    let lines: Vec<String> = journal
        .iter()
        .map(|entry| serde_json::to_string(entry).unwrap())
        .collect();
    assert!(
        lines
            .iter()
            .any(|line| line.contains(r#""status":"unverified""#)),
        "seed {seed}"
    );
    let parsed: Vec<JournalEntry> = lines
        .iter()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    assert_eq!(parsed, journal, "seed {seed}");

    let snapshot = search.to_json().unwrap();
    assert!(snapshot.contains(r#""status":"unverified""#), "seed {seed}");
    let mut restored = Search::from_json(&snapshot).unwrap();
    assert_eq!(restored, search, "seed {seed}: the snapshot lost state");
    let mut replayed = Search::replay(config, seed, &parsed).unwrap();
    assert_eq!(replayed, search, "seed {seed}: the journal lost state");

    Simulator::new(landscape, settings)
        .starting_at(sim.now())
        .run(&mut restored)
        .unwrap();
    Simulator::new(landscape, settings)
        .starting_at(sim.now())
        .run(&mut replayed)
        .unwrap();
    assert_eq!(restored, expected, "seed {seed}: snapshot resume diverged");
    assert_eq!(replayed, expected, "seed {seed}: journal resume diverged");
}

#[test]
fn the_coder_is_told_an_unverified_sibling_was_built_not_run() {
    let config = SearchConfig {
        policy: Policy::Puct { exploration: 0.5 },
        widening: Widening { k: 3.0, alpha: 0.5 },
        ..config(Policy::LinearChain, 10, None)
    };
    let mut search = Search::new(config, 11).unwrap();
    let first = expand(&mut search);
    let ranked = vec![
        Prescription {
            strategy: "one warp per row".into(),
            prior: Some(0.2),
        },
        Prescription {
            strategy: "float4 loads".into(),
            prior: Some(0.9),
        },
    ];
    search.prescribe(first.child, ranked).unwrap();
    search.complete(first.child, outcome(unverified())).unwrap();
    // The reference's second prescription, far likelier by the Judge, goes next.
    let second = expand(&mut search);
    assert_eq!(second.parent, NodeId::ROOT);
    let prescription = second.prescription.clone().unwrap();
    assert_eq!(prescription.strategy, "float4 loads");
    assert_eq!(
        second.sibling_strategies,
        vec![TriedStrategy {
            node: first.child,
            strategy: "one warp per row".into(),
            result: TriedResult::Unverified {
                reason: NO_GPU.into()
            },
            best_speedup_in_subtree: None,
        }]
    );

    let fixtures = Fixtures::load();
    let task = CoderTask::Generate {
        prescription: Some(&prescription.strategy),
        history: History::of(&second),
    };
    let request = coder_request(
        &Prompts::shipped().unwrap(),
        &fixtures.compile_only_run(),
        &task,
        &Sampling::default(),
    )
    .unwrap();
    let text = show(&request);
    let told = "- one warp per row\n  → built, not verified or timed (compile-only: no GPU on \
                this machine)";
    assert!(text.contains(told), "{text}");
}
