//! Reading Nsight Compute's CSV exports into typed, per-kernel metric maps.
//!
//! Two layouts, either of which users may have:
//! - `--csv --page raw`: a header row of metric names, a units row, then one row per profiled
//!   kernel launch. Every column is a metric (`dram__bytes_read.sum`, but also `inst_executed`
//!   or `memory_l1_wavefronts_shared` of the source counters) except the identity columns (ID,
//!   Process ID, Kernel Name, Block Size, Grid Size, Device, CC, ...).
//! - `--csv --page details`: one row per (kernel, section, metric) with the section's display
//!   label instead of the metric name ("Duration"), its unit and value, and the rule results
//!   (ncu's own advice) as rows with a rule name. Labels are mapped back to metric names through a
//!   [`LabelIndex`] (ncu's stock sections and kforge's own); a label it does not know is kept as
//!   `"<section>: <label>"`.
//!
//! What the parser tolerates, because real exports have it: the profiled program's own stdout and
//! ncu's `==PROF==` / `==WARNING==` / `==ERROR==` lines before, inside or after the table (the
//! messages are kept, the program's lines are counted); quoted numbers with thousands separators
//! (`"208,445,952"`); `n/a` and empty cells; commas inside quoted kernel names
//! (`"void foo<float, 4>(float *, int)"`); a row cut short (kept, marked truncated); a missing
//! units row (values kept, without units). Each tolerated oddity is noted in
//! [`NcuReport::warnings`].
//!
//! Units are normalised so values compare across exports made with `--print-units base` or auto
//! units: durations to nanoseconds (`us` → `ns`), bytes to bytes (`Kbyte`, `Mbyte`, `Gbyte` are
//! decimal, as ncu uses them), per-time rates to per second (`Gbyte/second` → `byte/s`,
//! `cycle/nsecond` → `hz`), frequencies to hertz; other units are kept as written.

use std::collections::{BTreeMap, HashMap};

use serde::{Deserialize, Serialize};

use crate::ncu::sections::LabelIndex;

/// Metric name → value, ordered by name.
pub type MetricMap = BTreeMap<String, Metric>;

/// Which `--page` an export was made with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Page {
    Raw,
    Details,
}

impl std::fmt::Display for Page {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Page::Raw => "raw",
            Page::Details => "details",
        })
    }
}

/// One cell's value, typed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", content = "value", rename_all = "snake_case")]
pub enum MetricValue {
    Int(i64),
    Float(f64),
    Text(String),
    /// ncu printed `n/a` (the metric does not apply or could not be collected).
    NotAvailable,
    /// The cell was empty.
    Empty,
}

impl MetricValue {
    /// The value as a number, when it is one.
    pub fn as_f64(&self) -> Option<f64> {
        match self {
            MetricValue::Int(v) => Some(*v as f64),
            MetricValue::Float(v) => Some(*v),
            _ => None,
        }
    }
}

/// A metric's value with its normalised unit (`""` for unitless counts).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Metric {
    pub value: MetricValue,
    pub unit: String,
}

impl Metric {
    /// Parses one cell written in `unit` (as ncu prints it), normalising the unit.
    pub fn parse(cell: &str, unit: &str) -> Metric {
        let cell = cell.trim();
        let (exponent, unit) = normalise_unit(unit.trim());
        let value = if cell.is_empty() {
            MetricValue::Empty
        } else if cell.eq_ignore_ascii_case("n/a") {
            MetricValue::NotAvailable
        } else {
            parse_number(cell, exponent).unwrap_or_else(|| MetricValue::Text(cell.to_string()))
        };
        Metric { value, unit }
    }

    pub fn number(&self) -> Option<f64> {
        self.value.as_f64()
    }
}

/// The level of an ncu message line (`==PROF==`, `==WARNING==`, `==ERROR==`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MessageLevel {
    Prof,
    Warning,
    Error,
    Other,
}

/// One `==LEVEL== text` line ncu printed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProfilerMessage {
    pub level: MessageLevel,
    pub text: String,
}

/// One of ncu's rule results (details page only): its advice for a kernel.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RuleResult {
    /// The section identifier the rule belongs to ("SpeedOfLight").
    pub section: String,
    /// The rule's name ("SOLBottleneck").
    pub rule: String,
    /// ncu's rule type: "OPT" (optimisation), "INF" (information), "WRN", "ERR".
    pub kind: String,
    pub message: String,
    /// ncu's estimate of the speedup from acting on it: ("global" | "local", percent).
    pub estimated_speedup: Option<(String, f64)>,
}

/// One profiled kernel launch.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KernelLaunch {
    /// ncu's launch ID (the `ID` column).
    pub id: Option<u64>,
    /// The demangled name as ncu prints it ("void scale<float, 4>(const T1 *, T1 *, int)").
    pub name: String,
    pub block_size: Option<String>,
    pub grid_size: Option<String>,
    pub device: Option<String>,
    pub compute_capability: Option<String>,
    pub metrics: MetricMap,
    pub rules: Vec<RuleResult>,
    /// The row ended before the header did: metrics of the missing columns are absent.
    pub truncated: bool,
}

impl KernelLaunch {
    fn new(name: String) -> Self {
        KernelLaunch {
            id: None,
            name,
            block_size: None,
            grid_size: None,
            device: None,
            compute_capability: None,
            metrics: MetricMap::new(),
            rules: Vec::new(),
            truncated: false,
        }
    }

    /// A metric's numeric value, if present and numeric.
    pub fn number(&self, metric: &str) -> Option<f64> {
        self.metrics.get(metric).and_then(Metric::number)
    }
}

/// Everything read from one export.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NcuReport {
    pub page: Page,
    /// In the order ncu listed them (launch order).
    pub kernels: Vec<KernelLaunch>,
    /// ncu's own message lines, wherever they appeared.
    pub messages: Vec<ProfilerMessage>,
    /// What the parser had to tolerate (a truncated row, a missing units row, ...).
    pub warnings: Vec<String>,
    /// Lines that were neither ncu's nor the table's (the profiled program's own output).
    pub other_lines: usize,
}

impl NcuReport {
    pub fn is_empty(&self) -> bool {
        self.kernels.is_empty()
    }

    /// The text of ncu's message lines of one level.
    pub fn messages_of(&self, level: MessageLevel) -> impl Iterator<Item = &str> {
        self.messages
            .iter()
            .filter(move |m| m.level == level)
            .map(|m| m.text.as_str())
    }
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ParseError {
    #[error("no ncu CSV table in this text (no header line starting with \"ID\"){}", messages_suffix(.messages))]
    NoTable { messages: Vec<ProfilerMessage> },
    #[error("the ncu table has no {0:?} column")]
    MissingColumn(&'static str),
    #[error("malformed CSV near line {line}: {message}")]
    Csv { line: u64, message: String },
    #[error("expected an export of --page {expected}, but this is --page {found}")]
    WrongPage { expected: Page, found: Page },
}

fn messages_suffix(messages: &[ProfilerMessage]) -> String {
    let errors: Vec<&str> = messages
        .iter()
        .filter(|m| matches!(m.level, MessageLevel::Error | MessageLevel::Warning))
        .map(|m| m.text.as_str())
        .collect();
    if errors.is_empty() {
        String::new()
    } else {
        format!("; ncu said: {}", errors.join(" | "))
    }
}

/// Parses an export of either page, detected from its header.
pub fn parse_csv(text: &str) -> Result<NcuReport, ParseError> {
    parse_with(text, None, LabelIndex::builtin())
}

/// Parses a `--csv --page raw` export.
pub fn parse_raw_csv(text: &str) -> Result<NcuReport, ParseError> {
    parse_with(text, Some(Page::Raw), LabelIndex::builtin())
}

/// Parses a `--csv --page details` export, mapping labels of ncu's and kforge's sections.
pub fn parse_details_csv(text: &str) -> Result<NcuReport, ParseError> {
    parse_with(text, Some(Page::Details), LabelIndex::builtin())
}

/// Parses a `--csv --page details` export with a label index that also knows a user's sections.
pub fn parse_details_csv_with(text: &str, labels: &LabelIndex) -> Result<NcuReport, ParseError> {
    parse_with(text, Some(Page::Details), labels)
}

fn parse_with(
    text: &str,
    expected: Option<Page>,
    labels: &LabelIndex,
) -> Result<NcuReport, ParseError> {
    let scanned = scan(text);
    if scanned.table.is_empty() {
        return Err(ParseError::NoTable {
            messages: scanned.messages,
        });
    }
    let records = read_records(&scanned.table, scanned.first_line)?;
    let Some(header) = records.first() else {
        return Err(ParseError::NoTable {
            messages: scanned.messages,
        });
    };
    let page = if header.iter().any(|h| h == "Metric Name")
        && header.iter().any(|h| h == "Metric Value")
    {
        Page::Details
    } else {
        Page::Raw
    };
    if let Some(expected) = expected
        && expected != page
    {
        return Err(ParseError::WrongPage {
            expected,
            found: page,
        });
    }
    let mut report = NcuReport {
        page,
        kernels: Vec::new(),
        messages: scanned.messages,
        warnings: Vec::new(),
        other_lines: scanned.other_lines,
    };
    match page {
        Page::Raw => read_raw(&records, &mut report)?,
        Page::Details => read_details(&records, labels, &mut report)?,
    }
    Ok(report)
}

/// The table's lines, separated from ncu's messages and the program's own output.
struct Scanned {
    table: String,
    /// 1-based line number of the header in the original text (for error messages).
    first_line: u64,
    messages: Vec<ProfilerMessage>,
    other_lines: usize,
}

fn scan(text: &str) -> Scanned {
    let mut scanned = Scanned {
        table: String::new(),
        first_line: 0,
        messages: Vec::new(),
        other_lines: 0,
    };
    let mut in_table = false;
    for (index, line) in text.lines().enumerate() {
        let line = line.trim_start_matches('\u{feff}');
        if let Some(message) = ncu_message(line) {
            scanned.messages.push(message);
            continue;
        }
        if line.trim().is_empty() {
            continue;
        }
        if !in_table && is_header(line) {
            in_table = true;
            scanned.first_line = index as u64 + 1;
        }
        // ncu quotes every field, so each row starts with a quote; anything else between or
        // after the rows is the program's output.
        if in_table && line.starts_with('"') {
            scanned.table.push_str(line);
            scanned.table.push('\n');
        } else {
            scanned.other_lines += 1;
        }
    }
    scanned
}

fn is_header(line: &str) -> bool {
    line == "\"ID\"" || line.starts_with("\"ID\",")
}

fn ncu_message(line: &str) -> Option<ProfilerMessage> {
    let rest = line.strip_prefix("==")?;
    let (tag, text) = rest.split_once("==")?;
    if tag.is_empty() || !tag.chars().all(|c| c.is_ascii_uppercase()) {
        return None;
    }
    let level = match tag {
        "PROF" => MessageLevel::Prof,
        "WARNING" => MessageLevel::Warning,
        "ERROR" => MessageLevel::Error,
        _ => MessageLevel::Other,
    };
    Some(ProfilerMessage {
        level,
        text: text.trim().to_string(),
    })
}

fn read_records(table: &str, first_line: u64) -> Result<Vec<csv::StringRecord>, ParseError> {
    let mut reader = csv::ReaderBuilder::new()
        .has_headers(false)
        .flexible(true)
        .from_reader(table.as_bytes());
    let mut records = Vec::new();
    for record in reader.records() {
        let record = record.map_err(|e| ParseError::Csv {
            line: e
                .position()
                .map_or(first_line, |p| first_line + p.line().saturating_sub(1)),
            message: e.to_string(),
        })?;
        records.push(record);
    }
    Ok(records)
}

const KERNEL_NAME: &str = "Kernel Name";
/// The columns ncu puts before the metrics on both pages (everything else on the raw page is a
/// metric).
const IDENTITY_COLUMNS: &[&str] = &[
    "ID",
    "Process ID",
    "Process Name",
    "Host Name",
    KERNEL_NAME,
    "Context",
    "Stream",
    "Block Size",
    "Grid Size",
    "Device",
    "CC",
];

fn column(header: &csv::StringRecord, name: &str) -> Option<usize> {
    header.iter().position(|h| h == name)
}

fn is_metric_column(name: &str) -> bool {
    !name.is_empty() && !IDENTITY_COLUMNS.contains(&name)
}

fn read_raw(records: &[csv::StringRecord], report: &mut NcuReport) -> Result<(), ParseError> {
    let header = &records[0];
    let name_col = column(header, KERNEL_NAME).ok_or(ParseError::MissingColumn(KERNEL_NAME))?;
    let id_col = column(header, "ID").unwrap_or(0);
    let mut rows = &records[1..];
    // The units row leaves the identity columns (ID first) empty; a data row never does.
    let units = match rows.first() {
        Some(first) if first.get(id_col).is_some_and(str::is_empty) => {
            rows = &rows[1..];
            Some(first)
        }
        Some(_) => {
            report.warnings.push(
                "no units row after the header: values are read as written, without units"
                    .to_string(),
            );
            None
        }
        None => None,
    };
    for row in rows {
        if row.iter().all(|cell| cell.trim().is_empty()) {
            continue;
        }
        let mut kernel = KernelLaunch::new(row.get(name_col).unwrap_or_default().to_string());
        kernel.id = row.get(id_col).and_then(parse_id);
        kernel.block_size = cell(header, row, "Block Size");
        kernel.grid_size = cell(header, row, "Grid Size");
        kernel.device = cell(header, row, "Device");
        kernel.compute_capability = cell(header, row, "CC");
        if row.len() < header.len() {
            kernel.truncated = true;
            report.warnings.push(format!(
                "the row of kernel {:?} has {} of {} columns (a truncated export?): the rest are missing",
                kernel.name,
                row.len(),
                header.len()
            ));
        } else if row.len() > header.len() {
            report.warnings.push(format!(
                "the row of kernel {:?} has {} more fields than the header: they are ignored",
                kernel.name,
                row.len() - header.len()
            ));
        }
        for (index, name) in header.iter().enumerate() {
            if !is_metric_column(name) {
                continue;
            }
            let Some(value) = row.get(index) else { break };
            let unit = units.and_then(|u| u.get(index)).unwrap_or_default();
            kernel
                .metrics
                .insert(name.to_string(), Metric::parse(value, unit));
        }
        report.kernels.push(kernel);
    }
    Ok(())
}

fn cell(header: &csv::StringRecord, row: &csv::StringRecord, name: &str) -> Option<String> {
    let value = row.get(column(header, name)?)?.trim();
    (!value.is_empty()).then(|| value.to_string())
}

fn parse_id(text: &str) -> Option<u64> {
    text.trim().replace(',', "").parse().ok()
}

fn read_details(
    records: &[csv::StringRecord],
    labels: &LabelIndex,
    report: &mut NcuReport,
) -> Result<(), ParseError> {
    let header = &records[0];
    let need = |name: &'static str| column(header, name).ok_or(ParseError::MissingColumn(name));
    let name_col = need(KERNEL_NAME)?;
    let section_col = need("Section Name")?;
    let label_col = need("Metric Name")?;
    let value_col = need("Metric Value")?;
    let unit_col = column(header, "Metric Unit");
    let id_col = column(header, "ID");
    let rule_col = column(header, "Rule Name");
    let get = |row: &csv::StringRecord, col: Option<usize>| {
        col.and_then(|c| row.get(c))
            .unwrap_or_default()
            .trim()
            .to_string()
    };
    // Rows of one launch share its ID; launches keep the order of their first row.
    let mut index_of: HashMap<String, usize> = HashMap::new();
    let mut unresolved = 0usize;
    for row in &records[1..] {
        if row.iter().all(|cell| cell.trim().is_empty()) || *row == *header {
            continue;
        }
        let name = get(row, Some(name_col));
        let key = id_col.map_or_else(|| name.clone(), |c| get(row, Some(c)));
        let index = *index_of.entry(key).or_insert_with(|| {
            let mut kernel = KernelLaunch::new(name.clone());
            kernel.id = id_col.and_then(|c| row.get(c)).and_then(parse_id);
            kernel.block_size = cell(header, row, "Block Size");
            kernel.grid_size = cell(header, row, "Grid Size");
            kernel.device = cell(header, row, "Device");
            kernel.compute_capability = cell(header, row, "CC");
            report.kernels.push(kernel);
            report.kernels.len() - 1
        });
        let kernel = &mut report.kernels[index];
        let section = get(row, Some(section_col));
        let rule = get(row, rule_col);
        if !rule.is_empty() {
            let speedup_kind = get(row, column(header, "Estimated Speedup Type"));
            let speedup = get(row, column(header, "Estimated Speedup"))
                .replace(',', "")
                .parse::<f64>()
                .ok();
            kernel.rules.push(RuleResult {
                section,
                rule,
                kind: get(row, column(header, "Rule Type")),
                message: get(row, column(header, "Rule Description")),
                estimated_speedup: speedup.map(|s| (speedup_kind, s)),
            });
            continue;
        }
        let label = get(row, Some(label_col));
        if label.is_empty() {
            continue;
        }
        let metric = Metric::parse(&get(row, Some(value_col)), &get(row, unit_col));
        let name = match labels.resolve(&section, &label) {
            Some(name) => name.to_string(),
            None => {
                unresolved += 1;
                format!("{section}: {label}")
            }
        };
        kernel.metrics.entry(name).or_insert(metric);
    }
    if unresolved > 0 {
        report.warnings.push(format!(
            "{unresolved} details rows have labels of sections kforge does not know; they are \
             kept under \"<section>: <label>\""
        ));
    }
    Ok(())
}

/// A unit as ncu prints it → (power of ten to multiply values by, normalised unit).
fn normalise_unit(unit: &str) -> (i32, String) {
    let (numerator, denominator) = match unit.split_once('/') {
        Some((n, d)) => (n, Some(d)),
        None => (unit, None),
    };
    let (num_exp, num) = normalise_numerator(numerator);
    let Some(denominator) = denominator else {
        return (num_exp, num);
    };
    let (den_exp, den) = match denominator {
        "s" | "second" => (0, "s"),
        "ms" | "msecond" => (3, "s"),
        "us" | "usecond" => (6, "s"),
        "ns" | "nsecond" => (9, "s"),
        other => (0, other),
    };
    let unit = match (num.as_str(), den) {
        ("cycle", "s") => "hz".to_string(),
        (num, den) => format!("{num}/{den}"),
    };
    (num_exp + den_exp, unit)
}

/// Units that take a decimal prefix in ncu's auto-scaled output (`Kbyte`, `Minst`, `Ghz`).
const PREFIXED_UNITS: &[&str] = &[
    "byte", "inst", "cycle", "sector", "request", "warp", "thread", "block",
];

fn normalise_numerator(unit: &str) -> (i32, String) {
    match unit {
        "ns" | "nsecond" => return (0, "ns".to_string()),
        "us" | "usecond" => return (3, "ns".to_string()),
        "ms" | "msecond" => return (6, "ns".to_string()),
        "s" | "second" => return (9, "ns".to_string()),
        _ => {}
    }
    let prefix_exponent = |prefix: &str| match prefix {
        "" => Some(0),
        "K" | "k" => Some(3),
        "M" => Some(6),
        "G" => Some(9),
        "T" => Some(12),
        _ => None,
    };
    let lower = unit.to_ascii_lowercase();
    if let Some(prefix) = lower.strip_suffix("hz")
        && let Some(exponent) = prefix_exponent(&prefix.to_ascii_uppercase())
    {
        return (exponent, "hz".to_string());
    }
    for base in PREFIXED_UNITS {
        if let Some(prefix) = unit.strip_suffix(base)
            && let Some(exponent) = prefix_exponent(prefix)
        {
            return (exponent, (*base).to_string());
        }
    }
    (0, unit.to_string())
}

/// A number as ncu writes it (`208,445,952`, `2,373,482.67`, `-1`, `1.5e+03`), multiplied by
/// 10^`exponent`. Integers stay integers; a decimal that scaling makes whole becomes one.
fn parse_number(cell: &str, exponent: i32) -> Option<MetricValue> {
    if let Some((mantissa, mut fraction_digits)) = parse_decimal(cell) {
        let mut mantissa = mantissa;
        if exponent > 0 {
            while fraction_digits > 0 && mantissa % 10 == 0 {
                mantissa /= 10;
                fraction_digits -= 1;
            }
        }
        let shift = exponent - fraction_digits as i32;
        if fraction_digits == 0 || shift >= 0 {
            let scaled = 10i128
                .checked_pow(shift.max(0) as u32)
                .and_then(|p| mantissa.checked_mul(p));
            if let Some(value) = scaled.and_then(|v| i64::try_from(v).ok()) {
                return Some(MetricValue::Int(value));
            }
        }
        // Dividing by an exact power of ten rounds once; multiplying by 10^-n would round twice.
        return Some(MetricValue::Float(if shift >= 0 {
            mantissa as f64 * 10f64.powi(shift)
        } else {
            mantissa as f64 / 10f64.powi(-shift)
        }));
    }
    // Exponent notation, nan and inf; never a thousands-separated or grouped text.
    if cell.contains(',') || cell.chars().any(char::is_whitespace) {
        return None;
    }
    let value: f64 = cell.parse().ok()?;
    Some(MetricValue::Float(value * 10f64.powi(exponent)))
}

/// `[-]digits[.digits]` with optional thousands separators in the integer part → (mantissa,
/// digits after the point).
fn parse_decimal(text: &str) -> Option<(i128, u32)> {
    let (negative, body) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text),
    };
    let (integer, fraction) = match body.split_once('.') {
        Some((i, f)) => (i, f),
        None => (body, ""),
    };
    if body.ends_with('.') || integer.is_empty() || !fraction.chars().all(|c| c.is_ascii_digit()) {
        return None;
    }
    let integer_digits: String = if integer.contains(',') {
        let mut groups = integer.split(',');
        let first = groups.next()?;
        let grouped = !first.is_empty()
            && first.len() <= 3
            && first.chars().all(|c| c.is_ascii_digit())
            && groups
                .clone()
                .all(|g| g.len() == 3 && g.chars().all(|c| c.is_ascii_digit()));
        if !grouped {
            return None;
        }
        std::iter::once(first).chain(groups).collect()
    } else if integer.chars().all(|c| c.is_ascii_digit()) {
        integer.to_string()
    } else {
        return None;
    };
    let digits = format!("{integer_digits}{fraction}");
    if digits.len() > 36 {
        return None;
    }
    let mantissa: i128 = digits.parse().ok()?;
    let fraction_digits = u32::try_from(fraction.len()).ok()?;
    Some((if negative { -mantissa } else { mantissa }, fraction_digits))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn value(cell: &str, unit: &str) -> (MetricValue, String) {
        let metric = Metric::parse(cell, unit);
        (metric.value, metric.unit)
    }

    #[test]
    fn numbers_keep_their_type() {
        assert_eq!(
            value("208,445,952", "byte"),
            (MetricValue::Int(208_445_952), "byte".into())
        );
        assert_eq!(value("36.90", "%"), (MetricValue::Float(36.9), "%".into()));
        assert_eq!(value("-1", ""), (MetricValue::Int(-1), String::new()));
        assert_eq!(
            value("2,373,482.67", "byte").0,
            MetricValue::Float(2_373_482.67)
        );
        assert_eq!(value("1.5e+03", "").0, MetricValue::Float(1500.0));
    }

    #[test]
    fn non_numbers_are_text_or_missing() {
        assert_eq!(
            value("(256, 1, 1)", "").0,
            MetricValue::Text("(256, 1, 1)".into())
        );
        assert_eq!(
            value("PolicySpread", "").0,
            MetricValue::Text("PolicySpread".into())
        );
        assert_eq!(value("1,2", "").0, MetricValue::Text("1,2".into()));
        assert_eq!(
            value("12,34,567", "").0,
            MetricValue::Text("12,34,567".into())
        );
        assert_eq!(value("n/a", "byte").0, MetricValue::NotAvailable);
        assert_eq!(value("N/A", "").0, MetricValue::NotAvailable);
        assert_eq!(value("", "%").0, MetricValue::Empty);
    }

    #[test]
    fn units_are_normalised() {
        assert_eq!(
            value("49.376000", "us"),
            (MetricValue::Int(49_376), "ns".into())
        );
        assert_eq!(
            value("204.90", "usecond"),
            (MetricValue::Int(204_900), "ns".into())
        );
        assert_eq!(
            value("1.5", "ms"),
            (MetricValue::Int(1_500_000), "ns".into())
        );
        assert_eq!(
            value("1.073743", "Gbyte"),
            (MetricValue::Int(1_073_743_000), "byte".into())
        );
        assert_eq!(
            value("4.10", "Kbyte/block"),
            (MetricValue::Int(4_100), "byte/block".into())
        );
        assert_eq!(
            value("0.000085", "Mbyte"),
            (MetricValue::Int(85), "byte".into())
        );
        assert_eq!(
            value("1.95", "Tbyte/second"),
            (MetricValue::Int(1_950_000_000_000), "byte/s".into())
        );
        assert_eq!(
            value("1.94", "cycle/nsecond"),
            (MetricValue::Int(1_940_000_000), "hz".into())
        );
        assert_eq!(
            value("1.98", "Ghz"),
            (MetricValue::Int(1_980_000_000), "hz".into())
        );
        assert_eq!(value("3,199,077,632.59", "hz").1, "hz");
        assert_eq!(value("19", "register/thread").1, "register/thread");
        assert_eq!(value("32", "byte/sector").1, "byte/sector");
        assert_eq!(value("0.5", "Kbyte").0, MetricValue::Int(500));
    }

    #[test]
    fn message_lines_are_recognised() {
        let message = ncu_message("==WARNING== No kernels were profiled.").unwrap();
        assert_eq!(message.level, MessageLevel::Warning);
        assert_eq!(message.text, "No kernels were profiled.");
        assert_eq!(
            ncu_message("==PROF== Connected to process 1")
                .unwrap()
                .level,
            MessageLevel::Prof
        );
        assert!(ncu_message("== not a message").is_none());
        assert!(ncu_message("\"ID\",\"Process ID\"").is_none());
    }
}
