//! `kforge import`: its flags, one line per problem as it finishes (imported / unchanged /
//! skipped: reason), a summary, and the exit code: 0 when anything could be imported, 1 when
//! nothing could, 2 when the import could not run at all.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::{Args, ValueEnum};

use super::import::{
    self, BaselineMode, ImportOptions, ImportReport, ImportResult, ImportStatus, PROBLEM_TIMEOUT,
    PROBLEM_TIMEOUT_WITH_BASELINES,
};
use super::spec::BundleDevice;
use crate::config::Settings;
use crate::paths;
use crate::tools::{self, Tool};

#[derive(Debug, Args)]
pub struct ImportArgs {
    /// Problem files, folders of them, or a KernelBench checkout (imported level by level).
    #[arg(required = true, value_name = "FILE.py|DIR")]
    pub paths: Vec<PathBuf>,
    /// Only this level of a checkout; the level recorded for problems outside one.
    #[arg(long)]
    pub level: Option<u32>,
    /// Where bundles go (default: <home>/bundles).
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Override a module-level size constant before get_inputs/get_init_inputs run
    /// (repeatable), e.g. --size batch_size=16 --size dim=1024.
    #[arg(long = "size", value_name = "NAME=VALUE", value_parser = parse_size)]
    pub sizes: Vec<(String, String)>,
    /// Trace on this device (default: the GPU when torch sees one, else the CPU).
    #[arg(long, value_enum)]
    pub device: Option<DeviceArg>,
    /// Measure eager and torch.compile baselines (default when a GPU is present).
    #[arg(long, overrides_with = "no_baselines")]
    pub baselines: bool,
    /// Do not measure baselines.
    #[arg(long, overrides_with = "baselines")]
    pub no_baselines: bool,
    /// Measure baselines again even where this GPU's are recorded.
    #[arg(long)]
    pub rebaseline: bool,
    /// Seconds one problem may take before it is skipped (default 300, 900 with baselines).
    #[arg(long, value_name = "SECONDS")]
    pub timeout: Option<u64>,
    /// Print the report as one JSON object instead of lines.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum DeviceArg {
    Cuda,
    Cpu,
}

fn parse_size(text: &str) -> Result<(String, String), String> {
    import::parse_size(text).map_err(|e| e.to_string())
}

/// Runs `kforge import`.
pub async fn run(args: ImportArgs, settings: &Settings) -> anyhow::Result<ExitCode> {
    let files = import::plan(&args.paths, args.level)?;
    let python = tools::locate(Tool::Python, settings).context(
        "kforge import needs python3 with torch (run scripts/setup.sh or set tools.python)",
    )?;
    let baselines = match (args.baselines, args.no_baselines) {
        (true, _) => BaselineMode::On,
        (_, true) => BaselineMode::Off,
        _ => BaselineMode::Auto,
    };
    let default_timeout = if baselines == BaselineMode::Off {
        PROBLEM_TIMEOUT
    } else {
        PROBLEM_TIMEOUT_WITH_BASELINES
    };
    let options = ImportOptions {
        out: args
            .out
            .clone()
            .unwrap_or_else(|| super::default_bundle_root(settings)),
        sizes: args.sizes.clone(),
        device: args.device.map(|d| match d {
            DeviceArg::Cuda => BundleDevice::Cuda,
            DeviceArg::Cpu => BundleDevice::Cpu,
        }),
        baselines,
        rebaseline: args.rebaseline,
        problem_timeout: args.timeout.map_or(default_timeout, Duration::from_secs),
    };
    tracing::info!(
        "importing {} problem file(s) with {} ({})",
        files.len(),
        paths::display(&python.path),
        python.found_by
    );
    let json = args.json;
    let width = files
        .iter()
        .map(|f| f.name.len())
        .max()
        .unwrap_or(0)
        .min(40);
    let report = import::import(&python.path, &files, &options, |result| {
        if !json {
            println!("{}", render_result(result, width));
        }
    })
    .await?;
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({
                "out": options.out,
                "exporter": report.exporter,
                "imported": report.count(ImportStatus::Imported),
                "unchanged": report.count(ImportStatus::Unchanged),
                "skipped": report.count(ImportStatus::Skipped),
                "unused_sizes": report.unused_sizes,
                "results": report.results,
            }))?
        );
    } else {
        print!("{}", render_summary(&report, &options, baselines));
    }
    let usable = report.count(ImportStatus::Imported) + report.count(ImportStatus::Unchanged);
    Ok(if usable > 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// `imported   softmax_rows   1 input → 1 output · 8.6 GB moved · 0 FLOP`, then the baseline.
pub fn render_result(result: &ImportResult, width: usize) -> String {
    match result.status {
        ImportStatus::Skipped => format!(
            "skipped    {}: {}",
            result.file,
            result.reason.as_deref().unwrap_or("no reason given")
        ),
        ImportStatus::Unchanged | ImportStatus::Imported => {
            let status = if result.status == ImportStatus::Imported {
                "imported "
            } else {
                "unchanged"
            };
            let mut line = format!("{status}  {:<width$}", result.name);
            if let (Some(inputs), Some(outputs)) = (result.inputs, result.outputs) {
                line.push_str(&format!(
                    "  {inputs} input{} → {outputs} output{}",
                    plural(inputs),
                    plural(outputs)
                ));
            }
            if let Some(bytes) = result.min_bytes {
                line.push_str(&format!(" · {} moved", si(bytes as f64, "B")));
            }
            if let Some(flops) = result.flops {
                line.push_str(&format!(" · {}", si(flops as f64, "FLOP")));
            }
            if result.stochastic == Some(true) {
                line.push_str(" · stochastic: exported in eval mode");
            }
            if let Some(baseline) = &result.baseline {
                line.push_str(&format!(
                    "\n           baseline {}",
                    render_baseline(baseline)
                ));
            }
            line
        }
    }
}

fn render_baseline(baseline: &import::BaselineSummary) -> String {
    match baseline.status.as_str() {
        "measured" | "reused" => {
            let ms = |v: Option<f64>| v.map_or_else(|| "—".to_string(), |v| format!("{v:.3} ms"));
            let mut text = format!(
                "({}): eager {}, torch.compile {}, reference {}, floor {}",
                baseline.status,
                ms(baseline.eager_ms),
                ms(baseline.compile_ms),
                ms(baseline.reference_ms),
                ms(baseline.floor_ms),
            );
            if let Some(bound) = &baseline.floor_bound {
                text.push_str(&format!(" ({bound}-bound)"));
            }
            if let Some(error) = &baseline.compile_error {
                text.push_str(&format!("; torch.compile failed: {error}"));
            }
            text
        }
        status => format!(
            "{status}: {}",
            baseline.reason.as_deref().unwrap_or("no reason given")
        ),
    }
}

fn render_summary(report: &ImportReport, options: &ImportOptions, mode: BaselineMode) -> String {
    let mut text = format!(
        "\n{} problem{}: {} imported, {} unchanged, {} skipped · bundles in {}\n",
        report.results.len(),
        plural(report.results.len()),
        report.count(ImportStatus::Imported),
        report.count(ImportStatus::Unchanged),
        report.count(ImportStatus::Skipped),
        paths::display(&options.out),
    );
    if let Some(exporter) = &report.exporter {
        text.push_str(&format!(
            "traced on {} with torch {} (python {})\n",
            exporter.device.as_str(),
            exporter.torch,
            exporter.python
        ));
        match (&exporter.gpu, exporter.baselines) {
            (Some(gpu), true) => {
                text.push_str(&format!("baselines measured on {gpu}"));
                if let Some(bandwidth) = exporter.bandwidth_bytes_per_s {
                    text.push_str(&format!(" (copy bandwidth {})", si(bandwidth, "B/s")));
                }
                text.push('\n');
            }
            _ if mode != BaselineMode::Off || options.rebaseline => {
                text.push_str(&format!(
                    "baselines: not measured ({})\n",
                    exporter.baselines_reason.as_deref().unwrap_or("no GPU")
                ));
            }
            _ => {}
        }
    }
    for name in &report.unused_sizes {
        text.push_str(&format!(
            "warning: --size {name} matched no module-level constant in any problem\n"
        ));
    }
    text
}

fn plural(n: usize) -> &'static str {
    if n == 1 { "" } else { "s" }
}

/// `4.3 GB`, `137 GFLOP`, `512 B`.
pub fn si(value: f64, unit: &str) -> String {
    const PREFIXES: [(f64, &str); 5] =
        [(1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")];
    for (scale, prefix) in PREFIXES {
        if value >= scale {
            return format!("{:.1} {prefix}{unit}", value / scale);
        }
    }
    format!("{value:.0} {unit}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_read_with_si_prefixes() {
        assert_eq!(si(4.3e9, "B"), "4.3 GB");
        assert_eq!(si(137e9, "FLOP"), "137.0 GFLOP");
        assert_eq!(si(512.0, "B"), "512 B");
        assert_eq!(si(0.0, "FLOP"), "0 FLOP");
    }

    #[test]
    fn a_skip_names_the_file_and_the_reason() {
        let result: ImportResult = serde_json::from_str(
            r#"{"file": "probs/bad.py", "name": "bad", "status": "skipped", "reason": "syntax error at line 3: invalid syntax"}"#,
        )
        .unwrap();
        assert_eq!(
            render_result(&result, 10),
            "skipped    probs/bad.py: syntax error at line 3: invalid syntax"
        );
    }
}
