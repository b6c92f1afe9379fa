//! `kforge run` and `kforge demo`: turn flags and settings into a [`RunSetup`] — the bundle
//! (importing a `problem.py` first), this machine's evaluator (compile-only without a GPU), the
//! models (live, or a scripted session), budgets — then start or resume the run and print its
//! summary.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use tokio::sync::Mutex;

use super::evaluator::{MachineEvaluator, ProfileSettings};
use super::gate::BUDGETED_MAX_OUTPUT_TOKENS;
use super::models::{LiveModels, Models};
use super::records::{RunEvent, RunHeader};
use super::session::ScriptedSession;
use super::{RunSetup, Summary, SystemClock, progress};
use crate::agents::Prompts;
use crate::config::Settings;
use crate::eval::client::Limits;
use crate::eval::protocol::ProtocolOptions;
use crate::llm::{Agent, PriceTable, Sampling};
use crate::problem::ProblemBundle;
use crate::search::{Budget, Dollars, Policy, SearchConfig};
use crate::store::RunDir;
use crate::tools::{self, Tool};

/// Everything `kforge run` can be told.
#[derive(Debug, Clone, Default)]
pub struct RunRequest {
    /// A bundle (folder or name) or a KernelBench-format `problem.py` (imported first).
    pub target: Option<String>,
    /// Continue the run in this folder.
    pub resume: Option<PathBuf>,
    pub coder: Option<String>,
    pub judge: Option<String>,
    /// Serve the replies from this scripted session folder instead of models.
    pub session: Option<PathBuf>,
    pub budget: BudgetFlags,
    pub seed: u64,
    pub policy: Option<String>,
    pub max_repairs: Option<u32>,
    /// Where runs go (default ./kforge-runs) and this run's folder name.
    pub runs_dir: Option<PathBuf>,
    pub name: Option<String>,
    /// ncu sections for correct kernels; `None` turns profiling off.
    pub profile_sections: Option<String>,
    pub trials: Option<u32>,
    pub stage_timeout: Duration,
    pub prompts: Option<PathBuf>,
    /// `--size` for importing a problem.py.
    pub sizes: Vec<(String, String)>,
    pub json: bool,
    pub progress: Option<progress::Style>,
    /// Ask live models even without a GPU (nothing they write is verified or timed).
    pub allow_compile_only: bool,
}

/// Budget flags; unset ones keep the defaults (or, on resume, the run's own).
#[derive(Debug, Clone, Default)]
pub struct BudgetFlags {
    pub max_nodes: Option<u32>,
    pub max_dollars: Option<f64>,
    pub max_tokens: Option<u64>,
    pub max_minutes: Option<f64>,
    pub parallel: Option<u32>,
    /// Stop at this fraction of the speed of light; `Some(None)` never stops early.
    pub stop_at_sol: Option<Option<f64>>,
}

impl BudgetFlags {
    fn apply(&self, budget: &mut Budget) -> anyhow::Result<()> {
        if let Some(n) = self.max_nodes {
            budget.max_nodes = n;
        }
        if let Some(d) = self.max_dollars {
            budget.max_dollars = Some(
                Dollars::from_dollars(d)
                    .with_context(|| format!("--max-dollars {d} is not an amount of dollars"))?,
            );
        }
        if let Some(t) = self.max_tokens {
            budget.max_tokens = Some(t);
        }
        if let Some(m) = self.max_minutes {
            if !(m.is_finite() && m > 0.0) {
                bail!("--max-minutes must be a positive number of minutes");
            }
            budget.max_wall_seconds = Some(m * 60.0);
        }
        if let Some(p) = self.parallel {
            budget.max_in_flight = p;
        }
        if let Some(s) = self.stop_at_sol {
            budget.stop_at_fraction_of_sol = s;
        }
        Ok(())
    }

    fn any(&self) -> bool {
        self.max_nodes.is_some()
            || self.max_dollars.is_some()
            || self.max_tokens.is_some()
            || self.max_minutes.is_some()
            || self.parallel.is_some()
            || self.stop_at_sol.is_some()
    }
}

fn parse_policy(name: &str) -> anyhow::Result<Policy> {
    Ok(match name {
        "puct" => Policy::Puct { exploration: 0.5 },
        "uct" => Policy::Uct { exploration: 0.5 },
        "linear" => Policy::LinearChain,
        other => bail!("unknown --policy {other}: use puct (default), uct or linear"),
    })
}

/// Runs `kforge run`.
pub async fn run(settings: &Settings, request: RunRequest) -> anyhow::Result<ExitCode> {
    let summary = match &request.resume {
        Some(dir) => resume(settings, &request, dir).await?,
        None => start(settings, &request, None).await?,
    };
    print_summary(&summary, request.json)
}

fn print_summary(summary: &Summary, json: bool) -> anyhow::Result<ExitCode> {
    if json {
        // summary.json leaves out where the run is; the command's own output says it.
        let mut value = serde_json::to_value(summary)?;
        value["run_dir"] = crate::paths::display(&summary.run_dir).into();
        println!("{}", serde_json::to_string_pretty(&value)?);
    } else {
        print!("{}", summary.render());
    }
    Ok(if summary.best.is_some() || summary.compile_only {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// The bundle a target names, importing a `problem.py` first.
async fn bundle_for(
    settings: &Settings,
    target: &str,
    sizes: &[(String, String)],
    out: Option<PathBuf>,
) -> anyhow::Result<ProblemBundle> {
    let path = Path::new(target);
    if !(path.is_file() && path.extension().is_some_and(|e| e == "py")) {
        return Ok(ProblemBundle::resolve(target, settings)?);
    }
    use crate::problem::import::{self, BaselineMode, ImportOptions, ImportStatus};
    let python = tools::locate(Tool::Python, settings)
        .context("importing a problem.py needs python3 with torch (run scripts/setup.sh)")?;
    let files = import::plan(&[path.to_path_buf()], None)?;
    let options = ImportOptions {
        out: out.unwrap_or_else(|| crate::problem::default_bundle_root(settings)),
        sizes: sizes.to_vec(),
        device: None,
        baselines: BaselineMode::Auto,
        rebaseline: false,
        problem_timeout: import::PROBLEM_TIMEOUT_WITH_BASELINES,
    };
    eprintln!("importing {target} (baselines are measured once per GPU; later runs reuse them)");
    let report = import::import(&python.path, &files, &options, |result| {
        eprintln!("{}", crate::problem::cli::render_result(result, 20));
    })
    .await?;
    let result = report
        .results
        .first()
        .context("the importer reported nothing")?;
    if result.status == ImportStatus::Skipped {
        bail!(
            "{target} could not be imported: {}",
            result.reason.as_deref().unwrap_or("no reason given")
        );
    }
    Ok(ProblemBundle::load(&options.out.join(&result.name))?)
}

/// This machine's evaluator for `bundle`.
async fn machine_evaluator(
    settings: &Settings,
    bundle: &ProblemBundle,
    options: &ProtocolOptions,
    sections: Option<&str>,
    stage_timeout: Duration,
) -> anyhow::Result<MachineEvaluator> {
    let gpus = crate::gpu::list().unwrap_or_default();
    let gpu = gpus.first().cloned();
    let compiler = crate::eval::command::machine_compiler(settings, gpu.as_ref(), None).await?;
    let worker = crate::eval::command::machine_worker(
        gpu.as_ref(),
        Limits {
            run: stage_timeout,
            ..Limits::default()
        },
    )?;
    let (profile, profile_off) = match (sections, &gpu) {
        (None, _) => (None, "profiling is off for this run".to_string()),
        (Some(_), None) => (None, super::evaluator::COMPILE_ONLY.to_string()),
        (Some(sections), Some(_)) => match tools::locate(Tool::Ncu, settings) {
            Ok(ncu) => (
                Some(ProfileSettings {
                    ncu: ncu.path,
                    sections: crate::ncu::SectionSet::from_arg(sections),
                    sections_cache: settings.home.join("ncu-sections"),
                }),
                String::new(),
            ),
            Err(e) => (None, e.to_string()),
        },
    };
    Ok(MachineEvaluator {
        compiler,
        bundle: bundle.clone(),
        options: options.clone(),
        gpu,
        worker: Mutex::new(worker),
        profile,
        profile_off,
    })
}

/// The live models a run asks, from the flags or the settings.
fn live_models(
    settings: &Settings,
    request: &RunRequest,
) -> anyhow::Result<(LiveModels, Sampling, Sampling)> {
    let mut settings = settings.clone();
    if let Some(coder) = &request.coder {
        settings.llm.coder = Some(coder.clone());
    }
    if let Some(judge) = &request.judge {
        settings.llm.judge = Some(judge.clone());
    }
    let (coder_spec, coder_sampling) = crate::llm::configured(&settings, Agent::Coder)?;
    let (judge_spec, judge_sampling) = crate::llm::configured(&settings, Agent::Judge)?;
    let coder = crate::llm::client_for(&coder_spec, &settings, None)?;
    let judge = crate::llm::client_for(&judge_spec, &settings, None)?;
    Ok((LiveModels { coder, judge }, coder_sampling, judge_sampling))
}

/// With a dollar or token budget every call needs a reply cap, so its worst case is known.
fn capped(mut sampling: Sampling, budget: &Budget) -> Sampling {
    if (budget.max_dollars.is_some() || budget.max_tokens.is_some())
        && sampling.max_output_tokens.is_none()
    {
        tracing::info!(
            "a budget is set and max_output_tokens is not: replies are capped at \
             {BUDGETED_MAX_OUTPUT_TOKENS} tokens"
        );
        sampling.max_output_tokens = Some(BUDGETED_MAX_OUTPUT_TOKENS);
    }
    sampling
}

fn run_name(problem: &str) -> String {
    let stamp = humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string();
    let stamp: String = stamp
        .chars()
        .filter(|c| c.is_ascii_digit() || *c == 'T')
        .collect();
    format!("{}-{}", problem.replace('/', "_"), stamp.replace('T', "-"))
}

/// A new run. `session` forces a scripted session (the demo).
async fn start(
    settings: &Settings,
    request: &RunRequest,
    bundle: Option<ProblemBundle>,
) -> anyhow::Result<Summary> {
    let mut config = SearchConfig::default();
    request.budget.apply(&mut config.budget)?;
    if let Some(policy) = &request.policy {
        config.policy = parse_policy(policy)?;
    }
    if let Some(repairs) = request.max_repairs {
        config.max_repairs = repairs;
    }
    // Refuse nonsense settings before anything is imported or created.
    crate::search::Search::new(config.clone(), request.seed)?;
    let (models, coder_sampling, judge_sampling, session, session_problem): (
        Arc<dyn Models>,
        _,
        _,
        _,
        _,
    ) = match &request.session {
        Some(folder) => {
            let scripted = ScriptedSession::load(folder)?;
            let problem = scripted.problem.clone();
            (
                Arc::new(scripted),
                Sampling::default(),
                Sampling::default(),
                Some(PathBuf::from(crate::paths::display(&std::path::absolute(
                    folder,
                )?))),
                Some(problem),
            )
        }
        None => {
            let (live, coder, judge) = live_models(settings, request)?;
            (
                Arc::new(live),
                capped(coder, &config.budget),
                capped(judge, &config.budget),
                None,
                None,
            )
        }
    };
    let bundle = match bundle {
        Some(bundle) => bundle,
        None => {
            let target = request
                .target
                .as_deref()
                .context("name a bundle or a problem.py to tune (or --resume DIR)")?;
            // A problem file is checked by its name before anything is imported.
            if let (Some(session), Some(stem)) = (&session_problem, Path::new(target).file_stem())
                && target.ends_with(".py")
            {
                check_session_problem(session, &stem.to_string_lossy())?;
            }
            bundle_for(settings, target, &request.sizes, None).await?
        }
    };
    if let Some(session) = &session_problem {
        check_session_problem(session, &bundle.spec.name)?;
    }
    let options = ProtocolOptions {
        trials: request.trials.unwrap_or(settings.eval.trials),
        ..ProtocolOptions::default()
    };
    let evaluator = machine_evaluator(
        settings,
        &bundle,
        &options,
        request.profile_sections.as_deref(),
        request.stage_timeout,
    )
    .await?;
    let gpu = evaluator.gpu.clone();
    if gpu.is_none() && request.session.is_none() && !request.allow_compile_only {
        bail!(
            "no GPU here: the models would be paid for kernels that are only compiled, never \
             verified or timed; run on a GPU machine, use --scripted DIR, or pass --compile-only \
             to ask the models anyway"
        );
    }
    let header = RunHeader {
        kforge_version: env!("CARGO_PKG_VERSION").into(),
        problem: bundle.spec.name.clone(),
        bundle: PathBuf::from(crate::paths::display(&std::path::absolute(&bundle.dir)?)),
        coder: models.name(Agent::Coder),
        judge: models.name(Agent::Judge),
        coder_sampling,
        judge_sampling,
        scripted: models.scripted_label(),
        session,
        compile_only: gpu.is_none(),
        gpu: gpu.as_ref().map(|g| g.name.clone()),
        arch: evaluator.compiler.arch.to_string(),
        config,
        seed: request.seed,
        protocol: options,
        profile_sections: request.profile_sections.clone(),
    };
    let runs = request
        .runs_dir
        .clone()
        .unwrap_or_else(|| PathBuf::from("kforge-runs"));
    let name = request
        .name
        .clone()
        .unwrap_or_else(|| run_name(&bundle.spec.name));
    let dir = RunDir::create(&runs, &name)?;
    announce(&header, dir.root());
    let setup = run_setup(
        settings,
        request,
        header,
        bundle,
        models,
        evaluator,
        Duration::ZERO,
    )?;
    Ok(super::start(setup, dir).await?)
}

/// The setup of a run on this machine, starting (or resuming) at run time `clock_offset`.
fn run_setup(
    settings: &Settings,
    request: &RunRequest,
    header: RunHeader,
    bundle: ProblemBundle,
    models: Arc<dyn Models>,
    evaluator: MachineEvaluator,
    clock_offset: Duration,
) -> anyhow::Result<RunSetup> {
    let baseline = evaluator
        .gpu
        .as_ref()
        .and_then(|gpu| bundle.baseline(&gpu.name));
    Ok(RunSetup {
        header,
        bundle,
        baseline,
        prompts: Prompts::load(request.prompts.as_deref())?,
        models,
        evaluator: Arc::new(evaluator),
        clock: Arc::new(SystemClock::starting_at(clock_offset)),
        prices: PriceTable::load(&settings.llm)?,
        progress: request.progress.unwrap_or(progress::Style::Auto),
        handle_ctrl_c: true,
    })
}

fn check_session_problem(session: &str, problem: &str) -> anyhow::Result<()> {
    if session != problem {
        bail!(
            "the scripted session is written for {session}, not {problem}; its kernels would not \
             compute this problem"
        );
    }
    Ok(())
}

fn announce(header: &RunHeader, root: &Path) {
    match &header.scripted {
        Some(label) => eprintln!("{label}"),
        None => eprintln!("coder {}, judge {}", header.coder, header.judge),
    }
    if header.compile_only {
        eprintln!(
            "no GPU here: compile-only — kernels are built by nvcc, not verified, timed or \
             profiled; the search still walks the tree"
        );
    }
    eprintln!("run directory: {}", crate::paths::display(root));
}

async fn resume(settings: &Settings, request: &RunRequest, dir: &Path) -> anyhow::Result<Summary> {
    if request.target.is_some() || request.coder.is_some() || request.judge.is_some() {
        bail!(
            "--resume continues a run with its own problem and models; drop the problem and \
             --coder/--judge (budget flags may be given to raise its limits)"
        );
    }
    let reopened = RunDir::reopen::<RunEvent>(dir)?;
    if reopened.torn_bytes > 0 {
        eprintln!(
            "the run was killed while writing its log: {} bytes of a torn last event were cut off",
            reopened.torn_bytes
        );
    }
    let Some(RunEvent::Started { header }) = reopened.events.first() else {
        bail!(
            "{} has no start event; it is not a kforge run",
            crate::paths::display(dir)
        );
    };
    let mut header = (**header).clone();
    // Budgets raised on an earlier resume stay raised.
    for event in &reopened.events {
        if let RunEvent::Resumed {
            budget: Some(budget),
            ..
        } = event
        {
            header.config.budget = budget.clone();
        }
    }
    let raised = request.budget.any().then(|| {
        let mut budget = header.config.budget.clone();
        request.budget.apply(&mut budget).map(|()| budget)
    });
    let raised = raised.transpose()?;
    if let Some(budget) = &raised {
        header.config.budget = budget.clone();
    }
    let bundle = ProblemBundle::load(&crate::paths::expand(&header.bundle)).with_context(|| {
        format!(
            "the run's bundle {} is gone; import the problem there again to resume",
            crate::paths::display(&header.bundle)
        )
    })?;
    let models: Arc<dyn Models> = match &header.session {
        Some(folder) => Arc::new(ScriptedSession::load(&crate::paths::expand(folder))?),
        None => {
            let replay = RunRequest {
                coder: Some(header.coder.clone()),
                judge: Some(header.judge.clone()),
                ..RunRequest::default()
            };
            Arc::new(live_models(settings, &replay)?.0)
        }
    };
    let evaluator = machine_evaluator(
        settings,
        &bundle,
        &header.protocol,
        header.profile_sections.as_deref(),
        request.stage_timeout,
    )
    .await?;
    if evaluator.gpu.as_ref().map(|g| &g.name) != header.gpu.as_ref() {
        bail!(
            "the run was made on {} and this machine has {}: resume it where it started, so its \
             numbers stay comparable",
            header.gpu.as_deref().unwrap_or("no GPU"),
            evaluator.gpu.as_ref().map_or("no GPU", |g| g.name.as_str())
        );
    }
    announce(&header, dir);
    let run_dir = reopened.run;
    let offset = super::resumed_clock_offset(&reopened.events);
    let setup = run_setup(settings, request, header, bundle, models, evaluator, offset)?;
    Ok(super::resume(setup, run_dir, reopened.events, reopened.torn_bytes).await?)
}

/// Where the repository's own files are: beside the binary (`target/release/kforge` in a
/// checkout), or where it was built.
fn repo_file(relative: &str) -> Option<PathBuf> {
    let from_exe = std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent()?.parent()?.parent().map(Path::to_path_buf));
    [from_exe, Some(PathBuf::from(env!("CARGO_MANIFEST_DIR")))]
        .into_iter()
        .flatten()
        .map(|root| root.join(relative))
        .find(|path| path.exists())
}

/// The demo's session folder.
pub const DEMO_SESSION: &str = "demo/softmax_rows";

/// `kforge demo`: a real tuning session on a bundled problem. With models configured (and
/// their keys) it asks them; otherwise it serves the scripted session shipped in `demo/`.
/// Without a GPU it imports the problem small and runs compile-only.
pub async fn demo(settings: &Settings, runs_dir: Option<PathBuf>) -> anyhow::Result<ExitCode> {
    let session_dir = repo_file(DEMO_SESSION).with_context(|| {
        format!("the demo session ({DEMO_SESSION}) is missing from this checkout")
    })?;
    let session = ScriptedSession::load(&session_dir)?;
    let problem_file = repo_file(&format!("kernelbench/problems/{}.py", session.problem))
        .with_context(|| format!("kernelbench/problems/{}.py is missing", session.problem))?;
    let has_gpu = crate::gpu::list().is_ok_and(|gpus| !gpus.is_empty());
    let (sizes, out) = if has_gpu {
        (Vec::new(), settings.home.join("bundles").join("demo"))
    } else {
        (
            session.cpu_sizes.clone(),
            settings.home.join("bundles").join("demo-cpu"),
        )
    };
    let bundle = bundle_for(settings, &problem_file.to_string_lossy(), &sizes, Some(out)).await?;
    let configured = settings.llm.coder.is_some() && settings.llm.judge.is_some() && has_gpu;
    if settings.llm.coder.is_some() && !has_gpu {
        eprintln!(
            "kforge demo: no GPU here, so the configured models are not asked (nothing they \
             wrote could be measured)"
        );
    }
    let live = configured
        && match live_models(settings, &RunRequest::default()) {
            Ok(_) => true,
            Err(e) => {
                eprintln!("kforge demo: the configured models cannot be used ({e:#})");
                false
            }
        };
    let request = RunRequest {
        session: (!live).then(|| session_dir.clone()),
        budget: BudgetFlags {
            max_nodes: Some(8),
            parallel: Some(2),
            ..BudgetFlags::default()
        },
        profile_sections: Some("default".into()),
        stage_timeout: Duration::from_secs(30),
        runs_dir,
        ..RunRequest::default()
    };
    if live {
        eprintln!(
            "kforge demo: tuning {} with the configured models",
            session.problem
        );
    } else {
        eprintln!(
            "kforge demo: tuning {} with the scripted demo session (no LLM credentials needed; \
             set llm.coder and llm.judge with their keys to use real models)",
            session.problem
        );
    }
    let summary = start(settings, &request, Some(bundle)).await?;
    print_summary(&summary, false)
}
