//! Which metrics ncu collects: kforge's shipped section files, a user's own section folder, and
//! the checks that keep them honest.
//!
//! ncu loads metric sets from `.section` files (protobuf text format) found with
//! `--section-folder DIR` and enabled with `--section IDENTIFIER`. kforge ships two, in
//! `ncu-sections/` of the repository and embedded in the binary (so a binary carried alone still
//! has them): `kforge-default.section` (identifier `KforgeDefault`, the curated ≈30 metrics the
//! Judge reads) and `kforge-fast.section` (`KforgeFast`, six metrics for a quick look). At run
//! time the embedded files are written to `<cache>/ncu-sections/<content hash>/`, so concurrent
//! runs and different kforge versions never see each other's files half-written.
//!
//! A user's folder is used as is: every `*.section` file in it is enabled.
//!
//! [`MetricCatalog`] checks metric names against `ncu --query-metrics --chip <chip>` output: that
//! list holds base names (`dram__bytes_read`) and their type, and a section must name a base plus
//! a roll-up/submetric suffix legal for that type (`.sum`, `.avg.pct_of_peak_sustained_elapsed`,
//! `.ratio`, `.pct`, ...). Launch attributes (`launch__*`) and a few derived values are not in that
//! list; they are accepted when the caller adds them as always collected (the tests take them
//! from a real export that did not ask for them).
//!
//! [`LabelIndex`] maps a section's display labels back to metric names, for `--page details`
//! exports, which print labels ("Duration") instead of names (`gpu__time_duration.sum`).

use std::collections::{HashMap, HashSet};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// A shipped section file: its file name and text.
#[derive(Debug, Clone, Copy)]
pub struct ShippedSection {
    pub file_name: &'static str,
    pub text: &'static str,
}

pub const DEFAULT_SECTION: ShippedSection = ShippedSection {
    file_name: "kforge-default.section",
    text: include_str!("../../ncu-sections/kforge-default.section"),
};

pub const FAST_SECTION: ShippedSection = ShippedSection {
    file_name: "kforge-fast.section",
    text: include_str!("../../ncu-sections/kforge-fast.section"),
};

pub const SHIPPED_SECTIONS: &[ShippedSection] = &[DEFAULT_SECTION, FAST_SECTION];

/// One metric a section collects: its display label (when it has one) and ncu name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SectionMetric {
    pub label: Option<String>,
    pub name: String,
}

/// What kforge needs from a `.section` file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SectionFile {
    /// What `--section` selects it by.
    pub identifier: String,
    /// What the details page prints in its "Section Name" column.
    pub display_name: Option<String>,
    /// Every `Metrics { Label Name }` entry, anywhere in the file (header, body, hidden).
    pub metrics: Vec<SectionMetric>,
}

#[derive(Debug, thiserror::Error)]
pub enum SectionError {
    #[error("{file}:{line}: not a valid section file: {message}")]
    Syntax {
        file: String,
        line: usize,
        message: String,
    },
    #[error("{file}: the section has no Identifier")]
    NoIdentifier { file: String },
    #[error("{0}: not a folder of ncu .section files")]
    NotAFolder(String),
    #[error("{0}: the folder holds no .section files")]
    NoSections(String),
    #[error("{path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
}

/// Parses a section file's text; `file` names it in errors.
pub fn parse_section(text: &str, file: &str) -> Result<SectionFile, SectionError> {
    let fields = TextFormat::new(text, file).message(false)?;
    let scalar = |name: &str| {
        fields.iter().find_map(|(key, node)| match node {
            Node::Scalar(value) if key == name => Some(value.clone()),
            _ => None,
        })
    };
    let identifier = scalar("Identifier").ok_or_else(|| SectionError::NoIdentifier {
        file: file.to_string(),
    })?;
    let mut metrics = Vec::new();
    collect_metrics(&fields, &mut metrics);
    Ok(SectionFile {
        identifier,
        display_name: scalar("DisplayName"),
        metrics,
    })
}

fn collect_metrics(fields: &[(String, Node)], out: &mut Vec<SectionMetric>) {
    for (key, node) in fields {
        let Node::Message(inner) = node else { continue };
        if key == "Metrics" {
            let get = |name: &str| {
                inner.iter().find_map(|(k, n)| match n {
                    Node::Scalar(v) if k == name => Some(v.clone()),
                    _ => None,
                })
            };
            // Empty names are layout spacers; "breakdown:"/"group:" names are UI pseudo-metrics.
            if let Some(name) = get("Name")
                && !name.is_empty()
                && !name.contains(':')
            {
                out.push(SectionMetric {
                    label: get("Label"),
                    name,
                });
            }
        }
        // Alternative metrics of other architectures live under `Options`; not ours to collect.
        if key != "Options" {
            collect_metrics(inner, out);
        }
    }
}

enum Node {
    Scalar(String),
    Message(Vec<(String, Node)>),
}

/// A small reader for the protobuf text format, as much of it as section files use: fields
/// `name: value` and `name { ... }` (`name: { ... }` too), quoted strings (adjacent ones join),
/// bare atoms (numbers, enum names), `#` comments, optional `,`/`;` separators.
struct TextFormat<'a> {
    chars: std::iter::Peekable<std::str::CharIndices<'a>>,
    text: &'a str,
    file: &'a str,
}

enum Token {
    Atom(String),
    Str(String),
    Open,
    Close,
    Colon,
}

impl<'a> TextFormat<'a> {
    fn new(text: &'a str, file: &'a str) -> Self {
        TextFormat {
            chars: text.char_indices().peekable(),
            text,
            file,
        }
    }

    fn error(&mut self, message: impl Into<String>) -> SectionError {
        let offset = self.chars.peek().map_or(self.text.len(), |(i, _)| *i);
        SectionError::Syntax {
            file: self.file.to_string(),
            line: self.text[..offset].matches('\n').count() + 1,
            message: message.into(),
        }
    }

    fn skip_blank(&mut self) {
        while let Some(&(_, c)) = self.chars.peek() {
            if c == '#' {
                while self.chars.next_if(|&(_, c)| c != '\n').is_some() {}
            } else if c.is_whitespace() || c == ',' || c == ';' {
                self.chars.next();
            } else {
                break;
            }
        }
    }

    fn peek_token(&mut self) -> Result<Option<Token>, SectionError> {
        let saved = self.chars.clone();
        let token = self.token();
        self.chars = saved;
        token
    }

    fn token(&mut self) -> Result<Option<Token>, SectionError> {
        self.skip_blank();
        let Some(&(_, c)) = self.chars.peek() else {
            return Ok(None);
        };
        let token = match c {
            '{' => {
                self.chars.next();
                Token::Open
            }
            '}' => {
                self.chars.next();
                Token::Close
            }
            ':' => {
                self.chars.next();
                Token::Colon
            }
            '"' | '\'' => Token::Str(self.string(c)?),
            c if c.is_alphanumeric() || "_.+-".contains(c) => {
                let mut atom = String::new();
                while let Some((_, c)) = self
                    .chars
                    .next_if(|&(_, c)| c.is_alphanumeric() || "_.+-".contains(c))
                {
                    atom.push(c);
                }
                Token::Atom(atom)
            }
            other => return Err(self.error(format!("unexpected character {other:?}"))),
        };
        Ok(Some(token))
    }

    fn string(&mut self, quote: char) -> Result<String, SectionError> {
        self.chars.next();
        let mut value = String::new();
        loop {
            match self.chars.next() {
                None => return Err(self.error("unterminated string")),
                Some((_, c)) if c == quote => return Ok(value),
                Some((_, '\\')) => match self.chars.next() {
                    Some((_, 'n')) => value.push('\n'),
                    Some((_, 't')) => value.push('\t'),
                    Some((_, c)) => value.push(c),
                    None => return Err(self.error("unterminated string")),
                },
                Some((_, c)) => value.push(c),
            }
        }
    }

    /// Fields up to the end of input (`nested == false`) or the closing brace.
    fn message(&mut self, nested: bool) -> Result<Vec<(String, Node)>, SectionError> {
        let mut fields = Vec::new();
        loop {
            let name = match self.token()? {
                None if !nested => return Ok(fields),
                None => return Err(self.error("missing '}'")),
                Some(Token::Close) if nested => return Ok(fields),
                Some(Token::Atom(name)) => name,
                Some(_) => return Err(self.error("expected a field name")),
            };
            if matches!(self.peek_token()?, Some(Token::Colon)) {
                self.token()?;
            }
            let node = match self.token()? {
                Some(Token::Open) => Node::Message(self.message(true)?),
                Some(Token::Atom(atom)) => Node::Scalar(atom),
                Some(Token::Str(mut text)) => {
                    while let Some(Token::Str(more)) = self.peek_token()? {
                        self.token()?;
                        text.push_str(&more);
                    }
                    Node::Scalar(text)
                }
                _ => return Err(self.error(format!("expected a value for {name}"))),
            };
            fields.push((name, node));
        }
    }
}

/// Where the metric sets come from, as `--sections` names them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind", content = "path")]
pub enum SectionSet {
    /// kforge's curated set (`kforge-default.section`).
    Default,
    /// kforge's six-metric quick look (`kforge-fast.section`).
    Fast,
    /// Every `.section` file of a user's folder.
    Folder(PathBuf),
}

impl SectionSet {
    /// `default` / `kforge-default`, `fast` / `kforge-fast`, or else a folder path.
    pub fn from_arg(text: &str) -> SectionSet {
        match text {
            "default" | "kforge-default" => SectionSet::Default,
            "fast" | "kforge-fast" => SectionSet::Fast,
            path => SectionSet::Folder(PathBuf::from(path)),
        }
    }

    /// The folder and identifiers ncu needs; shipped sets are written under `cache_dir`.
    pub fn resolve(&self, cache_dir: &Path) -> Result<ResolvedSections, SectionError> {
        match self {
            SectionSet::Default => shipped(cache_dir, DEFAULT_SECTION),
            SectionSet::Fast => shipped(cache_dir, FAST_SECTION),
            SectionSet::Folder(folder) => user_folder(folder),
        }
    }
}

/// A section folder and the sections to enable from it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResolvedSections {
    pub folder: PathBuf,
    pub sections: Vec<SectionFile>,
}

impl ResolvedSections {
    /// `--section-folder DIR --section ID...`
    pub fn ncu_args(&self) -> Vec<OsString> {
        let mut args = vec![
            OsString::from("--section-folder"),
            self.folder.clone().into_os_string(),
        ];
        for section in &self.sections {
            args.push("--section".into());
            args.push(section.identifier.clone().into());
        }
        args
    }

    /// The built-in label index plus these sections' labels (for details exports).
    pub fn label_index(&self) -> LabelIndex {
        LabelIndex::builtin().clone().with_sections(&self.sections)
    }
}

fn shipped(cache_dir: &Path, selected: ShippedSection) -> Result<ResolvedSections, SectionError> {
    let mut hasher = Sha256::new();
    for section in SHIPPED_SECTIONS {
        hasher.update(section.file_name.as_bytes());
        hasher.update(section.text.as_bytes());
    }
    let digest = hex::encode(hasher.finalize());
    let folder = cache_dir.join("ncu-sections").join(&digest[..16]);
    let io = |path: &Path| {
        let path = crate::paths::display(path);
        move |source| SectionError::Io { path, source }
    };
    std::fs::create_dir_all(&folder).map_err(io(&folder))?;
    for section in SHIPPED_SECTIONS {
        let path = folder.join(section.file_name);
        if std::fs::read_to_string(&path).is_ok_and(|text| text == section.text) {
            continue;
        }
        // Written beside and renamed into place, so a concurrent ncu never reads half a file.
        let mut staged = tempfile::NamedTempFile::new_in(&folder).map_err(io(&folder))?;
        std::io::Write::write_all(&mut staged, section.text.as_bytes()).map_err(io(&path))?;
        staged.persist(&path).map_err(|e| io(&path)(e.error))?;
    }
    Ok(ResolvedSections {
        folder,
        sections: vec![parse_section(selected.text, selected.file_name)?],
    })
}

fn user_folder(folder: &Path) -> Result<ResolvedSections, SectionError> {
    let shown = crate::paths::display(folder);
    if !folder.is_dir() {
        return Err(SectionError::NotAFolder(shown));
    }
    let entries = std::fs::read_dir(folder).map_err(|source| SectionError::Io {
        path: shown.clone(),
        source,
    })?;
    let mut files: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .map(|entry| entry.path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "section"))
        .collect();
    files.sort();
    if files.is_empty() {
        return Err(SectionError::NoSections(shown));
    }
    let mut sections = Vec::new();
    for path in files {
        let name = crate::paths::display(&path);
        let text = std::fs::read_to_string(&path).map_err(|source| SectionError::Io {
            path: name.clone(),
            source,
        })?;
        sections.push(parse_section(&text, &name)?);
    }
    Ok(ResolvedSections {
        folder: folder.to_path_buf(),
        sections,
    })
}

/// (section display name, label) → metric name, for details exports.
#[derive(Debug, Clone, Default)]
pub struct LabelIndex {
    names: HashMap<(String, String), String>,
}

/// The labels of ncu's stock sections (2025.3) as the details page prints them, with the metric
/// each shows on sm_90 (where a section picks a metric per architecture, the Hopper one).
const STOCK_LABELS: &[(&str, &[(&str, &str)])] = &[
    (
        "GPU Speed Of Light Throughput",
        &[
            (
                "Compute (SM) Throughput",
                "sm__throughput.avg.pct_of_peak_sustained_elapsed",
            ),
            ("Duration", "gpu__time_duration.sum"),
            (
                "Memory Throughput",
                "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",
            ),
            ("Elapsed Cycles", "gpc__cycles_elapsed.max"),
            (
                "L1/TEX Cache Throughput",
                "l1tex__throughput.avg.pct_of_peak_sustained_active",
            ),
            ("SM Active Cycles", "sm__cycles_active.avg"),
            (
                "L2 Cache Throughput",
                "lts__throughput.avg.pct_of_peak_sustained_elapsed",
            ),
            ("SM Frequency", "gpc__cycles_elapsed.avg.per_second"),
            (
                "DRAM Throughput",
                "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed",
            ),
            ("DRAM Frequency", "dram__cycles_elapsed.avg.per_second"),
        ],
    ),
    (
        "Compute Workload Analysis",
        &[
            (
                "Executed Ipc Elapsed",
                "sm__inst_executed.avg.per_cycle_elapsed",
            ),
            (
                "SM Busy",
                "sm__instruction_throughput.avg.pct_of_peak_sustained_elapsed",
            ),
            (
                "Executed Ipc Active",
                "sm__inst_executed.avg.per_cycle_active",
            ),
            (
                "Issue Slots Busy",
                "sm__inst_issued.avg.pct_of_peak_sustained_elapsed",
            ),
            ("Issued Ipc Active", "sm__inst_issued.avg.per_cycle_active"),
        ],
    ),
    (
        "Memory Workload Analysis",
        &[
            ("Memory Throughput", "dram__bytes.sum.per_second"),
            (
                "Mem Busy",
                "gpu__compute_memory_access_throughput.avg.pct_of_peak_sustained_elapsed",
            ),
            ("L1/TEX Hit Rate", "l1tex__t_sector_hit_rate.pct"),
            (
                "Max Bandwidth",
                "gpu__compute_memory_request_throughput.avg.pct_of_peak_sustained_elapsed",
            ),
            ("L2 Hit Rate", "lts__t_sector_hit_rate.pct"),
            (
                "Mem Pipes Busy",
                "sm__memory_throughput.avg.pct_of_peak_sustained_elapsed",
            ),
            ("L2 Compression Input Sectors", "lrc__ilc_input_sectors.sum"),
            (
                "L2 Compression Ratio",
                "lrc__average_ilc_output_sector_compression_achieved_rate.pct",
            ),
            (
                "L2 Compression Success Rate",
                "lrc__average_ilc_input_sector_success_rate.pct",
            ),
            (
                "Local Memory Spilling Requests",
                "derived__local_spilling_requests",
            ),
            (
                "Local Memory Spilling Request Overhead",
                "derived__local_spilling_requests_pct",
            ),
            ("L2 Persisting Size", "launch__persisting_l2_cache_size"),
        ],
    ),
    (
        "Scheduler Statistics",
        &[
            (
                "One or More Eligible",
                "smsp__issue_active.avg.pct_of_peak_sustained_active",
            ),
            (
                "Issued Warp Per Scheduler",
                "smsp__issue_active.avg.per_cycle_active",
            ),
            (
                "No Eligible",
                "smsp__issue_inst0.avg.pct_of_peak_sustained_active",
            ),
            (
                "Active Warps Per Scheduler",
                "smsp__warps_active.avg.per_cycle_active",
            ),
            (
                "Eligible Warps Per Scheduler",
                "smsp__warps_eligible.avg.per_cycle_active",
            ),
        ],
    ),
    (
        "Warp State Statistics",
        &[
            (
                "Warp Cycles Per Issued Instruction",
                "smsp__average_warp_latency_per_inst_issued.ratio",
            ),
            (
                "Warp Cycles Per Executed Instruction",
                "smsp__average_warps_active_per_inst_executed.ratio",
            ),
            (
                "Avg. Active Threads Per Warp",
                "smsp__thread_inst_executed_per_inst_executed.ratio",
            ),
            (
                "Avg. Not Predicated Off Threads Per Warp",
                "smsp__thread_inst_executed_pred_on_per_inst_executed.ratio",
            ),
        ],
    ),
    (
        "Instruction Statistics",
        &[
            ("Executed Instructions", "smsp__inst_executed.sum"),
            (
                "Avg. Executed Instructions Per Scheduler",
                "smsp__inst_executed.avg",
            ),
            ("Issued Instructions", "smsp__inst_issued.sum"),
            (
                "Avg. Issued Instructions Per Scheduler",
                "smsp__inst_issued.avg",
            ),
        ],
    ),
    (
        "Launch Statistics",
        &[
            ("Grid Size", "launch__grid_size"),
            ("Block Size", "launch__block_size"),
            ("Registers Per Thread", "launch__registers_per_thread"),
            (
                "Static Shared Memory Per Block",
                "launch__shared_mem_per_block_static",
            ),
            (
                "Dynamic Shared Memory Per Block",
                "launch__shared_mem_per_block_dynamic",
            ),
            (
                "Driver Shared Memory Per Block",
                "launch__shared_mem_per_block_driver",
            ),
            (
                "Shared Memory Configuration Size",
                "launch__shared_mem_config_size",
            ),
            ("Threads", "launch__thread_count"),
            ("Waves Per SM", "launch__waves_per_multiprocessor"),
            ("# SMs", "launch__sm_count"),
            ("# TPCs", "launch__tpc_count"),
            ("Enabled TPC IDs", "launch__tpc_enabled"),
            ("Stack Size", "launch__stack_size"),
            ("Function Cache Configuration", "launch__func_cache_config"),
            ("Cluster Size", "launch__cluster_size"),
            (
                "Cluster Scheduling Policy",
                "launch__cluster_scheduling_policy",
            ),
            ("Uses Green Context", "launch__uses_green_context"),
        ],
    ),
    (
        "Occupancy",
        &[
            (
                "Theoretical Occupancy",
                "sm__maximum_warps_per_active_cycle_pct",
            ),
            (
                "Theoretical Active Warps per SM",
                "sm__maximum_warps_avg_per_active_cycle",
            ),
            (
                "Achieved Occupancy",
                "sm__warps_active.avg.pct_of_peak_sustained_active",
            ),
            (
                "Achieved Active Warps Per SM",
                "sm__warps_active.avg.per_cycle_active",
            ),
            ("Block Limit Registers", "launch__occupancy_limit_registers"),
            (
                "Block Limit Shared Mem",
                "launch__occupancy_limit_shared_mem",
            ),
            ("Block Limit Warps", "launch__occupancy_limit_warps"),
            ("Block Limit SM", "launch__occupancy_limit_blocks"),
            ("Block Limit Barriers", "launch__occupancy_limit_barriers"),
            ("Cluster Occupancy", "launch__occupancy_cluster_pct"),
            ("Overall GPU Occupancy", "launch__occupancy_cluster_gpu_pct"),
            ("Max Active Clusters", "launch__cluster_max_active"),
            ("Max Cluster Size", "launch__cluster_max_potential_size"),
        ],
    ),
    (
        "GPU and Memory Workload Distribution",
        &[
            ("Average SM Active Cycles", "sm__cycles_active.avg"),
            ("Average L1 Active Cycles", "l1tex__cycles_active.avg"),
            ("Average L2 Active Cycles", "lts__cycles_active.avg"),
            ("Average SMSP Active Cycles", "smsp__cycles_active.avg"),
            ("Average DRAM Active Cycles", "dram__cycles_active.avg"),
            ("Total SM Elapsed Cycles", "sm__cycles_elapsed.sum"),
            ("Total L1 Elapsed Cycles", "l1tex__cycles_elapsed.sum"),
            ("Total L2 Elapsed Cycles", "lts__cycles_elapsed.sum"),
            ("Total SMSP Elapsed Cycles", "smsp__cycles_elapsed.sum"),
            ("Total DRAM Elapsed Cycles", "dram__cycles_elapsed.sum"),
        ],
    ),
    (
        "Source Counters",
        &[
            ("Branch Instructions", "smsp__inst_executed_op_branch.sum"),
            (
                "Branch Efficiency",
                "smsp__sass_average_branch_targets_threads_uniform.pct",
            ),
            (
                "Branch Instructions Ratio",
                "derived__smsp__inst_executed_op_branch_pct",
            ),
            (
                "Avg. Divergent Branches",
                "smsp__sass_branch_targets_threads_divergent.avg",
            ),
        ],
    ),
];

impl LabelIndex {
    /// ncu's stock sections and kforge's shipped ones.
    pub fn builtin() -> &'static LabelIndex {
        static BUILTIN: OnceLock<LabelIndex> = OnceLock::new();
        BUILTIN.get_or_init(|| {
            let mut index = LabelIndex::default();
            for (section, labels) in STOCK_LABELS {
                for (label, name) in *labels {
                    index.insert(section, label, name);
                }
            }
            // The shipped files are part of this binary and parse (a test pins that).
            let shipped: Vec<SectionFile> = SHIPPED_SECTIONS
                .iter()
                .filter_map(|s| parse_section(s.text, s.file_name).ok())
                .collect();
            index.with_sections(&shipped)
        })
    }

    /// This index plus the labels of `sections` (keyed by their display names).
    pub fn with_sections(mut self, sections: &[SectionFile]) -> LabelIndex {
        for section in sections {
            let shown = section
                .display_name
                .as_deref()
                .unwrap_or(&section.identifier);
            for metric in &section.metrics {
                if let Some(label) = &metric.label {
                    self.insert(shown, label, &metric.name);
                }
            }
        }
        self
    }

    fn insert(&mut self, section: &str, label: &str, name: &str) {
        self.names
            .insert((section.to_string(), label.to_string()), name.to_string());
    }

    pub fn resolve(&self, section: &str, label: &str) -> Option<&str> {
        self.names
            .get(&(section.to_string(), label.to_string()))
            .map(String::as_str)
    }
}

/// A metric's type in `ncu --query-metrics`, which decides its legal suffixes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum MetricKind {
    Counter,
    Ratio,
    Throughput,
}

/// Why a metric name would not collect on the chip of a catalog.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MetricProblem {
    #[error("{metric}: the chip has no metric {base}")]
    Unknown { metric: String, base: String },
    #[error("{metric}: {suffix:?} is not a roll-up of a {kind:?} metric")]
    BadSuffix {
        metric: String,
        kind: MetricKind,
        suffix: String,
    },
}

/// The metrics one chip offers, from `ncu --query-metrics --chip <chip>`.
#[derive(Debug, Clone, Default)]
pub struct MetricCatalog {
    kinds: HashMap<String, MetricKind>,
    always_collected: HashSet<String>,
}

const ROLLUPS: &[&str] = &["sum", "avg", "min", "max"];
const PCT_OF_PEAK: &[&str] = &[
    "pct_of_peak_sustained_active",
    "pct_of_peak_sustained_elapsed",
    "pct_of_peak_sustained_region",
    "pct_of_peak_sustained_frame",
];
const COUNTER_SUBMETRICS: &[&str] = &[
    "peak_sustained",
    "peak_sustained_active",
    "peak_sustained_active.per_second",
    "peak_sustained_elapsed",
    "peak_sustained_elapsed.per_second",
    "peak_sustained_region",
    "peak_sustained_region.per_second",
    "peak_sustained_frame",
    "peak_sustained_frame.per_second",
    "per_cycle_active",
    "per_cycle_elapsed",
    "per_cycle_in_region",
    "per_cycle_in_frame",
    "per_second",
];
const RATIO_SUFFIXES: &[&str] = &["ratio", "pct", "max_rate"];

impl MetricCatalog {
    /// Reads the table `ncu --query-metrics` prints (name, type, unit, description; wrapped
    /// description lines start with blanks and are skipped).
    pub fn from_query_metrics(text: &str) -> MetricCatalog {
        let mut catalog = MetricCatalog::default();
        for line in text.lines() {
            if line.starts_with(char::is_whitespace) {
                continue;
            }
            let mut words = line.split_whitespace();
            let (Some(name), Some(kind)) = (words.next(), words.next()) else {
                continue;
            };
            let kind = match kind {
                "Counter" => MetricKind::Counter,
                "Ratio" => MetricKind::Ratio,
                "Throughput" => MetricKind::Throughput,
                _ => continue,
            };
            if name.contains("__") {
                catalog.kinds.insert(name.to_string(), kind);
            }
        }
        catalog
    }

    /// Base names known.
    pub fn len(&self) -> usize {
        self.kinds.len()
    }

    pub fn is_empty(&self) -> bool {
        self.kinds.is_empty()
    }

    /// Adds full metric names ncu collects for every launch but does not list as queryable
    /// (launch attributes, device attributes, occupancy-calculator values).
    pub fn with_always_collected<I, S>(mut self, names: I) -> MetricCatalog
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.always_collected
            .extend(names.into_iter().map(Into::into));
        self
    }

    pub fn kind(&self, base: &str) -> Option<MetricKind> {
        self.kinds.get(base).copied()
    }

    /// Whether `metric` (base name plus suffix) can be collected on this chip.
    pub fn check(&self, metric: &str) -> Result<(), MetricProblem> {
        if self.always_collected.contains(metric) {
            return Ok(());
        }
        let (base, suffix) = metric.split_once('.').unwrap_or((metric, ""));
        let Some(kind) = self.kind(base) else {
            return Err(MetricProblem::Unknown {
                metric: metric.to_string(),
                base: base.to_string(),
            });
        };
        let legal = match kind {
            MetricKind::Ratio => RATIO_SUFFIXES.contains(&suffix),
            MetricKind::Counter | MetricKind::Throughput => {
                let (rollup, submetric) = match suffix.split_once('.') {
                    Some((r, s)) => (r, Some(s)),
                    None => (suffix, None),
                };
                ROLLUPS.contains(&rollup)
                    && submetric.is_none_or(|s| {
                        PCT_OF_PEAK.contains(&s)
                            || (kind == MetricKind::Counter && COUNTER_SUBMETRICS.contains(&s))
                    })
            }
        };
        if legal {
            Ok(())
        } else {
            Err(MetricProblem::BadSuffix {
                metric: metric.to_string(),
                kind,
                suffix: suffix.to_string(),
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shipped_sections_parse() {
        let default = parse_section(DEFAULT_SECTION.text, DEFAULT_SECTION.file_name).unwrap();
        assert_eq!(default.identifier, "KforgeDefault");
        assert_eq!(
            default.display_name.as_deref(),
            Some("kforge default metrics")
        );
        assert!(default.metrics.len() >= 30, "{}", default.metrics.len());
        let fast = parse_section(FAST_SECTION.text, FAST_SECTION.file_name).unwrap();
        assert_eq!(fast.identifier, "KforgeFast");
        assert_eq!(fast.metrics.len(), 6);
    }

    #[test]
    fn reads_nested_metrics_comments_and_options() {
        let text = r#"
            # a comment
            Identifier: "Probe"
            DisplayName: "Probe " "metrics"
            Header {
              Metrics { Label: "Duration" Name: "gpu__time_duration.sum" }
              Metrics { Name: "" }
            }
            Metrics {
              Metrics {
                Label: "Tensor"
                Name: "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed"
                Options { Name: "sm__pipe_tensor_cycles_active_v2.avg.pct_of_peak_sustained_elapsed" }
                Filter { MinArch: CC_90 }
              }
            }
            Body { Items { Table { Metrics { Name: "breakdown:sm__throughput.avg" } } } }
            SourceMetrics { Metrics { Label: "stall_imc" Name: "smsp__pcsamp_warps_issue_stalled_imc_miss" Groups: "g", } }
        "#;
        let section = parse_section(text, "probe.section").unwrap();
        assert_eq!(section.display_name.as_deref(), Some("Probe metrics"));
        let names: Vec<&str> = section.metrics.iter().map(|m| m.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "gpu__time_duration.sum",
                "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed",
                "smsp__pcsamp_warps_issue_stalled_imc_miss",
            ]
        );
    }

    #[test]
    fn syntax_errors_name_the_line() {
        let err = parse_section(
            "Identifier: \"x\"\nHeader {\n  Metrics { Name: \"a\" }\n",
            "x.section",
        )
        .unwrap_err();
        assert!(err.to_string().contains("missing '}'"), "{err}");
        let err = parse_section("DisplayName: \"x\"", "x.section").unwrap_err();
        assert!(matches!(err, SectionError::NoIdentifier { .. }));
        let err = parse_section("Identifier: \"x\"\n\nName = 3", "x.section").unwrap_err();
        match err {
            SectionError::Syntax { line, .. } => assert_eq!(line, 3),
            other => panic!("{other}"),
        }
    }

    #[test]
    fn catalog_checks_suffixes_by_kind() {
        let catalog = MetricCatalog::from_query_metrics(
            "Metric Name   Metric Type   Metric Unit   Metric Description\n\
             dram__bytes_read   Counter   byte   # of bytes read\n\
             sm__throughput     Throughput %     SM throughput\n\
             lts__t_sector_hit_rate Ratio %     hit rate\n\
                                                 wrapped description line\n",
        )
        .with_always_collected(["launch__grid_size"]);
        assert_eq!(catalog.len(), 3);
        for ok in [
            "dram__bytes_read.sum",
            "dram__bytes_read.sum.per_second",
            "dram__bytes_read.avg.pct_of_peak_sustained_elapsed",
            "sm__throughput.avg.pct_of_peak_sustained_elapsed",
            "lts__t_sector_hit_rate.pct",
            "launch__grid_size",
        ] {
            assert_eq!(catalog.check(ok), Ok(()), "{ok}");
        }
        for bad in [
            "dram__bytes_read",
            "dram__bytes_read.total",
            "sm__throughput.avg.per_second",
            "lts__t_sector_hit_rate.sum",
        ] {
            assert!(
                matches!(catalog.check(bad), Err(MetricProblem::BadSuffix { .. })),
                "{bad}"
            );
        }
        assert!(matches!(
            catalog.check("dram__bytez.sum"),
            Err(MetricProblem::Unknown { .. })
        ));
    }

    #[test]
    fn shipped_sets_are_written_once_and_resolve_to_ncu_args() {
        let cache = tempfile::tempdir().unwrap();
        let resolved = SectionSet::Default.resolve(cache.path()).unwrap();
        let text = std::fs::read_to_string(resolved.folder.join("kforge-default.section")).unwrap();
        assert_eq!(text, DEFAULT_SECTION.text);
        assert!(resolved.folder.join("kforge-fast.section").is_file());
        let args: Vec<String> = resolved
            .ncu_args()
            .into_iter()
            .map(|a| a.into_string().unwrap())
            .collect();
        assert_eq!(args[0], "--section-folder");
        assert_eq!(args[2..], ["--section", "KforgeDefault"]);
        let again = SectionSet::Fast.resolve(cache.path()).unwrap();
        assert_eq!(again.folder, resolved.folder);
        assert_eq!(again.sections[0].identifier, "KforgeFast");
    }

    #[test]
    fn user_folders_enable_every_section() {
        let folder = tempfile::tempdir().unwrap();
        std::fs::write(folder.path().join("b.section"), "Identifier: \"B\"").unwrap();
        std::fs::write(folder.path().join("a.section"), "Identifier: \"A\"").unwrap();
        std::fs::write(folder.path().join("notes.txt"), "not a section").unwrap();
        let set = SectionSet::from_arg(folder.path().to_str().unwrap());
        let resolved = set.resolve(Path::new("/nonexistent")).unwrap();
        let ids: Vec<&str> = resolved
            .sections
            .iter()
            .map(|s| s.identifier.as_str())
            .collect();
        assert_eq!(ids, ["A", "B"]);
        let empty = tempfile::tempdir().unwrap();
        assert!(matches!(
            SectionSet::Folder(empty.path().into()).resolve(Path::new("/nonexistent")),
            Err(SectionError::NoSections(_))
        ));
        assert!(matches!(
            SectionSet::from_arg("/nonexistent/sections").resolve(Path::new("/tmp")),
            Err(SectionError::NotAFolder(_))
        ));
        assert_eq!(SectionSet::from_arg("default"), SectionSet::Default);
        assert_eq!(SectionSet::from_arg("kforge-fast"), SectionSet::Fast);
    }

    #[test]
    fn labels_resolve_per_section() {
        let index = LabelIndex::builtin();
        assert_eq!(
            index.resolve("GPU Speed Of Light Throughput", "Memory Throughput"),
            Some("gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed")
        );
        assert_eq!(
            index.resolve("Memory Workload Analysis", "Memory Throughput"),
            Some("dram__bytes.sum.per_second")
        );
        assert_eq!(
            index.resolve("kforge default metrics", "Stall Barrier"),
            Some("smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio")
        );
        assert_eq!(index.resolve("PM Sampling", "Maximum Buffer Size"), None);
    }
}
