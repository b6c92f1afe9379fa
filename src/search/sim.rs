//! A simulated evaluator and orchestrator, so the search can be tested (and tuned) without LLMs
//! or a GPU.
//!
//! A [`Landscape`] is a function from the path of prescriptions (and repairs) that leads from
//! the reference to a kernel to that kernel's evaluation, plus the Judge's ranked prescriptions
//! at each node. The [`Simulator`] plays the orchestrator: it takes every job the search hands
//! out, answers the Judge's part partway through the job and the evaluation at its end (or
//! abandons it, like an LLM error), in simulated time. Everything it decides is a function of
//! its seed and the job's node, never of its own history, so a simulation can be stopped, the
//! search restored from a snapshot or a journal, and the simulation continued as if nothing had
//! happened.

use std::time::Duration;

use super::SearchError;
use super::budget::{Dollars, DoneReason, Spend};
use super::engine::{Job, JobKind, JournalEntry, NextJob, Outcome, Search, SearchEvent};
use super::tree::{Evaluation, NodeId, NodeKind, Prescription, Tree};

/// One edge of a path from the reference.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Step {
    /// The parent's prescription with this index.
    Optimize(usize),
    /// The repair attempt with this number.
    Repair(u32),
}

/// A synthetic optimization problem.
pub trait Landscape {
    /// The Judge's ranked prescriptions for the kernel at `path`, after the `given` it already
    /// gave for that kernel.
    fn prescriptions(&self, path: &[Step], given: usize) -> Vec<Prescription>;
    /// The evaluation of the kernel at `path`.
    fn evaluate(&self, path: &[Step]) -> Evaluation;
}

/// The steps from the root to `id`; `None` if an optimization on the way has no prescription.
pub fn steps(tree: &Tree, id: NodeId) -> Option<Vec<Step>> {
    tree.path(id)
        .into_iter()
        .skip(1)
        .map(|node| match tree.get(node)?.kind {
            NodeKind::Optimize { prescription } => prescription.map(Step::Optimize),
            NodeKind::Repair { attempt } => Some(Step::Repair(attempt)),
            NodeKind::Root => None,
        })
        .collect()
}

/// A uniform number in [0, 1) determined by `seed` and `words` (splitmix64 over the words).
pub fn unit_hash(seed: u64, words: &[u64]) -> f64 {
    let mut state = seed;
    for word in words {
        state = splitmix64(state ^ word.wrapping_mul(0x9e37_79b9_7f4a_7c15));
    }
    (splitmix64(state) >> 11) as f64 / (1u64 << 53) as f64
}

fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// `path` as hash words, with a salt so one path gives several independent draws.
pub fn path_words(path: &[Step], salt: u64) -> Vec<u64> {
    let mut words = vec![salt];
    words.extend(path.iter().map(|step| match step {
        Step::Optimize(index) => 2 * *index as u64,
        Step::Repair(attempt) => 2 * u64::from(*attempt) + 1,
    }));
    words
}

/// A random landscape: each prescription multiplies the speedup by a random factor (better
/// ranks do better on average, gains shrink with depth), some edits break the kernel, and a
/// repair recovers what the broken edit was worth with some probability.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RandomLandscape {
    pub seed: u64,
    /// Chance that an optimization fails (compile error, mismatch).
    pub fail_rate: f64,
    /// Chance that a repair succeeds.
    pub repair_rate: f64,
    /// Prescriptions per Judge call.
    pub branching: usize,
    /// The speedup at the speed of light (fraction of SOL = speedup / this, at most 1).
    pub sol_speedup: f64,
}

impl RandomLandscape {
    pub fn new(seed: u64) -> RandomLandscape {
        RandomLandscape {
            seed,
            fail_rate: 0.25,
            repair_rate: 0.5,
            branching: 3,
            sol_speedup: 20.0,
        }
    }
}

impl Landscape for RandomLandscape {
    fn prescriptions(&self, path: &[Step], given: usize) -> Vec<Prescription> {
        (given..given + self.branching)
            .map(|index| Prescription {
                strategy: format!("edit {index} at depth {}", path.len()),
                prior: None,
            })
            .collect()
    }

    fn evaluate(&self, path: &[Step]) -> Evaluation {
        let mut log_speedup = 0.0;
        let mut optimizations = 0;
        for (at, step) in path.iter().enumerate() {
            if let Step::Optimize(index) = step {
                let draw = unit_hash(self.seed, &path_words(&path[..=at], 1));
                let gain = draw * 0.9 - 0.3 - 0.06 * *index as f64;
                log_speedup += gain * 0.85f64.powi(optimizations);
                optimizations += 1;
            }
        }
        let failed = match path.last() {
            None => false,
            Some(Step::Optimize(_)) => unit_hash(self.seed, &path_words(path, 2)) < self.fail_rate,
            Some(Step::Repair(_)) => unit_hash(self.seed, &path_words(path, 3)) >= self.repair_rate,
        };
        if failed {
            return Evaluation::Failed {
                reason: format!("output mismatch after {} steps", path.len()),
            };
        }
        let speedup = f64::exp(log_speedup);
        Evaluation::Correct {
            speedup,
            fraction_of_sol: Some((speedup / self.sol_speedup).min(1.0)),
        }
    }
}

/// How the simulated orchestrator behaves.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SimSettings {
    pub seed: u64,
    /// The dearest a job can be; each job costs between a quarter of it and all of it.
    pub max_job_cost: Spend,
    /// Chance that a job's LLM calls fail and the job is abandoned halfway.
    pub abandon_rate: f64,
}

impl Default for SimSettings {
    fn default() -> SimSettings {
        SimSettings {
            seed: 0,
            max_job_cost: Spend {
                dollars: Dollars::from_nanos(50_000_000),
                tokens: 12_000,
                seconds: 180.0,
            },
            abandon_rate: 0.0,
        }
    }
}

/// Why a simulation could not go on.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    #[error(transparent)]
    Search(#[from] SearchError),
    #[error("the search waits with nothing in flight")]
    Stalled,
    #[error("node {0} was evaluated before it was prescribed")]
    Unprescribed(NodeId),
}

/// The simulated orchestrator (see the module doc).
pub struct Simulator<'a, L: Landscape> {
    landscape: &'a L,
    settings: SimSettings,
    now: Duration,
    journal: Vec<JournalEntry>,
    events: Vec<SearchEvent>,
    peak_in_flight: usize,
}

enum Happening {
    JudgeAnswers,
    Evaluated,
    LlmError,
}

impl<'a, L: Landscape> Simulator<'a, L> {
    pub fn new(landscape: &'a L, settings: SimSettings) -> Simulator<'a, L> {
        Simulator {
            landscape,
            settings,
            now: Duration::ZERO,
            journal: Vec::new(),
            events: Vec::new(),
            peak_in_flight: 0,
        }
    }

    /// Continues a run from run time `now` (a resumed run's clock goes on, it does not restart).
    pub fn starting_at(self, now: Duration) -> Simulator<'a, L> {
        Simulator { now, ..self }
    }

    /// Simulated run time.
    pub fn now(&self) -> Duration {
        self.now
    }

    /// Every journal entry the search produced, in order.
    pub fn journal(&self) -> &[JournalEntry] {
        &self.journal
    }

    /// Every event completions returned, in order.
    pub fn events(&self) -> &[SearchEvent] {
        &self.events
    }

    /// The most jobs that were in flight at once.
    pub fn peak_in_flight(&self) -> usize {
        self.peak_in_flight
    }

    /// What job `child` costs and how long it takes.
    pub fn cost(&self, child: NodeId) -> Spend {
        let draw = |salt| 0.25 + 0.75 * unit_hash(self.settings.seed, &[salt, u64::from(child.0)]);
        let max = self.settings.max_job_cost;
        Spend {
            dollars: Dollars::from_nanos((max.dollars.nanos() as f64 * draw(10)) as u64),
            tokens: (max.tokens as f64 * draw(11)) as u64,
            seconds: max.seconds * draw(12),
        }
    }

    /// Runs until the search is done and nothing is in flight.
    pub fn run(&mut self, search: &mut Search) -> Result<DoneReason, SimError> {
        loop {
            if let Some(reason) = self.step(search)? {
                return Ok(reason);
            }
        }
    }

    /// Hands out every job the search allows now, then lets the earliest thing in flight
    /// happen. `Some(reason)` once the search is done and nothing is in flight.
    pub fn step(&mut self, search: &mut Search) -> Result<Option<DoneReason>, SimError> {
        loop {
            let next = search.next_job(self.now);
            self.journal.extend(search.drain_journal());
            match next {
                NextJob::Expand(_) => {
                    self.peak_in_flight = self.peak_in_flight.max(search.in_flight().len());
                }
                NextJob::Wait => break,
                NextJob::Done(reason) if search.in_flight().is_empty() => {
                    return Ok(Some(reason));
                }
                NextJob::Done(_) => break,
            }
        }
        let Some((at, job, happening)) = search
            .in_flight()
            .iter()
            .map(|job| {
                let (at, happening) = self.schedule(job);
                (at, job.clone(), happening)
            })
            .min_by(|a, b| a.0.total_cmp(&b.0).then(a.1.child.cmp(&b.1.child)))
        else {
            return Err(SimError::Stalled);
        };
        self.now = self.now.max(Duration::from_secs_f64(at));
        match happening {
            Happening::JudgeAnswers => {
                let prescriptions = match job.kind {
                    JobKind::Optimize => {
                        let tree = search.tree();
                        let path =
                            steps(tree, job.parent).ok_or(SimError::Unprescribed(job.parent))?;
                        let given = tree.get(job.parent).map_or(0, |p| p.prescriptions.len());
                        self.landscape.prescriptions(&path, given)
                    }
                    JobKind::Repair { attempt } => vec![Prescription {
                        strategy: format!(
                            "repair {attempt}: fix what node {} got wrong",
                            job.parent
                        ),
                        prior: None,
                    }],
                };
                search.prescribe(job.child, prescriptions)?;
            }
            Happening::Evaluated => {
                let path =
                    steps(search.tree(), job.child).ok_or(SimError::Unprescribed(job.child))?;
                let outcome = Outcome {
                    evaluation: self.landscape.evaluate(&path),
                    cost: self.cost(job.child),
                };
                let events = search.complete(job.child, outcome)?;
                self.events.extend(events);
            }
            Happening::LlmError => {
                let full = self.cost(job.child);
                let half = Spend {
                    dollars: Dollars::from_nanos(full.dollars.nanos() / 2),
                    tokens: full.tokens / 2,
                    seconds: full.seconds / 2.0,
                };
                search.abandon(job.child, "the Coder's reply held no code".into(), half)?;
            }
        }
        self.journal.extend(search.drain_journal());
        Ok(None)
    }

    /// When the next thing happens to a job in flight, in run seconds: the Judge answers a
    /// third of the way in, the evaluation arrives at the end, an LLM error halfway.
    fn schedule(&self, job: &Job) -> (f64, Happening) {
        let start = job.issued_at.as_secs_f64();
        let duration = self.cost(job.child).seconds;
        let errs = unit_hash(self.settings.seed, &[20, u64::from(job.child.0)])
            < self.settings.abandon_rate;
        if errs {
            (start + duration / 2.0, Happening::LlmError)
        } else if job.prescription.is_none() {
            (start + duration / 3.0, Happening::JudgeAnswers)
        } else {
            (start + duration, Happening::Evaluated)
        }
    }
}
