//! Nsight Compute feedback: the Judge's eyes on the hardware.
//!
//! The pieces, in the order the evaluator uses them:
//! - [`sections`]: the metric sets kforge ships (`ncu-sections/*.section`, embedded in the binary
//!   and written to a cache folder at run time) or a user's own section folder, as ncu arguments;
//!   plus a check of metric names against `ncu --query-metrics` output.
//! - [`command`]: the ncu command lines for profiling one worker process (the worker brackets the
//!   candidate call with the driver's profiler start/stop) and for exporting the report as CSV,
//!   and the typed reasons a profile can be unavailable (no ncu, counters not permitted, ...).
//! - [`parse`]: ncu's `--csv --page raw` and `--page details` exports into one per-kernel metric
//!   map with typed values and normalised units.
//! - [`rollup`]: several kernels in one call combined by duration share.
//! - [`diagnose`]: documented rules that turn the numbers into ranked findings.
//! - [`render`]: the compact text the Judge reads.
//! - [`cli`]: `kforge ncu parse <export.csv>`.
//!
//! Nothing here needs a GPU; only running the commands from [`command`] does.

pub mod cli;
pub mod command;
pub mod diagnose;
pub mod metrics;
pub mod parse;
pub mod render;
pub mod rollup;
pub mod sections;

pub use command::{
    DEFAULT_IMPORT_TIMEOUT, DEFAULT_MAX_LAUNCHES, DEFAULT_PROFILE_TIMEOUT, ProfileCommands,
    ProfileRun, ProfileSpec, ProfileUnavailable, classify_profile_output, classify_spawn_error,
    collect, import_command, profile_commands,
};
pub use diagnose::{Bound, BoundVerdict, Diagnosis, Evidence, Finding, Rule, Severity, diagnose};
pub use parse::{
    KernelLaunch, MessageLevel, Metric, MetricMap, MetricValue, NcuReport, Page, ParseError,
    ProfilerMessage, RuleResult, parse_csv, parse_details_csv, parse_details_csv_with,
    parse_raw_csv,
};
pub use render::{render_for_judge, render_for_judge_with};
pub use rollup::{KernelShare, Rollup, RollupRule, Weighting, rollup};
pub use sections::{LabelIndex, MetricCatalog, ResolvedSections, SectionFile, SectionSet};
