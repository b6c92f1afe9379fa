//! Determinism and resumption: the same seed and the same outcomes give the same tree, and a
//! run killed with jobs in flight, restored from its snapshot or replayed from its journal,
//! ends exactly where the uninterrupted run ends.

use std::time::Duration;

use kforge::search::sim::{RandomLandscape, SimSettings, Simulator};
use kforge::search::{
    AssignedPrescription, Budget, Evaluation, Job, JobKind, JournalEntry, NextJob, NodeId,
    NodeState, Outcome, Policy, Prescription, Search, SearchConfig, SearchError, Spend,
};

fn config(seed: u64) -> SearchConfig {
    let policy = match seed % 3 {
        0 => Policy::Puct { exploration: 0.5 },
        1 => Policy::Uct { exploration: 0.7 },
        _ => Policy::LinearChain,
    };
    SearchConfig {
        policy,
        mean_weight: if seed.is_multiple_of(2) { 0.0 } else { 0.3 },
        budget: Budget {
            max_nodes: 45,
            max_in_flight: 1 + (seed % 4) as u32,
            stop_at_fraction_of_sol: None,
            ..Budget::default()
        },
        ..SearchConfig::default()
    }
}

fn settings(seed: u64) -> SimSettings {
    SimSettings {
        seed,
        abandon_rate: 0.1,
        ..SimSettings::default()
    }
}

fn landscape(seed: u64) -> RandomLandscape {
    RandomLandscape {
        fail_rate: 0.3,
        ..RandomLandscape::new(seed)
    }
}

fn uninterrupted(seed: u64) -> (Search, Vec<JournalEntry>) {
    let landscape = landscape(seed);
    let mut search = Search::new(config(seed), seed).unwrap();
    let mut sim = Simulator::new(&landscape, settings(seed));
    sim.run(&mut search).unwrap();
    (search, sim.journal().to_vec())
}

#[test]
fn same_seed_and_outcomes_give_the_same_tree() {
    for seed in 0..30 {
        let (first, first_journal) = uninterrupted(seed);
        let (second, second_journal) = uninterrupted(seed);
        assert_eq!(first, second, "seed {seed}");
        assert_eq!(first_journal, second_journal, "seed {seed}");
        assert_eq!(first.to_json().unwrap(), second.to_json().unwrap());
    }
}

/// Two equally good children under UCT: the seed breaks the tie, the same seed always the
/// same way.
#[test]
fn the_seed_breaks_ties_and_only_the_seed() {
    let config = SearchConfig {
        policy: Policy::Uct { exploration: 1.0 },
        ..SearchConfig::default()
    };
    let issue = |parent, child, prescription: Option<(usize, &str)>| JournalEntry::Issued {
        job: Job {
            parent: NodeId(parent),
            child: NodeId(child),
            kind: JobKind::Optimize,
            prescription: prescription.map(|(index, strategy)| AssignedPrescription {
                index: Some(index),
                strategy: strategy.into(),
            }),
            sibling_strategies: Vec::new(),
            ancestor_strategies: Vec::new(),
            issued_at: Duration::ZERO,
        },
    };
    let journal = [
        issue(0, 1, None),
        JournalEntry::Prescribed {
            child: NodeId(1),
            prescriptions: ["a", "b"]
                .map(|strategy| Prescription {
                    strategy: strategy.into(),
                    prior: None,
                })
                .into(),
        },
        JournalEntry::Completed {
            child: NodeId(1),
            outcome: equal_outcome(),
        },
        issue(0, 2, Some((1, "b"))),
        JournalEntry::Completed {
            child: NodeId(2),
            outcome: equal_outcome(),
        },
    ];
    // The root has 3 visits and two children of 1.2x: widening allows no third child yet.
    let pick = |seed| {
        let mut search = Search::replay(config.clone(), seed, &journal).unwrap();
        match search.next_job(Duration::ZERO) {
            NextJob::Expand(job) => job.parent,
            other => panic!("{other:?}"),
        }
    };
    let picks: Vec<NodeId> = (0..32).map(pick).collect();
    assert!(
        picks.contains(&NodeId(1)) && picks.contains(&NodeId(2)),
        "{picks:?}"
    );
    assert!((0..32).all(|seed| pick(seed) == picks[seed as usize]));
}

fn equal_outcome() -> Outcome {
    Outcome {
        evaluation: Evaluation::Correct {
            speedup: 1.2,
            fraction_of_sol: None,
        },
        cost: Spend::ZERO,
    }
}

#[test]
fn a_run_restored_mid_way_ends_identical() {
    let mut restored_with_jobs_in_flight = 0;
    for seed in 0..60 {
        let (expected, expected_journal) = uninterrupted(seed);
        let landscape = landscape(seed);
        let stop_after = 10 + (seed as usize * 7) % 40;

        let mut search = Search::new(config(seed), seed).unwrap();
        let mut sim = Simulator::new(&landscape, settings(seed));
        for _ in 0..stop_after {
            if sim.step(&mut search).unwrap().is_some() {
                break;
            }
        }
        let in_flight = search.in_flight().len();
        if in_flight > 0 {
            restored_with_jobs_in_flight += 1;
        }
        let logged = sim.journal().len();

        // Kill: keep only the snapshot and the journal.
        let snapshot = search.to_json().unwrap();
        let live = search.clone();
        drop(search);
        let mut restored = Search::from_json(&snapshot).unwrap();
        assert_eq!(restored, live, "seed {seed}: snapshot lost state");
        let mut replayed = Search::replay(config(seed), seed, &sim.journal()[..logged]).unwrap();
        assert_eq!(replayed, live, "seed {seed}: journal lost state");
        assert_eq!(restored.in_flight().len(), in_flight);

        // Continue both with the same outcomes; both end where the uninterrupted run ended.
        let mut after_snapshot = Simulator::new(&landscape, settings(seed)).starting_at(sim.now());
        let mut after_replay = Simulator::new(&landscape, settings(seed)).starting_at(sim.now());
        after_snapshot.run(&mut restored).unwrap();
        after_replay.run(&mut replayed).unwrap();
        assert_eq!(restored, expected, "seed {seed}: snapshot resume diverged");
        assert_eq!(replayed, expected, "seed {seed}: journal resume diverged");
        let mut journal = sim.journal().to_vec();
        journal.extend_from_slice(after_snapshot.journal());
        assert_eq!(journal, expected_journal, "seed {seed}");
    }
    assert!(restored_with_jobs_in_flight > 20);
}

#[test]
fn the_journal_and_snapshot_survive_json() {
    for seed in 0..20 {
        let (search, journal) = uninterrupted(seed);
        let lines: Vec<String> = journal
            .iter()
            .map(|entry| serde_json::to_string(entry).unwrap())
            .collect();
        let parsed: Vec<JournalEntry> = lines
            .iter()
            .map(|line| serde_json::from_str(line).unwrap())
            .collect();
        assert_eq!(parsed, journal);
        let replayed = Search::replay(config(seed), seed, &parsed).unwrap();
        assert_eq!(replayed, search);
    }
}

#[test]
fn statistics_are_rebuilt_not_trusted() {
    let (search, _) = uninterrupted(4);
    let mut json: serde_json::Value = serde_json::from_str(&search.to_json().unwrap()).unwrap();
    let nodes = json["tree"]["nodes"].as_array_mut().unwrap();
    for node in nodes.iter_mut() {
        node["stats"]["visits"] = 999.into();
        node["stats"]["best_value"] = 42.0.into();
    }
    let restored = Search::from_json(&json.to_string()).unwrap();
    assert_eq!(restored, search);

    // A snapshot whose jobs in flight do not match its nodes is refused.
    let mut json: serde_json::Value = serde_json::from_str(&search.to_json().unwrap()).unwrap();
    json["tree"]["nodes"][1]["state"] = serde_json::json!({ "state": "in_flight" });
    assert!(matches!(
        Search::from_json(&json.to_string()),
        Err(SearchError::Snapshot(_))
    ));
    assert!(
        search
            .tree()
            .nodes()
            .iter()
            .all(|node| node.state != NodeState::InFlight)
    );
}
