//! The reason kforge searches a tree: on a landscape whose top-ranked first prescription is a
//! dead end, the tree search finds the better branch that a linear Coder→Judge chain (CudaForge's
//! loop) with the same node budget never sees.

use kforge::search::sim::{Landscape, SimSettings, Simulator, Step, path_words, unit_hash};
use kforge::search::{
    Budget, Evaluation, NodeKind, Policy, Prescription, Search, SearchConfig, Tree,
};

/// From the reference (1×), the Judge's first prescription gives a quick 1.3× and nothing
/// below it ever beats that; its second gives only 1.1×, but its first edit below reaches 1.6×
/// and the one below that 3.5×, two levels under the second prescription. Further
/// prescriptions of the reference slow it down.
struct DeadEndFirst;

const TRAP: f64 = 1.3;
const PRIZE: f64 = 3.5;

impl Landscape for DeadEndFirst {
    fn prescriptions(&self, path: &[Step], given: usize) -> Vec<Prescription> {
        (given..given + 3)
            .map(|index| Prescription {
                strategy: format!("edit {index} after {path:?}"),
                prior: None,
            })
            .collect()
    }

    fn evaluate(&self, path: &[Step]) -> Evaluation {
        let noise = unit_hash(7, &path_words(path, 0));
        let edits: Vec<usize> = path
            .iter()
            .map(|step| match step {
                Step::Optimize(index) => *index,
                Step::Repair(_) => unreachable!("nothing fails on this landscape"),
            })
            .collect();
        let speedup = match edits.as_slice() {
            [] => 1.0,
            [0] => TRAP,
            [0, ..] => TRAP * (0.90 + 0.09 * noise),
            [1] => 1.1,
            [1, 0] => 1.6,
            [1, 0, 0] => PRIZE,
            [1, 0, 0, ..] => PRIZE * (0.95 + 0.04 * noise),
            [1, ..] => 1.1 * (0.90 + 0.09 * noise),
            _ => 0.8 + 0.15 * noise,
        };
        Evaluation::Correct {
            speedup,
            fraction_of_sol: Some(speedup / 20.0),
        }
    }
}

const NODES: u32 = 24;

fn run(policy: Policy, seed: u64) -> (f64, Tree) {
    let config = SearchConfig {
        policy,
        budget: Budget {
            max_nodes: NODES,
            max_in_flight: 4,
            ..Budget::default()
        },
        ..SearchConfig::default()
    };
    let mut search = Search::new(config, seed).unwrap();
    let settings = SimSettings {
        seed,
        ..SimSettings::default()
    };
    Simulator::new(&DeadEndFirst, settings)
        .run(&mut search)
        .unwrap();
    assert_eq!(search.candidates(), NODES);
    let best = search.best().and_then(|node| node.speedup()).unwrap();
    (best, search.tree().clone())
}

fn first_prescription_of_root_tried_first(tree: &Tree) -> bool {
    tree.children(tree.root().id)
        .next()
        .map(|child| &child.kind)
        == Some(&NodeKind::Optimize {
            prescription: Some(0),
        })
}

#[test]
fn tree_search_finds_the_branch_a_linear_chain_misses() {
    for seed in 0..16 {
        let (chain_best, chain_tree) = run(Policy::LinearChain, seed);
        let (puct_best, puct_tree) = run(SearchConfig::default().policy, seed);
        let (uct_best, _) = run(Policy::Uct { exploration: 0.5 }, seed);
        println!(
            "seed {seed:2}: {NODES} nodes: linear chain best {chain_best:.2}x, \
             PUCT best {puct_best:.2}x, UCT best {uct_best:.2}x"
        );
        // Both start where the Judge points: the trap.
        assert!(first_prescription_of_root_tried_first(&chain_tree));
        assert!(first_prescription_of_root_tried_first(&puct_tree));
        // The chain never leaves the first branch: every node is a single chain under it.
        assert!(chain_best <= TRAP, "seed {seed}: chain found {chain_best}");
        assert!(
            chain_tree
                .nodes()
                .iter()
                .all(|node| node.children.len() <= 1),
            "seed {seed}: the chain branched"
        );
        assert!(
            puct_best >= PRIZE * 0.95,
            "seed {seed}: PUCT found {puct_best}"
        );
        assert!(
            uct_best >= PRIZE * 0.95,
            "seed {seed}: UCT found {uct_best}"
        );
    }
}
