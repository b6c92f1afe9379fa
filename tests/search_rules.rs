//! The tree search's rules, checked on the journals of many simulated runs and on small trees
//! built by hand: failed kernels are only ever repaired, repairs are bounded and exhausted
//! chains die, progressive widening holds, virtual loss spreads concurrent selections, and the
//! Judge is told what siblings tried.

use std::time::Duration;

use kforge::search::sim::{RandomLandscape, SimSettings, Simulator};
use kforge::search::{
    AssignedPrescription, Budget, Dollars, Evaluation, Job, JobKind, JournalEntry, NextJob, Node,
    NodeId, NodeKind, NodeState, Outcome, Policy, Prescription, Search, SearchConfig, Spend, Tree,
    TriedResult, Widening,
};

fn simulate(
    config: SearchConfig,
    seed: u64,
    landscape: RandomLandscape,
    abandon_rate: f64,
) -> (Search, Vec<JournalEntry>) {
    let settings = SimSettings {
        seed,
        abandon_rate,
        ..SimSettings::default()
    };
    let mut search = Search::new(config, seed).unwrap();
    let mut sim = Simulator::new(&landscape, settings);
    sim.run(&mut search).unwrap();
    (search, sim.journal().to_vec())
}

fn config(policy: Policy, max_nodes: u32, max_repairs: u32) -> SearchConfig {
    SearchConfig {
        policy,
        max_repairs,
        budget: Budget {
            max_nodes,
            stop_at_fraction_of_sol: None,
            max_abandoned: 1000,
            ..Budget::default()
        },
        ..SearchConfig::default()
    }
}

fn policies() -> [Policy; 3] {
    [
        Policy::Puct { exploration: 0.5 },
        Policy::Uct { exploration: 0.5 },
        Policy::LinearChain,
    ]
}

fn failed(node: &Node) -> bool {
    matches!(node.evaluation, Some(Evaluation::Failed { .. }))
}

fn abandoned(node: &Node) -> bool {
    matches!(node.state, NodeState::Abandoned { .. })
}

fn needs_repair(tree: &Tree, node: &Node, max_repairs: u32) -> bool {
    node.state == NodeState::Failed
        && node.repair_attempt() < max_repairs
        && tree.children(node.id).all(abandoned)
        && tree.children(node.id).filter(|c| abandoned(c)).count()
            < kforge::search::MAX_ABANDONED_PER_NODE
}

#[test]
fn failed_kernels_are_only_repaired_within_the_bound_then_die() {
    let mut dead_chains = 0;
    let mut repaired = 0;
    for seed in 0..120 {
        let max_repairs = (seed % 4) as u32;
        let policy = policies()[(seed % 3) as usize];
        let landscape = RandomLandscape {
            fail_rate: 0.45,
            repair_rate: 0.35,
            ..RandomLandscape::new(seed)
        };
        let (search, journal) = simulate(config(policy, 40, max_repairs), seed, landscape, 0.1);
        let tree = search.tree();
        for node in tree.nodes() {
            let live: Vec<&Node> = tree.children(node.id).filter(|c| !abandoned(c)).collect();
            if failed(node) {
                // Never optimized: its only children are repairs, one at a time, in a chain.
                assert!(live.len() <= 1, "seed {seed}: node {} branched", node.id);
                for child in &live {
                    assert_eq!(
                        child.kind,
                        NodeKind::Repair {
                            attempt: node.repair_attempt() + 1
                        },
                        "seed {seed}: failed node {} was optimized",
                        node.id
                    );
                }
                // At the bound the chain is dead, back to the optimization that started it.
                if node.repair_attempt() == max_repairs {
                    dead_chains += 1;
                    let mut at = node;
                    loop {
                        assert_eq!(at.state, NodeState::Dead, "seed {seed}");
                        match at.kind {
                            NodeKind::Repair { .. } => at = tree.get(at.parent.unwrap()).unwrap(),
                            _ => break,
                        }
                    }
                }
            }
            if let NodeKind::Repair { attempt } = node.kind {
                let parent = tree.get(node.parent.unwrap()).unwrap();
                assert!(failed(parent), "seed {seed}: repair of a correct kernel");
                assert!(
                    attempt <= max_repairs,
                    "seed {seed}: repair {attempt} > {max_repairs}"
                );
                if node.is_correct() {
                    repaired += 1;
                }
            }
            if node.state == NodeState::Dead {
                // Nothing below a dead node lives.
                assert!(
                    tree.children(node.id)
                        .all(|c| c.state == NodeState::Dead || abandoned(c)),
                    "seed {seed}"
                );
            }
        }
        // Repairs come before any new optimization, oldest failure first.
        let mut replayed = Search::new(search.config().clone(), seed).unwrap();
        for entry in &journal {
            if let JournalEntry::Issued { job } = entry {
                let tree = replayed.tree();
                let waiting = tree
                    .nodes()
                    .iter()
                    .find(|n| needs_repair(tree, n, max_repairs))
                    .map(|n| n.id);
                match job.kind {
                    JobKind::Optimize => {
                        assert_eq!(waiting, None, "seed {seed}: optimized before repairing");
                        assert!(!failed(tree.get(job.parent).unwrap()));
                    }
                    JobKind::Repair { .. } => assert_eq!(waiting, Some(job.parent)),
                }
            }
            replayed.apply(entry).unwrap();
        }
    }
    assert!(
        dead_chains > 50 && repaired > 20,
        "{dead_chains} dead, {repaired} repaired"
    );
}

#[test]
fn progressive_widening_bound_holds_at_every_expansion() {
    let mut at_bound = 0;
    for (k, alpha) in [(1.0, 0.5), (2.0, 0.3), (0.5, 0.8), (1.0, 0.0)] {
        for seed in 0..40 {
            let policy = policies()[(seed % 2) as usize];
            let mut config = config(policy, 50, 1);
            config.widening = Widening { k, alpha };
            config.budget.max_in_flight = 1 + (seed % 5) as u32;
            let (search, journal) = simulate(config.clone(), seed, RandomLandscape::new(seed), 0.1);
            let mut replayed = Search::new(config, seed).unwrap();
            for entry in &journal {
                if let JournalEntry::Issued { job } = entry
                    && job.kind == JobKind::Optimize
                {
                    let tree = replayed.tree();
                    let parent = tree.get(job.parent).unwrap();
                    let live = tree.children(parent.id).filter(|c| c.is_live()).count();
                    let bound = (k * f64::from(parent.stats.visits).powf(alpha)).ceil() as usize;
                    assert!(
                        live < bound,
                        "k={k} alpha={alpha} seed {seed}: node {} with {} visits has {live} \
                         live children and got another",
                        parent.id,
                        parent.stats.visits
                    );
                    if live + 1 == bound {
                        at_bound += 1;
                    }
                }
                replayed.apply(entry).unwrap();
            }
            assert_eq!(&replayed, &search);
        }
    }
    assert!(
        at_bound > 100,
        "the bound was reached only {at_bound} times"
    );
}

fn correct(speedup: f64) -> Outcome {
    Outcome {
        evaluation: Evaluation::Correct {
            speedup,
            fraction_of_sol: None,
        },
        cost: Spend {
            dollars: Dollars::from_dollars(0.01).unwrap(),
            tokens: 1000,
            seconds: 10.0,
        },
    }
}

fn prescriptions(names: &[&str]) -> Vec<Prescription> {
    names
        .iter()
        .map(|name| Prescription {
            strategy: name.to_string(),
            prior: None,
        })
        .collect()
}

fn optimize(parent: u32, child: u32, prescription: Option<(usize, &str)>) -> JournalEntry {
    JournalEntry::Issued {
        job: Job {
            parent: NodeId(parent),
            child: NodeId(child),
            kind: JobKind::Optimize,
            prescription: prescription.map(|(index, strategy)| AssignedPrescription {
                index: Some(index),
                strategy: strategy.to_string(),
            }),
            sibling_strategies: Vec::new(),
            ancestor_strategies: Vec::new(),
            issued_at: Duration::ZERO,
        },
    }
}

/// The reference with three evaluated children A (1.25×), B and C (1.2×), each with room for
/// more children; then four jobs handed out at once, each prescribed as soon as it is out.
fn parents_of_four_concurrent_jobs(policy: Policy, virtual_loss: Option<f64>) -> Vec<NodeId> {
    let config = SearchConfig {
        policy,
        virtual_loss,
        widening: Widening { k: 4.0, alpha: 0.5 },
        budget: Budget {
            max_nodes: 100,
            max_in_flight: 4,
            ..Budget::default()
        },
        ..SearchConfig::default()
    };
    let journal = [
        optimize(0, 1, None),
        JournalEntry::Prescribed {
            child: NodeId(1),
            prescriptions: prescriptions(&["a", "b", "c"]),
        },
        JournalEntry::Completed {
            child: NodeId(1),
            outcome: correct(1.25),
        },
        optimize(0, 2, Some((1, "b"))),
        JournalEntry::Completed {
            child: NodeId(2),
            outcome: correct(1.2),
        },
        optimize(0, 3, Some((2, "c"))),
        JournalEntry::Completed {
            child: NodeId(3),
            outcome: correct(1.2),
        },
    ];
    let mut search = Search::replay(config, 3, &journal).unwrap();
    let mut parents = Vec::new();
    for _ in 0..4 {
        let NextJob::Expand(job) = search.next_job(Duration::ZERO) else {
            panic!("no job");
        };
        if job.prescription.is_none() {
            search
                .prescribe(job.child, prescriptions(&["x", "y", "z"]))
                .unwrap();
        }
        parents.push(job.parent);
    }
    assert_eq!(search.next_job(Duration::ZERO), NextJob::Wait);
    parents
}

#[test]
fn virtual_loss_spreads_concurrent_selections() {
    for policy in [
        Policy::Uct { exploration: 1.0 },
        Policy::Puct { exploration: 1.0 },
    ] {
        let spread = parents_of_four_concurrent_jobs(policy, Some(-1.0));
        let piled = parents_of_four_concurrent_jobs(policy, None);
        println!("{policy:?}: with virtual loss {spread:?}, without {piled:?}");
        let mut distinct = spread.clone();
        distinct.sort();
        distinct.dedup();
        assert!(distinct.len() >= 3, "{policy:?}: {spread:?}");
        // Without it, every selection descends the same path to the best child.
        assert!(piled.iter().all(|parent| *parent == NodeId(1)), "{piled:?}");
    }
}

#[test]
fn jobs_tell_the_judge_what_siblings_and_ancestors_tried() {
    let mut judge_calls = 0;
    let mut reused = 0;
    for seed in 0..60 {
        let landscape = RandomLandscape {
            fail_rate: 0.4,
            ..RandomLandscape::new(seed)
        };
        let (search, journal) = simulate(
            config(Policy::Puct { exploration: 0.5 }, 40, 1),
            seed,
            landscape,
            0.15,
        );
        let mut replayed = Search::new(search.config().clone(), seed).unwrap();
        for entry in &journal {
            if let JournalEntry::Issued { job } = entry {
                let tree = replayed.tree();
                if job.kind == JobKind::Optimize {
                    for sibling in tree.children(job.parent).filter(|c| !abandoned(c)) {
                        let told = job
                            .sibling_strategies
                            .iter()
                            .find(|tried| tried.node == sibling.id)
                            .unwrap_or_else(|| {
                                panic!("seed {seed}: sibling {} untold", sibling.id)
                            });
                        assert_eq!(Some(&told.strategy), sibling.strategy.as_ref());
                        match &sibling.evaluation {
                            Some(Evaluation::Failed { reason }) => assert_eq!(
                                told.result,
                                TriedResult::Failed {
                                    reason: reason.clone()
                                }
                            ),
                            Some(Evaluation::Correct { speedup, .. }) => assert!(matches!(
                                told.result,
                                TriedResult::Correct { speedup: s, .. } if s == *speedup
                            )),
                            Some(Evaluation::Unverified { reason }) => assert_eq!(
                                told.result,
                                TriedResult::Unverified {
                                    reason: reason.clone()
                                }
                            ),
                            None => assert_eq!(told.result, TriedResult::Pending),
                        }
                    }
                    // The Judge is asked only when the parent has no prescription left; else
                    // the job takes the best-ranked one no live child has taken.
                    let parent = tree.get(job.parent).unwrap();
                    let taken: Vec<usize> = tree
                        .children(parent.id)
                        .filter(|c| !abandoned(c))
                        .filter_map(|c| match c.kind {
                            NodeKind::Optimize { prescription } => prescription,
                            _ => None,
                        })
                        .collect();
                    let free = (0..parent.prescriptions.len()).find(|i| !taken.contains(i));
                    match &job.prescription {
                        Some(assigned) => {
                            reused += 1;
                            assert_eq!(assigned.index, free, "seed {seed}");
                            assert_eq!(
                                assigned.strategy,
                                parent.prescriptions[free.unwrap()].strategy
                            );
                        }
                        None => {
                            judge_calls += 1;
                            assert_eq!(free, None, "seed {seed}: asked the Judge again");
                        }
                    }
                }
                let path: Vec<NodeId> = tree.path(job.parent).into_iter().skip(1).collect();
                let told: Vec<NodeId> = job.ancestor_strategies.iter().map(|t| t.node).collect();
                assert_eq!(told, path, "seed {seed}");
            }
            replayed.apply(entry).unwrap();
        }
        // No two children of a node apply the same prescription (abandoned ones give theirs
        // back).
        for node in search.tree().nodes() {
            let mut taken: Vec<usize> = search
                .tree()
                .children(node.id)
                .filter(|c| !abandoned(c))
                .filter_map(|c| match c.kind {
                    NodeKind::Optimize { prescription } => prescription,
                    _ => None,
                })
                .collect();
            let count = taken.len();
            taken.sort();
            taken.dedup();
            assert_eq!(taken.len(), count, "seed {seed}: node {}", node.id);
        }
    }
    println!("{judge_calls} Judge calls, {reused} optimizations from stored prescriptions");
    assert!(reused > 100 && judge_calls > 100);
}

#[test]
fn misuse_is_refused() {
    let mut search = Search::new(SearchConfig::default(), 0).unwrap();
    let NextJob::Expand(job) = search.next_job(Duration::ZERO) else {
        panic!("no first job");
    };
    assert!(search.complete(NodeId(7), correct(1.0)).is_err());
    assert!(search.prescribe(job.child, Vec::new()).is_err());
    let bad = Outcome {
        evaluation: Evaluation::Correct {
            speedup: f64::NAN,
            fraction_of_sol: None,
        },
        ..correct(1.0)
    };
    assert!(search.complete(job.child, bad).is_err());
    search.prescribe(job.child, prescriptions(&["a"])).unwrap();
    assert!(search.prescribe(job.child, prescriptions(&["b"])).is_err());
    search.complete(job.child, correct(1.5)).unwrap();
    assert!(search.complete(job.child, correct(1.5)).is_err());
    assert!(
        search
            .abandon(job.child, "late".into(), Spend::ZERO)
            .is_err()
    );
    // A journal entry that does not fit the tree is refused, not applied.
    assert!(search.apply(&optimize(0, 9, None)).is_err());
    assert!(search.apply(&optimize(0, 2, Some((5, "nope")))).is_err());
    assert_eq!(search.tree().nodes().len(), 2);
}

#[test]
fn a_node_whose_expansions_keep_failing_before_evaluation_is_left_alone() {
    let failed = |reason: &str| Outcome {
        evaluation: Evaluation::Failed {
            reason: reason.into(),
        },
        cost: Spend::ZERO,
    };
    for policy in policies() {
        let mut search = Search::new(config(policy, 50, 3), 3).unwrap();
        // One correct kernel from the reference, whose every expansion then fails before
        // evaluation: after three it is left alone, and the reference is asked again.
        let NextJob::Expand(first) = search.next_job(Duration::ZERO) else {
            panic!("{policy:?}")
        };
        search
            .prescribe(first.child, prescriptions(&["a", "b", "c", "d", "e"]))
            .unwrap();
        search.complete(first.child, correct(1.5)).unwrap();
        let mut from_kernel = 0;
        for _ in 0..12 {
            let NextJob::Expand(job) = search.next_job(Duration::ZERO) else {
                break;
            };
            if job.parent == first.child {
                from_kernel += 1;
                search
                    .abandon(job.child, "unusable reply".into(), Spend::ZERO)
                    .unwrap();
            } else {
                assert_eq!(job.parent, NodeId::ROOT, "{policy:?}");
                search
                    .abandon(job.child, "unusable reply".into(), Spend::ZERO)
                    .unwrap();
            }
        }
        assert_eq!(
            from_kernel,
            kforge::search::MAX_ABANDONED_PER_NODE,
            "{policy:?}"
        );
    }
    // A failed kernel whose repairs keep failing before evaluation is not asked forever.
    let mut search = Search::new(config(Policy::Uct { exploration: 0.5 }, 50, 5), 3).unwrap();
    let NextJob::Expand(first) = search.next_job(Duration::ZERO) else {
        panic!()
    };
    search
        .prescribe(first.child, prescriptions(&["a"]))
        .unwrap();
    search
        .complete(first.child, failed("compile error"))
        .unwrap();
    let mut repairs = 0;
    for _ in 0..12 {
        let NextJob::Expand(job) = search.next_job(Duration::ZERO) else {
            break;
        };
        if matches!(job.kind, JobKind::Repair { .. }) {
            repairs += 1;
        }
        search
            .abandon(job.child, "unusable reply".into(), Spend::ZERO)
            .unwrap();
    }
    assert_eq!(repairs, kforge::search::MAX_ABANDONED_PER_NODE);
}
