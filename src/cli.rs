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
    /// The quick start: checks this machine and shows what kforge can do on it.
    Demo,
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
        Command::Demo => demo(resolved).await,
    }
}

/// The README's first command lands here: report what this machine can do, and succeed when it
/// can at least compile kernels (a machine without a GPU runs kforge compile-only).
async fn demo(resolved: &Resolved) -> anyhow::Result<ExitCode> {
    let report = doctor::run(&resolved.settings, vec![Capability::Compile]).await;
    print!("{}", report.render());
    if !report.has(Capability::Compile) {
        eprintln!(
            "kforge demo: this machine cannot even compile kernels; fix what is listed above"
        );
        return Ok(ExitCode::from(1));
    }
    if report.has(Capability::Run) {
        println!("\nThis machine can compile, verify and time kernels on its GPU.");
    } else {
        println!(
            "\nNo usable GPU here: kforge runs compile-only on this machine (nvcc builds and ptxas \
             reports); verification, timing and profiling need a GPU."
        );
    }
    Ok(ExitCode::SUCCESS)
}
