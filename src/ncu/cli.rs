//! `kforge ncu ...`: reading Nsight Compute output outside a run. `kforge ncu parse
//! <export.csv>` turns an existing `--csv` export (raw or details page, detected) into the same
//! table and diagnosis the Judge reads, or into JSON.

use std::io::Read as _;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;

use crate::ncu::parse::{self, NcuReport};
use crate::ncu::sections::SectionSet;
use crate::ncu::{diagnose, render, rollup};

#[derive(Debug, clap::Subcommand)]
pub enum NcuCommand {
    /// Read an ncu CSV export (`ncu --csv --page raw` or `--page details`) and print the metric
    /// table and diagnosis the Judge would see.
    Parse(ParseArgs),
}

#[derive(Debug, clap::Args)]
pub struct ParseArgs {
    /// The export: a file ncu's --csv output was saved to (the program's own output and ncu's
    /// ==PROF== lines around the table are fine), or - for stdin.
    export: PathBuf,
    /// Print the parsed kernels, roll-up and diagnosis as JSON instead.
    #[arg(long)]
    json: bool,
    /// The export's page; detected from its header when not given.
    #[arg(long, value_enum)]
    page: Option<PageArg>,
    /// A folder of your own .section files: their labels map a details export back to metric
    /// names, and their metrics join the table.
    #[arg(long, value_name = "DIR")]
    section_folder: Option<PathBuf>,
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum PageArg {
    Raw,
    Details,
}

/// Runs a `kforge ncu` command: exit 0 with kernels, 1 when the export holds none.
pub fn run(command: NcuCommand) -> anyhow::Result<ExitCode> {
    match command {
        NcuCommand::Parse(args) => parse_command(args),
    }
}

fn parse_command(args: ParseArgs) -> anyhow::Result<ExitCode> {
    let shown = crate::paths::display(&args.export);
    let text = if args.export.as_os_str() == "-" {
        let mut text = String::new();
        std::io::stdin()
            .read_to_string(&mut text)
            .context("reading the export from stdin")?;
        text
    } else {
        let bytes = std::fs::read(&args.export).with_context(|| format!("reading {shown}"))?;
        String::from_utf8_lossy(&bytes).into_owned()
    };
    let sections = match &args.section_folder {
        // A user folder resolves without touching the cache, so no cache folder is needed.
        Some(folder) => {
            SectionSet::Folder(folder.clone())
                .resolve(&std::env::temp_dir())?
                .sections
        }
        None => Vec::new(),
    };
    let labels = crate::ncu::sections::LabelIndex::builtin()
        .clone()
        .with_sections(&sections);
    let report: NcuReport = match args.page {
        Some(PageArg::Raw) => parse::parse_raw_csv(&text),
        Some(PageArg::Details) => parse::parse_details_csv_with(&text, &labels),
        None => parse::parse_csv(&text).and_then(|report| match report.page {
            parse::Page::Details if !sections.is_empty() => {
                parse::parse_details_csv_with(&text, &labels)
            }
            _ => Ok(report),
        }),
    }
    .with_context(|| format!("parsing {shown}"))?;
    for warning in &report.warnings {
        tracing::warn!("{shown}: {warning}");
    }
    let rolled = rollup::rollup(&report);
    let diagnosis = diagnose::diagnose(&rolled);
    if args.json {
        let document = serde_json::json!({
            "page": report.page,
            "messages": report.messages,
            "warnings": report.warnings,
            "rollup": rolled,
            "diagnosis": diagnosis,
        });
        println!("{}", serde_json::to_string_pretty(&document)?);
    } else {
        print!(
            "{}",
            render::render_for_judge_with(&rolled, &diagnosis, &sections)
        );
    }
    if report.is_empty() {
        eprintln!("kforge ncu parse: {shown} holds an ncu table without kernel rows");
        return Ok(ExitCode::from(1));
    }
    Ok(ExitCode::SUCCESS)
}
