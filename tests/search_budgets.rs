//! Budgets hold exactly: under many seeds, policies and limits, the search never passes its
//! node, dollar, token, wall-time or concurrency budget, and when it stops for one of them
//! there was truly no room for another job.

use std::time::Duration;

use kforge::search::sim::{RandomLandscape, SimSettings, Simulator, unit_hash};
use kforge::search::{
    Budget, Dollars, DoneReason, JournalEntry, Policy, Search, SearchConfig, SearchEvent, Spend,
};

fn policy(seed: u64) -> Policy {
    match seed % 3 {
        0 => Policy::Puct { exploration: 0.5 },
        1 => Policy::Uct { exploration: 0.5 },
        _ => Policy::LinearChain,
    }
}

/// Limits drawn from the seed, each sometimes the one that binds.
fn budget(seed: u64, job_bound: Spend) -> Budget {
    let draw = |salt| unit_hash(seed, &[salt]);
    let binds = |salt| draw(salt) < 0.6;
    Budget {
        max_nodes: 3 + (draw(1) * 50.0) as u32,
        max_in_flight: 1 + (draw(2) * 6.0) as u32,
        max_dollars: binds(3).then(|| Dollars::from_dollars(0.1 + draw(4) * 1.5).unwrap()),
        max_tokens: binds(5).then(|| 20_000 + (draw(6) * 300_000.0) as u64),
        max_wall_seconds: binds(7).then(|| 200.0 + draw(8) * 3000.0),
        stop_at_fraction_of_sol: None,
        job_bound: Some(job_bound),
        max_abandoned: 1 + (draw(9) * 10.0) as u32,
    }
}

struct Run {
    search: Search,
    reason: DoneReason,
    journal: Vec<JournalEntry>,
    end: Duration,
    peak_in_flight: usize,
}

fn run(seed: u64) -> Run {
    let settings = SimSettings {
        seed,
        abandon_rate: if seed.is_multiple_of(4) { 0.2 } else { 0.0 },
        ..SimSettings::default()
    };
    let config = SearchConfig {
        policy: policy(seed),
        budget: budget(seed, settings.max_job_cost),
        ..SearchConfig::default()
    };
    let landscape = RandomLandscape::new(seed);
    let mut search = Search::new(config, seed).unwrap();
    let mut sim = Simulator::new(&landscape, settings);
    let reason = sim.run(&mut search).unwrap();
    Run {
        reason,
        journal: sim.journal().to_vec(),
        end: sim.now(),
        peak_in_flight: sim.peak_in_flight(),
        search,
    }
}

#[test]
fn budgets_hold_exactly_under_many_seeds() {
    let mut reasons = std::collections::BTreeMap::new();
    for seed in 0..300 {
        let Run {
            search,
            reason,
            journal,
            end,
            peak_in_flight,
        } = run(seed);
        let budget = &search.config().budget;
        let bound = budget.job_bound.unwrap();
        *reasons.entry(format!("{reason:?}")).or_insert(0) += 1;

        // Nodes, and concurrency at every moment of the journal.
        assert!(search.candidates() <= budget.max_nodes, "seed {seed}");
        let mut in_flight = 0u32;
        let mut issued_at = std::collections::BTreeMap::new();
        for entry in &journal {
            match entry {
                JournalEntry::Issued { job } => {
                    in_flight += 1;
                    assert!(in_flight <= budget.max_in_flight, "seed {seed}");
                    if search.config().policy == Policy::LinearChain {
                        assert_eq!(in_flight, 1, "seed {seed}: the chain ran two jobs");
                    }
                    issued_at.insert(job.child, job.issued_at.as_secs_f64());
                }
                JournalEntry::Completed { child, outcome } => {
                    in_flight -= 1;
                    if let Some(max_wall) = budget.max_wall_seconds {
                        assert!(issued_at[child] + outcome.cost.seconds <= max_wall);
                    }
                }
                JournalEntry::Abandoned { child, cost, .. } => {
                    in_flight -= 1;
                    if let Some(max_wall) = budget.max_wall_seconds {
                        assert!(issued_at[child] + cost.seconds <= max_wall);
                    }
                }
                JournalEntry::Prescribed { .. } => {}
            }
        }
        assert_eq!(in_flight, 0);
        assert!(peak_in_flight as u32 <= budget.max_in_flight);

        // Money, tokens and time, exactly.
        let spent = search.spent();
        if let Some(max) = budget.max_dollars {
            assert!(
                spent.dollars <= max,
                "seed {seed}: {} > {max}",
                spent.dollars
            );
        }
        if let Some(max) = budget.max_tokens {
            assert!(spent.tokens <= max, "seed {seed}: {} > {max}", spent.tokens);
        }
        if let Some(max_wall) = budget.max_wall_seconds {
            assert!(end.as_secs_f64() <= max_wall, "seed {seed}");
        }

        // And the search stopped only when there was no room for one more job.
        match reason {
            DoneReason::NodeBudget => assert_eq!(search.candidates(), budget.max_nodes),
            DoneReason::DollarBudget => assert!(
                spent.dollars.nanos() + bound.dollars.nanos() > budget.max_dollars.unwrap().nanos()
            ),
            DoneReason::TokenBudget => {
                assert!(spent.tokens + bound.tokens > budget.max_tokens.unwrap())
            }
            DoneReason::WallTime => {
                assert!(end.as_secs_f64() + bound.seconds > budget.max_wall_seconds.unwrap())
            }
            DoneReason::ExpansionsKeepFailing => {
                let abandoned = journal
                    .iter()
                    .filter(|e| matches!(e, JournalEntry::Abandoned { .. }))
                    .count();
                // Jobs still in flight when the limit hit may fail too.
                assert!(abandoned as u32 >= budget.max_abandoned);
            }
            DoneReason::Exhausted => {
                // The tree runs dry only where nodes were left alone after their expansions
                // kept failing before evaluation.
                let left_alone = search.tree().nodes().iter().any(|node| {
                    search
                        .tree()
                        .children(node.id)
                        .filter(|c| matches!(c.state, kforge::search::NodeState::Abandoned { .. }))
                        .count()
                        >= kforge::search::MAX_ABANDONED_PER_NODE
                });
                assert!(
                    left_alone,
                    "seed {seed}: exhausted with every node still open"
                );
            }
            DoneReason::NearSpeedOfLight => {
                panic!("seed {seed}: unexpected {reason:?}")
            }
        }
    }
    println!("stop reasons over 300 runs: {reasons:?}");
    // Every limit was the binding one in some runs, so each check above was exercised.
    for reason in [
        "NodeBudget",
        "DollarBudget",
        "TokenBudget",
        "WallTime",
        "ExpansionsKeepFailing",
    ] {
        assert!(reasons.contains_key(reason), "no run stopped on {reason}");
    }
}

#[test]
fn the_concurrency_limit_is_used_not_just_respected() {
    for max_in_flight in 1..=4 {
        let settings = SimSettings::default();
        let config = SearchConfig {
            budget: Budget {
                max_nodes: 60,
                max_in_flight,
                stop_at_fraction_of_sol: None,
                ..Budget::default()
            },
            ..SearchConfig::default()
        };
        let mut search = Search::new(config, 1).unwrap();
        let landscape = RandomLandscape::new(1);
        let mut sim = Simulator::new(&landscape, settings);
        sim.run(&mut search).unwrap();
        assert_eq!(sim.peak_in_flight() as u32, max_in_flight);
    }
}

#[test]
fn stops_early_near_the_speed_of_light_and_reports_each_new_best() {
    for seed in 0..50 {
        let landscape = RandomLandscape {
            sol_speedup: 2.5,
            ..RandomLandscape::new(seed)
        };
        let config = SearchConfig {
            budget: Budget {
                max_nodes: 200,
                stop_at_fraction_of_sol: Some(0.9),
                ..Budget::default()
            },
            ..SearchConfig::default()
        };
        let mut search = Search::new(config, seed).unwrap();
        let mut sim = Simulator::new(&landscape, SimSettings::default());
        let reason = sim.run(&mut search).unwrap();
        assert_eq!(reason, DoneReason::NearSpeedOfLight, "seed {seed}");
        let best = search.best().unwrap();
        assert!(best.fraction_of_sol().unwrap() >= 0.9);

        // No job was handed out after the first candidate that reached the target.
        let journal = sim.journal();
        let reached = journal
            .iter()
            .position(|entry| match entry {
                JournalEntry::Completed { outcome, .. } => matches!(
                    outcome.evaluation,
                    kforge::search::Evaluation::Correct { fraction_of_sol: Some(f), .. } if f >= 0.9
                ),
                _ => false,
            })
            .unwrap();
        assert!(
            journal[reached..]
                .iter()
                .all(|entry| !matches!(entry, JournalEntry::Issued { .. }))
        );

        // NewBest came for each strictly faster correct candidate, in order, ending at the best.
        let bests: Vec<f64> = sim
            .events()
            .iter()
            .filter_map(|event| match event {
                SearchEvent::NewBest { speedup, .. } => Some(*speedup),
                SearchEvent::BranchDead { .. } => None,
            })
            .collect();
        assert!(bests.windows(2).all(|pair| pair[0] < pair[1]));
        assert_eq!(bests.last(), best.speedup().as_ref());
    }
}
