//! The command line (clap lives only here). Flags parse into [`Cli`]; [`main`] resolves settings
//! once and dispatches. Exit codes mean one thing each: 0 success, 1 the command ran and the
//! answer is "no" (doctor not ready, a candidate incorrect), 2 bad usage or a failure to run.

use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};

use crate::config::{self, Resolved, Sources};
use crate::doctor::{self, Capability};

#[derive(Debug, Parser)]
#[command(
    name = "kforge",
    version,
    about = "Makes CUDA kernels faster with a Coder and a Judge LLM, real hardware feedback and a tree search",
    propagate_version = true
)]
pub struct Cli {
    /// More log output on stderr (-v info, -vv debug, -vvv trace); RUST_LOG overrides.
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    verbose: u8,
    /// Only errors on stderr.
    #[arg(short, long, global = true)]
    quiet: bool,
    /// Override a setting for this run, e.g. --set eval.trials=8 (highest precedence).
    #[arg(long = "set", value_name = "KEY=VALUE", global = true, value_parser = parse_set)]
    set: Vec<(String, String)>,
    #[command(subcommand)]
    command: Command,
}

fn parse_set(text: &str) -> Result<(String, String), String> {
    config::parse_override(text).map_err(|e| e.to_string())
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Check the GPU, nvcc, ncu, libtorch, python3 and LLM credentials, and say what is missing.
    Doctor(DoctorArgs),
    /// Show settings and where each value came from.
    Config {
        #[command(subcommand)]
        command: ConfigCommand,
    },
    /// The quick start: a real tuning session on a bundled problem (scripted replies when no
    /// models are configured; compile-only without a GPU).
    Demo {
        /// Where the run directory goes (default ./kforge-runs).
        #[arg(long, value_name = "DIR")]
        runs: Option<std::path::PathBuf>,
    },
    /// Tune a kernel: the Coder and the Judge expand a tree search over kernel variants, every
    /// candidate compiled, verified, timed and profiled here.
    Run(Box<RunArgs>),
    /// Talk to the configured LLM endpoints
    Llm {
        #[command(subcommand)]
        command: crate::llm::cli::LlmCommand,
    },
    /// Import KernelBench-format problems into bundles
    Import(crate::problem::cli::ImportArgs),
    /// Compile, verify and time one candidate against a problem bundle.
    Eval(EvalArgs),
    /// Wrap a candidate for use outside kforge (KernelBench ModelNew or a torch.library op).
    Export(ExportArgs),
    /// Profile one call of a candidate (or the reference) with Nsight Compute, as the Judge sees it.
    Profile(ProfileArgs),
    /// Read Nsight Compute output
    Ncu {
        #[command(subcommand)]
        command: crate::ncu::cli::NcuCommand,
    },
    /// The GPU worker (started by kforge itself; speaks JSON lines on stdin/stdout).
    #[command(hide = true)]
    Worker {
        /// Serve one request from this file (profile mode under ncu) instead of stdin.
        #[arg(long, requires = "result")]
        request: Option<std::path::PathBuf>,
        /// Where to write the outcome of `--request`.
        #[arg(long, requires = "request")]
        result: Option<std::path::PathBuf>,
    },
}

#[derive(Debug, Args)]
struct EvalArgs {
    /// A problem bundle: its folder, or its name under <home>/bundles.
    bundle: String,
    /// The candidate: one .cu file implementing kforge_forward (see src/eval/kforge.h).
    candidate: std::path::PathBuf,
    /// Print the result document as JSON.
    #[arg(long)]
    json: bool,
    /// Also write the result document to this file.
    #[arg(long, value_name = "FILE")]
    output: Option<std::path::PathBuf>,
    /// Correctness trials, each on fresh inputs (at least 5).
    #[arg(long)]
    trials: Option<u32>,
    /// Seed of the first trial (trial i uses seed + i).
    #[arg(long, default_value_t = 1000)]
    seed: i64,
    /// Multiply the per-dtype tolerances (fp32 1e-4, fp16/bf16 1e-2) by this factor.
    #[arg(long, default_value_t = 1.0)]
    tolerance: f64,
    /// Correctness only: skip timing.
    #[arg(long)]
    no_time: bool,
    /// Timed calls (at least 100).
    #[arg(long, default_value_t = 100)]
    timed_calls: u32,
    /// Build for this architecture instead of the GPU's (e.g. sm_90a for wgmma).
    #[arg(long)]
    arch: Option<String>,
    /// Seconds without progress in one stage (a trial, the timing loop) before the candidate
    /// is declared hung and its worker killed.
    #[arg(long, default_value_t = 30)]
    stage_timeout: u64,
    /// Also profile a correct candidate with ncu (`default`, `fast` or a folder of .section
    /// files); the Judge's view goes into the result. The verdict does not depend on it.
    #[arg(long, value_name = "SECTIONS", num_args = 0..=1, default_missing_value = "default")]
    profile: Option<String>,
}

#[derive(Debug, Args)]
struct RunArgs {
    /// A problem bundle (folder or name under <home>/bundles) or a KernelBench-format
    /// problem.py (imported first).
    #[arg(required_unless_present = "resume")]
    problem: Option<String>,
    /// Continue a killed or finished run from its folder (budget flags raise its limits).
    #[arg(long, value_name = "RUN_DIR", conflicts_with = "problem")]
    resume: Option<std::path::PathBuf>,
    /// The Coder's model, `provider:model` (default llm.coder).
    #[arg(long, value_name = "MODEL")]
    coder: Option<String>,
    /// The Judge's model (default llm.judge).
    #[arg(long, value_name = "MODEL")]
    judge: Option<String>,
    /// Serve hand-written replies from a scripted session folder instead of models
    /// (see demo/softmax_rows/session.toml).
    #[arg(long, value_name = "DIR", conflicts_with_all = ["coder", "judge"])]
    scripted: Option<std::path::PathBuf>,
    /// Candidate kernels to evaluate at most.
    #[arg(long)]
    max_nodes: Option<u32>,
    /// Dollars the models may cost at most (list prices; held exactly, per call).
    #[arg(long)]
    max_dollars: Option<f64>,
    /// Tokens (in + out) the models may use at most (held exactly, per call).
    #[arg(long)]
    max_tokens: Option<u64>,
    /// Wall time at most; no expansion starts that could end past it.
    #[arg(long)]
    max_minutes: Option<f64>,
    /// Expansions in flight at once (their LLM calls overlap; the GPU runs one at a time).
    #[arg(long)]
    parallel: Option<u32>,
    /// Stop once a correct kernel reaches this fraction of the speed-of-light floor (default 0.9).
    #[arg(long, conflicts_with = "no_early_stop")]
    stop_at_sol: Option<f64>,
    /// Never stop early near the speed of light.
    #[arg(long)]
    no_early_stop: bool,
    /// Selection rule: puct (Judge-ranked priors), uct, or linear (a Coder→Judge chain).
    #[arg(long, value_name = "POLICY")]
    policy: Option<String>,
    /// Repair attempts a failed kernel gets before its branch is dead.
    #[arg(long)]
    max_repairs: Option<u32>,
    /// Seed of the search's tie-breaks.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Where run folders go.
    #[arg(long, value_name = "DIR", default_value = "kforge-runs")]
    runs: std::path::PathBuf,
    /// This run's folder name (default <problem>-<date>-<time>).
    #[arg(long)]
    name: Option<String>,
    /// ncu metric sections for correct kernels (`default`, `fast`, a folder).
    #[arg(long, default_value = "default", conflicts_with = "no_profile")]
    sections: String,
    /// Do not profile (the Judge then reads timings only).
    #[arg(long)]
    no_profile: bool,
    /// Correctness trials per candidate (at least 5).
    #[arg(long)]
    trials: Option<u32>,
    /// Seconds without progress in one evaluation stage before a candidate counts as hung.
    #[arg(long, default_value_t = 30)]
    stage_timeout: u64,
    /// A folder of prompt templates overriding the shipped ones, file by file.
    #[arg(long, value_name = "DIR")]
    prompts: Option<std::path::PathBuf>,
    /// Size overrides when importing a problem.py, e.g. --size batch_size=16.
    #[arg(long = "size", value_name = "NAME=VALUE", value_parser = parse_size)]
    sizes: Vec<(String, String)>,
    /// One line per finished node instead of a progress bar.
    #[arg(long)]
    lines: bool,
    /// Ask the models even on a machine without a GPU (kernels are built, never verified or
    /// timed).
    #[arg(long)]
    compile_only: bool,
    /// Print the summary as JSON.
    #[arg(long)]
    json: bool,
}

fn parse_size(text: &str) -> Result<(String, String), String> {
    crate::problem::import::parse_size(text).map_err(|e| e.to_string())
}

#[derive(Debug, Args)]
struct ProfileArgs {
    /// A problem bundle: its folder, or its name under <home>/bundles.
    bundle: String,
    /// The candidate .cu file to profile.
    #[arg(required_unless_present = "reference", conflicts_with = "reference")]
    candidate: Option<std::path::PathBuf>,
    /// Profile the PyTorch reference instead (where it spends its time).
    #[arg(long)]
    reference: bool,
    /// Metric set: `default` (≈30 curated metrics), `fast`, or a folder of .section files.
    #[arg(long, default_value = "default")]
    sections: String,
    /// Print the profile as JSON.
    #[arg(long)]
    json: bool,
    /// Where to keep the report (without .ncu-rep); default <bundle>-<candidate> here.
    #[arg(long, value_name = "PATH")]
    report: Option<std::path::PathBuf>,
}

#[derive(Debug, Args)]
struct ExportArgs {
    /// A problem bundle: its folder, or its name under <home>/bundles.
    bundle: String,
    /// The candidate .cu file.
    candidate: std::path::PathBuf,
    /// Write a KernelBench-style file with Model and ModelNew (load_inline) here.
    #[arg(
        long,
        value_name = "OUT.py",
        required_unless_present = "torch_op",
        conflicts_with = "torch_op"
    )]
    kernelbench: Option<std::path::PathBuf>,
    /// Write a module registering the kernel as a torch.library custom op here.
    #[arg(long, value_name = "OUT.py")]
    torch_op: Option<std::path::PathBuf>,
}

#[derive(Debug, Args)]
struct DoctorArgs {
    /// Print the report as one JSON object.
    #[arg(long)]
    json: bool,
    /// What the exit status is judged on (repeatable).
    #[arg(long = "need", value_enum, default_values_t = [Capability::Run])]
    need: Vec<Capability>,
}

#[derive(Debug, Subcommand)]
enum ConfigCommand {
    /// Print every resolved setting with its source (secrets show as <set>).
    Show {
        #[arg(long)]
        json: bool,
    },
}

/// Parses the command line, runs the command and maps the outcome to an exit code.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    crate::logging::init(cli.verbose, cli.quiet);
    let resolved = match config::resolve(&Sources::discover(cli.set.clone())) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("kforge: {e}");
            eprintln!("(run `kforge config show` after fixing it to see every setting's source)");
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("kforge: cannot start the async runtime: {e}");
            return ExitCode::from(2);
        }
    };
    match runtime.block_on(dispatch(cli.command, &resolved)) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("kforge: {e:#}");
            ExitCode::from(2)
        }
    }
}

async fn dispatch(command: Command, resolved: &Resolved) -> anyhow::Result<ExitCode> {
    match command {
        Command::Doctor(args) => {
            let report = doctor::run(&resolved.settings, args.need).await;
            if args.json {
                println!("{}", serde_json::to_string_pretty(&report)?);
            } else {
                print!("{}", report.render());
            }
            Ok(if report.ready {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            })
        }
        Command::Config {
            command: ConfigCommand::Show { json },
        } => {
            let shown = resolved.show();
            if json {
                println!("{}", serde_json::to_string_pretty(&shown)?);
            } else {
                let width = shown.iter().map(|s| s.key.len()).max().unwrap_or(0);
                for s in &shown {
                    let value = match &s.value {
                        serde_json::Value::Null => "(not set)".to_string(),
                        serde_json::Value::String(v) => v.clone(),
                        other => other.to_string(),
                    };
                    println!("{:<width$}  {:<40}  {}", s.key, value, s.source);
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Demo { runs } => demo(resolved, runs).await,
        Command::Run(args) => {
            let args = *args;
            if args.trials.is_some_and(|t| t < 5) {
                anyhow::bail!("the protocol needs at least 5 trials");
            }
            let request = crate::run::command::RunRequest {
                target: args.problem,
                resume: args.resume,
                coder: args.coder,
                judge: args.judge,
                session: args.scripted,
                budget: crate::run::command::BudgetFlags {
                    max_nodes: args.max_nodes,
                    max_dollars: args.max_dollars,
                    max_tokens: args.max_tokens,
                    max_minutes: args.max_minutes,
                    parallel: args.parallel,
                    stop_at_sol: if args.no_early_stop {
                        Some(None)
                    } else {
                        args.stop_at_sol.map(Some)
                    },
                },
                seed: args.seed,
                policy: args.policy,
                max_repairs: args.max_repairs,
                runs_dir: Some(args.runs),
                name: args.name,
                profile_sections: (!args.no_profile).then_some(args.sections),
                trials: args.trials,
                stage_timeout: std::time::Duration::from_secs(args.stage_timeout),
                prompts: args.prompts,
                sizes: args.sizes,
                json: args.json,
                progress: args.lines.then_some(crate::run::progress::Style::Lines),
                allow_compile_only: args.compile_only,
            };
            crate::run::command::run(&resolved.settings, request).await
        }
        Command::Llm { command } => crate::llm::cli::run(command, &resolved.settings).await,
        Command::Import(args) => crate::problem::cli::run(args, &resolved.settings).await,
        Command::Eval(args) => {
            if args.trials.is_some_and(|t| t < 5) || args.timed_calls < 100 {
                anyhow::bail!("the protocol needs at least 5 trials and 100 timed calls");
            }
            let options = crate::eval::protocol::ProtocolOptions {
                trials: args.trials.unwrap_or(resolved.settings.eval.trials),
                seed: args.seed,
                tolerance_scale: args.tolerance,
                time: !args.no_time,
                timed_calls: args.timed_calls,
                ..Default::default()
            };
            crate::eval::command::eval(
                &resolved.settings,
                crate::eval::command::EvalRequest {
                    bundle: &args.bundle,
                    candidate: &args.candidate,
                    options,
                    arch: args.arch.as_deref(),
                    stage_timeout: std::time::Duration::from_secs(args.stage_timeout),
                    json: args.json,
                    output: args.output,
                    profile_sections: args.profile,
                },
            )
            .await
        }
        Command::Export(args) => {
            use crate::eval::command::ExportKind;
            let (kind, out) = match (args.kernelbench, args.torch_op) {
                (Some(out), _) => (ExportKind::KernelBench, out),
                (None, Some(out)) => (ExportKind::TorchOp, out),
                (None, None) => anyhow::bail!("give --kernelbench OUT.py or --torch-op OUT.py"),
            };
            crate::eval::command::export(
                &resolved.settings,
                &args.bundle,
                &args.candidate,
                kind,
                &out,
            )
        }
        Command::Ncu { command } => crate::ncu::cli::run(command),
        Command::Profile(args) => {
            crate::eval::command::profile(
                &resolved.settings,
                crate::eval::command::ProfileCliRequest {
                    bundle: &args.bundle,
                    candidate: args.candidate.as_deref(),
                    sections: &args.sections,
                    json: args.json,
                    report_stem: args.report,
                },
            )
            .await
        }
        Command::Worker { request, result } => Ok(crate::worker::main(request, result)),
    }
}

/// The README's first command lands here: check what this machine can do, then run a real tuning
/// session on a bundled problem (compile-only on a machine without a GPU).
async fn demo(resolved: &Resolved, runs: Option<std::path::PathBuf>) -> anyhow::Result<ExitCode> {
    let report = doctor::run(&resolved.settings, vec![Capability::Compile]).await;
    print!("{}", report.render());
    if !report.has(Capability::Compile) {
        eprintln!(
            "kforge demo: this machine cannot even compile kernels; fix what is listed above"
        );
        return Ok(ExitCode::from(1));
    }
    println!();
    crate::run::command::demo(&resolved.settings, runs).await
}
