//! `kforge run`: the tuning loop. It drives the search ([`crate::search`]) with the agents
//! ([`crate::agents`]), the evaluator and the run directory ([`crate::store`]):
//!
//! ```text
//! search.next_job ──► job task: Judge (unless prescribed) ─► search.prescribe ─► Coder
//!        ▲                      ─► compile (in parallel) ─► GPU lock: verify, time, profile
//!        └──── search.complete / abandon ◄── the job's result (applied oldest first)
//! ```
//!
//! Several expansions run at once (their LLM calls overlap; compiles overlap the GPU work; the
//! GPU itself is taken by one measurement at a time). What they do to the search is applied in
//! one fixed order, so a run is a function of its seed and the replies it gets, not of timing,
//! and a killed run resumed from its log ends exactly where the uninterrupted run would:
//!
//! - prescriptions are applied in the order the jobs were handed out;
//! - results are applied oldest job first;
//! - new jobs are handed out only right after a result is applied, once every job in flight has
//!   its prescription (or has failed before getting one): a *refill*. Its start and end are
//!   logged, so a resume knows whether it stopped inside one.
//!
//! A resumed run replays the log into the search, re-runs the jobs that were in flight with the
//! same prompts, answers every LLM call the run already made from the run's own recording
//! (`llm.jsonl`: no call is paid twice), and reuses an evaluation already on disk.

pub mod command;
pub mod evaluator;
pub mod gate;
mod job;
pub mod models;
pub mod progress;
pub mod records;
pub mod session;
pub mod summary;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinSet;

use crate::agents::{Prompts, RunContext};
use crate::gpu::GpuInfo;
use crate::llm::{Agent, LlmClient, LlmError, RecordingClient, RunRecording, Sampling};
use crate::problem::{Baseline, ProblemBundle};
use crate::search::{
    AssignedPrescription, DoneReason, Evaluation, Job, JournalEntry, NextJob, NodeId, Outcome,
    Prescription, Search, SearchEvent, Spend,
};
use crate::store::{RunDir, StoreError};
use evaluator::{Evaluator, ProfileRecord};
use gate::{BudgetGate, GatedClient};
use models::{CallSite, Models};
use records::{RunEvent, RunHeader};

pub use job::search_evaluation;
pub use summary::Summary;

/// The file every LLM exchange of a run is appended to.
pub const RECORDING_FILE: &str = "llm.jsonl";
pub const TREE_FILE: &str = "tree.json";

/// Run time as the budgets see it.
pub trait Clock: Send + Sync {
    /// Time since the run began (a resumed run goes on from where it stopped).
    fn now(&self) -> Duration;
}

/// The wall clock, starting at `offset`.
pub struct SystemClock {
    started: Instant,
    offset: Duration,
}

impl SystemClock {
    pub fn starting_at(offset: Duration) -> SystemClock {
        SystemClock {
            started: Instant::now(),
            offset,
        }
    }
}

impl Clock for SystemClock {
    fn now(&self) -> Duration {
        self.offset + self.started.elapsed()
    }
}

/// Why a run stopped without finishing.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("the search refused a logged step: {0}")]
    Search(#[from] crate::search::SearchError),
    #[error("cannot set up the run's LLM recording: {0}")]
    Recording(#[from] LlmError),
    #[error("{0}")]
    JobsLost(String),
    #[error("interrupted; nothing is lost: continue with `kforge run --resume {0}`")]
    Interrupted(String),
}

/// Everything a run needs, built by [`command`] (or a test).
pub struct RunSetup {
    pub header: RunHeader,
    pub bundle: ProblemBundle,
    pub baseline: Option<Baseline>,
    pub prompts: Prompts,
    pub models: Arc<dyn Models>,
    pub evaluator: Arc<dyn Evaluator>,
    pub clock: Arc<dyn Clock>,
    pub prices: Arc<crate::llm::PriceTable>,
    pub progress: progress::Style,
    /// Stop (as if interrupted) on Ctrl-C.
    pub handle_ctrl_c: bool,
}

/// What the jobs share.
struct Shared {
    root: PathBuf,
    bundle: ProblemBundle,
    baseline: Option<Baseline>,
    gpu: Option<GpuInfo>,
    arch: String,
    prompts: Prompts,
    models: Arc<dyn Models>,
    evaluator: Arc<dyn Evaluator>,
    recording: Arc<RunRecording>,
    gate: Arc<BudgetGate>,
    clock: Arc<dyn Clock>,
    coder_sampling: Sampling,
    judge_sampling: Sampling,
    root_profile: ProfileRecord,
}

impl Shared {
    fn client(&self, agent: Agent, site: &CallSite<'_>) -> Result<Arc<dyn LlmClient>, LlmError> {
        let inner = self.models.client(agent, site)?;
        let recorded: Arc<dyn LlmClient> =
            Arc::new(RecordingClient::new(inner, self.recording.clone()));
        Ok(Arc::new(GatedClient::new(recorded, self.gate.clone())))
    }

    fn context(&self) -> RunContext<'_> {
        RunContext {
            problem: &self.bundle.spec,
            arch: &self.arch,
            gpu: self.gpu.as_ref(),
            baseline: self.baseline.as_ref(),
        }
    }
}

/// Where the loop answers a job's Judge step: what to apply, or why nothing.
type PrescriptionReply = oneshot::Sender<Result<AssignedPrescription, String>>;

/// What a job tells the loop.
enum JobMsg {
    /// The Judge answered; the loop applies it in order and replies with what to apply.
    Judged {
        child: NodeId,
        prescriptions: Vec<Prescription>,
        reply: PrescriptionReply,
    },
    Log(RunEvent),
    Finished {
        child: NodeId,
        result: JobResult,
        /// Time the job spent neither in LLM calls, nor evaluating, nor waiting its turn.
        overhead: Duration,
    },
}

enum JobResult {
    Completed { evaluation: Evaluation, cost: Spend },
    Abandoned { reason: String, cost: Spend },
}

/// Where a (resumed) run's loop stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Hand out jobs; `continuing` a refill the log shows was interrupted.
    Refill { continuing: bool },
    /// Wait for the oldest job's result.
    WaitOldest,
    /// Wait until every job in flight has its prescription, then refill.
    Barrier,
}

/// The phase a log ends in.
fn phase_of(events: &[RunEvent]) -> Phase {
    let last = events.iter().rev().find(|event| {
        matches!(
            event,
            RunEvent::RefillStarted
                | RunEvent::RefillEnded
                | RunEvent::Search {
                    entry: JournalEntry::Completed { .. } | JournalEntry::Abandoned { .. }
                }
        )
    });
    match last {
        None => Phase::Refill { continuing: false },
        Some(RunEvent::RefillStarted) => Phase::Refill { continuing: true },
        Some(RunEvent::RefillEnded) => Phase::WaitOldest,
        Some(_) => Phase::Barrier,
    }
}

/// What the jobs in flight at a kill had already paid for and will not pay again: the Judge's
/// calls of a job whose prescription was applied (a resumed job goes straight to the Coder;
/// everything else it re-asks is answered from the recording and counted then).
fn carried_spend(events: &[RunEvent]) -> BTreeMap<NodeId, Spend> {
    let prescribed: std::collections::BTreeSet<NodeId> = events
        .iter()
        .filter_map(|event| match event {
            RunEvent::Search {
                entry: JournalEntry::Prescribed { child, .. },
            } => Some(*child),
            _ => None,
        })
        .collect();
    let mut carried: BTreeMap<NodeId, Spend> = BTreeMap::new();
    for event in events {
        if let RunEvent::LlmCall {
            node, agent, spend, ..
        } = event
            && agent == Agent::Judge.name()
            && prescribed.contains(node)
        {
            let total = carried.entry(*node).or_insert(Spend::ZERO);
            *total = total.plus(*spend);
        }
    }
    carried
}

/// The run time a log had reached: the latest hand-out time it holds.
pub fn resumed_clock_offset(events: &[RunEvent]) -> Duration {
    events
        .iter()
        .filter_map(|event| match event {
            RunEvent::Search {
                entry: JournalEntry::Issued { job },
            } => Some(job.issued_at),
            _ => None,
        })
        .max()
        .unwrap_or_default()
}

struct Orchestrator {
    shared: Arc<Shared>,
    search: Search,
    dir: RunDir,
    tx: mpsc::UnboundedSender<JobMsg>,
    rx: mpsc::UnboundedReceiver<JobMsg>,
    tasks: JoinSet<()>,
    judged: BTreeMap<NodeId, (Vec<Prescription>, PrescriptionReply)>,
    finished: BTreeMap<NodeId, JobResult>,
    done: Option<DoneReason>,
    progress: progress::Progress,
    overhead: summary::Overhead,
    handle_ctrl_c: bool,
}

/// Starts a new run in `dir` (created by the caller, empty).
pub async fn start(setup: RunSetup, dir: RunDir) -> Result<Summary, RunError> {
    go(setup, dir, None).await
}

/// Continues the run in `dir` from its log (`events`, already read by [`RunDir::reopen`]).
pub async fn resume(
    setup: RunSetup,
    dir: RunDir,
    events: Vec<RunEvent>,
    torn_bytes: usize,
) -> Result<Summary, RunError> {
    go(setup, dir, Some((events, torn_bytes))).await
}

async fn go(
    setup: RunSetup,
    mut dir: RunDir,
    resumed: Option<(Vec<RunEvent>, usize)>,
) -> Result<Summary, RunError> {
    let root = dir.root().to_path_buf();
    let recording = Arc::new(RunRecording::open(
        &root.join(RECORDING_FILE),
        setup.prices.clone(),
    )?);
    let header = setup.header;
    let (search, phase) = match &resumed {
        None => {
            dir.append(&RunEvent::Started {
                header: Box::new(header.clone()),
            })?;
            (
                Search::new(header.config.clone(), header.seed)?,
                Phase::Refill { continuing: false },
            )
        }
        Some((events, torn_bytes)) => {
            let entries: Vec<&JournalEntry> = events
                .iter()
                .filter_map(|event| match event {
                    RunEvent::Search { entry } => Some(entry),
                    _ => None,
                })
                .collect();
            let search = Search::replay(header.config.clone(), header.seed, entries)?;
            dir.append(&RunEvent::Resumed {
                torn_bytes: *torn_bytes,
                budget: Some(header.config.budget.clone()),
            })?;
            // A run that had finished (or stopped with nothing in flight) hands out jobs again:
            // the same budget says done at once, a raised one goes on.
            let phase = match phase_of(events) {
                Phase::WaitOldest if search.in_flight().is_empty() => {
                    Phase::Refill { continuing: false }
                }
                phase => phase,
            };
            (search, phase)
        }
    };
    let carried = resumed
        .as_ref()
        .map(|(events, _)| carried_spend(events))
        .unwrap_or_default();
    let already_spent = carried
        .values()
        .fold(search.spent(), |total, spend| total.plus(*spend));
    let gate = Arc::new(BudgetGate::new(
        &header.config.budget,
        setup.prices.clone(),
        already_spent,
    ));
    let root_dir = dir.node_dir(u64::from(NodeId::ROOT.0))?;
    let root_profile = match records::load_profile(&root_dir) {
        Some(profile) => profile,
        None => {
            let profile = setup.evaluator.profile_reference(&root_dir).await;
            records::write_json(&root_dir, "ncu.json", &profile)?;
            profile
        }
    };
    let gpu = setup.evaluator.gpu().cloned();
    let arch = setup.evaluator.arch();
    let shared = Arc::new(Shared {
        root: root.clone(),
        bundle: setup.bundle,
        baseline: setup.baseline,
        gpu,
        arch,
        prompts: setup.prompts,
        models: setup.models,
        evaluator: setup.evaluator,
        recording,
        gate,
        clock: setup.clock,
        coder_sampling: header.coder_sampling.clone(),
        judge_sampling: header.judge_sampling.clone(),
        root_profile,
    });
    let (tx, rx) = mpsc::unbounded_channel();
    let progress = progress::Progress::new(setup.progress, &header, &search);
    let mut orchestrator = Orchestrator {
        shared,
        search,
        dir,
        tx,
        rx,
        tasks: JoinSet::new(),
        judged: BTreeMap::new(),
        finished: BTreeMap::new(),
        done: None,
        progress,
        overhead: summary::Overhead::default(),
        handle_ctrl_c: setup.handle_ctrl_c,
    };
    // Jobs that were in flight when the run stopped start again, oldest first, with the
    // prompts they had (their LLM calls are answered from the recording).
    let in_flight: Vec<Job> = orchestrator.search.in_flight().to_vec();
    for job in in_flight {
        let spent = carried.get(&job.child).copied().unwrap_or(Spend::ZERO);
        orchestrator.spawn(job, spent);
    }
    let reason = orchestrator.drive(phase).await?;
    orchestrator.finish(reason)
}

impl Orchestrator {
    fn append(&mut self, event: &RunEvent) -> Result<(), RunError> {
        let started = Instant::now();
        self.dir.append(event)?;
        self.overhead.main_loop += started.elapsed();
        Ok(())
    }

    /// Appends what the search did since the last call.
    fn journal(&mut self) -> Result<(), RunError> {
        for entry in self.search.drain_journal() {
            self.append(&RunEvent::Search { entry })?;
        }
        Ok(())
    }

    /// Starts `job`, which has already paid `spent` (a resumed job's Judge).
    fn spawn(&mut self, job: Job, spent: Spend) {
        let shared = self.shared.clone();
        let tx = self.tx.clone();
        self.progress.issued(&job);
        self.tasks.spawn(job::run_job(shared, job, tx, spent));
    }

    async fn drive(&mut self, mut phase: Phase) -> Result<DoneReason, RunError> {
        let mut last_done = DoneReason::Exhausted;
        loop {
            match phase {
                Phase::Refill { continuing } => {
                    if !continuing {
                        self.append(&RunEvent::RefillStarted)?;
                    }
                    let busy = Instant::now();
                    self.done = self.shared.gate.refused();
                    while self.done.is_none() {
                        match self.search.next_job(self.shared.clock.now()) {
                            NextJob::Expand(job) => {
                                self.journal()?;
                                self.spawn(job, Spend::ZERO);
                            }
                            NextJob::Wait => break,
                            NextJob::Done(reason) => self.done = Some(reason),
                        }
                    }
                    if let Some(reason) = self.done {
                        last_done = reason;
                    }
                    self.overhead.main_loop += busy.elapsed();
                    self.append(&RunEvent::RefillEnded)?;
                    phase = Phase::WaitOldest;
                }
                Phase::WaitOldest => {
                    let Some(oldest) = self.oldest() else {
                        return Ok(self.done.unwrap_or(last_done));
                    };
                    loop {
                        self.apply_prescriptions()?;
                        if self.finished.contains_key(&oldest) {
                            break;
                        }
                        self.receive().await?;
                    }
                    if let Some(result) = self.finished.remove(&oldest) {
                        self.complete(oldest, result)?;
                    }
                    phase = Phase::Barrier;
                }
                Phase::Barrier => {
                    loop {
                        self.apply_prescriptions()?;
                        if self.all_prescribed() {
                            break;
                        }
                        self.receive().await?;
                    }
                    phase = Phase::Refill { continuing: false };
                }
            }
        }
    }

    fn oldest(&self) -> Option<NodeId> {
        self.search.in_flight().iter().map(|job| job.child).min()
    }

    /// Every job in flight has its prescription, or has failed before it got one.
    fn all_prescribed(&self) -> bool {
        self.search
            .in_flight()
            .iter()
            .all(|job| job.prescription.is_some() || self.finished.contains_key(&job.child))
    }

    /// Applies the Judge's answers that arrived, in the order the jobs were handed out.
    fn apply_prescriptions(&mut self) -> Result<(), RunError> {
        let mut waiting: Vec<NodeId> = self
            .search
            .in_flight()
            .iter()
            .filter(|job| job.prescription.is_none())
            .map(|job| job.child)
            .collect();
        waiting.sort();
        for child in waiting {
            if self.finished.contains_key(&child) {
                continue;
            }
            let Some((prescriptions, reply)) = self.judged.remove(&child) else {
                break;
            };
            let busy = Instant::now();
            let assigned = self
                .search
                .prescribe(child, prescriptions)
                .map_err(|e| format!("the Judge's prescriptions were refused: {e}"));
            // A job that stopped waiting (the run is ending) needs no answer.
            let _ = reply.send(assigned);
            self.overhead.main_loop += busy.elapsed();
            self.journal()?;
        }
        Ok(())
    }

    /// Waits for one message from a job.
    async fn receive(&mut self) -> Result<(), RunError> {
        let message = if self.handle_ctrl_c {
            tokio::select! {
                message = self.rx.recv() => message,
                _ = tokio::signal::ctrl_c() => {
                    self.progress.clear();
                    return Err(RunError::Interrupted(crate::paths::display(&self.shared.root)));
                }
            }
        } else {
            self.rx.recv().await
        };
        // The loop holds a sender, so the channel never closes while it waits.
        let Some(message) = message else {
            return Err(RunError::JobsLost(
                "every job stopped without a result".into(),
            ));
        };
        match message {
            JobMsg::Judged {
                child,
                prescriptions,
                reply,
            } => {
                self.judged.insert(child, (prescriptions, reply));
            }
            JobMsg::Log(event) => self.append(&event)?,
            JobMsg::Finished {
                child,
                result,
                overhead,
            } => {
                self.overhead.jobs += overhead;
                self.overhead.expansions += 1;
                self.finished.insert(child, result);
            }
        }
        Ok(())
    }

    fn complete(&mut self, child: NodeId, result: JobResult) -> Result<(), RunError> {
        let busy = Instant::now();
        match result {
            JobResult::Completed { evaluation, cost } => {
                let events = self.search.complete(child, Outcome { evaluation, cost })?;
                self.journal()?;
                for event in events {
                    if let SearchEvent::NewBest { node, speedup, .. } = event {
                        summary::save_best(&self.dir, &self.shared.bundle.spec, node)?;
                        self.append(&RunEvent::Best { node, speedup })?;
                    }
                }
            }
            JobResult::Abandoned { reason, cost } => {
                self.search.abandon(child, reason, cost)?;
                self.journal()?;
            }
        }
        let snapshot = self.search.to_json()?;
        self.dir.write(Path::new(TREE_FILE), snapshot.as_bytes())?;
        self.progress.completed(&self.search, child);
        self.overhead.main_loop += busy.elapsed();
        Ok(())
    }

    fn finish(mut self, reason: DoneReason) -> Result<Summary, RunError> {
        let reason = self.shared.gate.refused().unwrap_or(reason);
        self.append(&RunEvent::Finished {
            reason: reason.to_string(),
        })?;
        self.progress.clear();
        let summary = Summary::of(
            &self.search,
            &self.shared.root,
            &self.shared.bundle,
            self.shared.gpu.as_ref(),
            reason,
            self.shared.models.as_ref(),
            self.shared.clock.now(),
            &self.overhead,
        );
        records::write_json(&self.shared.root, "summary.json", &summary)?;
        Ok(summary)
    }
}
