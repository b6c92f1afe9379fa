//! Prompt templates: plain text files with named slots (`{{problem_source}}`), one per prompt
//! kforge sends. The shipped set (`prompts/*.txt`) is compiled into the binary, so kforge works
//! from any folder; a user's prompts folder replaces any of them file by file.
//!
//! Templates are checked when they are loaded, not when a run first needs them: a slot the
//! template may not use (a typo, or `{{code}}` where there is no code yet), a slot it must use
//! but never does (an optimize prompt without `{{prescription}}`), an unclosed `{{`, and a file in
//! the folder that is no template are all errors naming the template, the file and the slot.
//! Values are inserted in one pass and never scanned again, so code that itself contains `{{`
//! is safe.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

/// Every prompt kforge sends, by its file name (without `.txt`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum TemplateKind {
    /// The Coder's system prompt: its role and the reply contract.
    CoderSystem,
    /// Write the first kernel from the PyTorch reference.
    CoderGenerate,
    /// Fix a kernel that failed (compile error, crash, wrong output, timeout).
    CoderRepair,
    /// Apply one of the Judge's prescriptions to a correct kernel.
    CoderOptimize,
    /// Ask again after an unusable reply, quoting why it was unusable.
    CoderRetry,
    /// The Judge's system prompt.
    JudgeSystem,
    /// Read a node's measurements, name the bottleneck, prescribe ranked edits.
    JudgeOptimize,
    /// Read a failure, name the critical issue and the minimal fix.
    JudgeRepair,
    /// Ask again after a reply that was not valid JSON of the schema.
    JudgeRetry,
}

/// A named place in a template.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Slot {
    /// The problem's name (`softmax_rows`, `level1/23_Softmax`).
    ProblemName,
    /// The PyTorch reference, as imported.
    ProblemSource,
    /// What `kforge_forward` receives: each input, parameter and output with shape and dtype.
    ProblemInterface,
    /// The candidate ABI: `kforge.h` verbatim.
    AbiHeader,
    /// The GPU's facts (SMs, L2, bandwidth, peak rates, compute capability, shared memory).
    Gpu,
    /// The problem's speed-of-light floor and the PyTorch baselines on this GPU.
    SpeedOfLight,
    /// The node's kernel source.
    Code,
    /// The node's evaluation: status, correctness diff or failure, timing, flags.
    Evaluation,
    /// An excerpt of nvcc's log.
    CompileLog,
    /// ptxas resources per kernel (registers, shared memory, spills).
    Resources,
    /// The Nsight Compute view with its diagnosis, or why there is none.
    Profile,
    /// The path from the reference to this node: what each step tried and what came of it.
    Ancestors,
    /// What this node's other children already tried ("do not repeat").
    Siblings,
    /// The one edit the Coder applies (optional in `coder_generate`).
    Prescription,
    /// The Judge's diagnosis and minimal fix of a failure, when there is one.
    Fix,
    /// Why the previous reply was unusable (retry prompts).
    Error,
}

use Slot::*;

/// The problem and hardware, available to every task prompt.
const RUN_SLOTS: &[Slot] = &[
    ProblemName,
    ProblemSource,
    ProblemInterface,
    AbiHeader,
    Gpu,
    SpeedOfLight,
];

/// One evaluated node.
const NODE_SLOTS: &[Slot] = &[Code, Evaluation, CompileLog, Resources, Profile, Ancestors];

impl Slot {
    pub const ALL: [Slot; 16] = [
        ProblemName,
        ProblemSource,
        ProblemInterface,
        AbiHeader,
        Gpu,
        SpeedOfLight,
        Code,
        Evaluation,
        CompileLog,
        Resources,
        Profile,
        Ancestors,
        Siblings,
        Prescription,
        Fix,
        Error,
    ];

    /// The name written between the braces.
    pub fn name(self) -> &'static str {
        match self {
            ProblemName => "problem_name",
            ProblemSource => "problem_source",
            ProblemInterface => "problem_interface",
            AbiHeader => "abi_header",
            Gpu => "gpu",
            SpeedOfLight => "speed_of_light",
            Code => "code",
            Evaluation => "evaluation",
            CompileLog => "compile_log",
            Resources => "resources",
            Profile => "profile",
            Ancestors => "ancestors",
            Siblings => "siblings",
            Prescription => "prescription",
            Fix => "fix",
            Error => "error",
        }
    }

    fn from_name(name: &str) -> Option<Slot> {
        Slot::ALL.into_iter().find(|slot| slot.name() == name)
    }
}

impl fmt::Display for Slot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{{{{{}}}}}", self.name())
    }
}

impl TemplateKind {
    pub const ALL: [TemplateKind; 9] = [
        TemplateKind::CoderSystem,
        TemplateKind::CoderGenerate,
        TemplateKind::CoderRepair,
        TemplateKind::CoderOptimize,
        TemplateKind::CoderRetry,
        TemplateKind::JudgeSystem,
        TemplateKind::JudgeOptimize,
        TemplateKind::JudgeRepair,
        TemplateKind::JudgeRetry,
    ];

    /// The file stem in a prompts folder.
    pub fn name(self) -> &'static str {
        match self {
            TemplateKind::CoderSystem => "coder_system",
            TemplateKind::CoderGenerate => "coder_generate",
            TemplateKind::CoderRepair => "coder_repair",
            TemplateKind::CoderOptimize => "coder_optimize",
            TemplateKind::CoderRetry => "coder_retry",
            TemplateKind::JudgeSystem => "judge_system",
            TemplateKind::JudgeOptimize => "judge_optimize",
            TemplateKind::JudgeRepair => "judge_repair",
            TemplateKind::JudgeRetry => "judge_retry",
        }
    }

    pub fn file_name(self) -> String {
        format!("{}.txt", self.name())
    }

    /// The text kforge ships for this template.
    pub fn shipped_text(self) -> &'static str {
        match self {
            TemplateKind::CoderSystem => include_str!("../../prompts/coder_system.txt"),
            TemplateKind::CoderGenerate => include_str!("../../prompts/coder_generate.txt"),
            TemplateKind::CoderRepair => include_str!("../../prompts/coder_repair.txt"),
            TemplateKind::CoderOptimize => include_str!("../../prompts/coder_optimize.txt"),
            TemplateKind::CoderRetry => include_str!("../../prompts/coder_retry.txt"),
            TemplateKind::JudgeSystem => include_str!("../../prompts/judge_system.txt"),
            TemplateKind::JudgeOptimize => include_str!("../../prompts/judge_optimize.txt"),
            TemplateKind::JudgeRepair => include_str!("../../prompts/judge_repair.txt"),
            TemplateKind::JudgeRetry => include_str!("../../prompts/judge_retry.txt"),
        }
    }

    /// The slots this template may use. System prompts get the run's facts (so a user can put
    /// the stable part of every prompt where providers cache it); task prompts get what their
    /// task knows; retry prompts get only the error, as they follow the conversation so far.
    pub fn slots(self) -> Vec<Slot> {
        match self {
            TemplateKind::CoderSystem | TemplateKind::JudgeSystem => RUN_SLOTS.to_vec(),
            TemplateKind::CoderRetry | TemplateKind::JudgeRetry => vec![Error],
            TemplateKind::CoderGenerate => [RUN_SLOTS, &[Siblings, Prescription]].concat(),
            TemplateKind::CoderRepair => [RUN_SLOTS, NODE_SLOTS, &[Fix]].concat(),
            TemplateKind::CoderOptimize => {
                [RUN_SLOTS, NODE_SLOTS, &[Siblings, Prescription]].concat()
            }
            TemplateKind::JudgeOptimize => [RUN_SLOTS, NODE_SLOTS, &[Siblings]].concat(),
            // The Judge's repair prompt is where the fix comes from, so it has none to show.
            TemplateKind::JudgeRepair => [RUN_SLOTS, NODE_SLOTS].concat(),
        }
    }

    /// The slots this template must use: without them the prompt cannot do its job.
    pub fn required_slots(self) -> &'static [Slot] {
        match self {
            TemplateKind::CoderSystem | TemplateKind::JudgeSystem => &[],
            TemplateKind::CoderRetry | TemplateKind::JudgeRetry => &[Error],
            TemplateKind::CoderGenerate => &[ProblemSource],
            TemplateKind::CoderRepair => &[Code, Evaluation],
            TemplateKind::CoderOptimize => &[Code, Prescription],
            TemplateKind::JudgeOptimize => &[Code, Evaluation, Siblings],
            TemplateKind::JudgeRepair => &[Code, Evaluation],
        }
    }
}

/// Where a template's text came from, for error messages and the run log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TemplateOrigin {
    Shipped,
    /// A user's file (shown with `~` for the home folder).
    File(String),
}

impl fmt::Display for TemplateOrigin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TemplateOrigin::Shipped => f.write_str("the shipped default"),
            TemplateOrigin::File(path) => f.write_str(path),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Segment {
    Text(String),
    Slot(Slot),
}

/// One parsed template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template {
    kind: TemplateKind,
    origin: TemplateOrigin,
    segments: Vec<Segment>,
}

/// The values of a prompt's slots.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SlotValues(BTreeMap<Slot, String>);

impl SlotValues {
    pub fn new() -> SlotValues {
        SlotValues::default()
    }

    pub fn set(&mut self, slot: Slot, value: impl Into<String>) -> &mut SlotValues {
        self.0.insert(slot, value.into());
        self
    }

    pub fn get(&self, slot: Slot) -> Option<&str> {
        self.0.get(&slot).map(String::as_str)
    }
}

/// Why a template could not be loaded or rendered. Each names the template and where it came
/// from, so the user knows which file to fix.
#[derive(Debug, thiserror::Error)]
pub enum PromptError {
    #[error("the prompts folder {path} is not a folder")]
    NotAFolder { path: String },
    #[error("cannot read {path}: {source}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "{path} is not a kforge prompt template (the templates are {known}); rename or remove it"
    )]
    UnknownFile { path: String, known: String },
    #[error(
        "template {template} ({origin}), line {line}: unknown slot {{{{{slot}}}}}; this template's \
         slots are {available}"
    )]
    UnknownSlot {
        template: &'static str,
        origin: TemplateOrigin,
        slot: String,
        line: usize,
        available: String,
    },
    #[error("template {template} ({origin}), line {line}: `{{{{` is never closed by `}}}}`")]
    Unclosed {
        template: &'static str,
        origin: TemplateOrigin,
        line: usize,
    },
    #[error(
        "template {template} ({origin}) never uses {slot}, which it needs to do its job; add it"
    )]
    MissingSlot {
        template: &'static str,
        origin: TemplateOrigin,
        slot: Slot,
    },
    #[error("template {template}: no value for slot {slot}")]
    MissingValue { template: &'static str, slot: Slot },
}

fn slot_list(slots: &[Slot]) -> String {
    slots
        .iter()
        .map(Slot::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

impl Template {
    /// Parses `text` as the template `kind`, checking every slot against what `kind` allows
    /// and needs.
    pub fn parse(
        kind: TemplateKind,
        origin: TemplateOrigin,
        text: &str,
    ) -> Result<Template, PromptError> {
        let allowed = kind.slots();
        let mut segments = Vec::new();
        let mut rest = text;
        let mut consumed = 0;
        let line_at = |offset: usize| text[..offset].matches('\n').count() + 1;
        while let Some(open) = rest.find("{{") {
            let after = &rest[open + 2..];
            let Some(close) = after.find("}}") else {
                return Err(PromptError::Unclosed {
                    template: kind.name(),
                    origin,
                    line: line_at(consumed + open),
                });
            };
            let name = after[..close].trim();
            let slot = Slot::from_name(name).filter(|slot| allowed.contains(slot));
            let Some(slot) = slot else {
                return Err(PromptError::UnknownSlot {
                    template: kind.name(),
                    origin,
                    slot: name.to_string(),
                    line: line_at(consumed + open),
                    available: slot_list(&allowed),
                });
            };
            if open > 0 {
                segments.push(Segment::Text(rest[..open].to_string()));
            }
            segments.push(Segment::Slot(slot));
            let advance = open + 2 + close + 2;
            consumed += advance;
            rest = &rest[advance..];
        }
        if !rest.is_empty() {
            segments.push(Segment::Text(rest.to_string()));
        }
        let template = Template {
            kind,
            origin,
            segments,
        };
        if let Some(slot) = kind
            .required_slots()
            .iter()
            .find(|slot| !template.uses(**slot))
        {
            return Err(PromptError::MissingSlot {
                template: kind.name(),
                origin: template.origin,
                slot: *slot,
            });
        }
        Ok(template)
    }

    pub fn kind(&self) -> TemplateKind {
        self.kind
    }

    pub fn origin(&self) -> &TemplateOrigin {
        &self.origin
    }

    /// Whether the template mentions `slot`.
    pub fn uses(&self, slot: Slot) -> bool {
        self.segments.contains(&Segment::Slot(slot))
    }

    /// The text with every slot replaced by its value; a slot without a value is an error.
    pub fn render(&self, values: &SlotValues) -> Result<String, PromptError> {
        let mut out = String::new();
        for segment in &self.segments {
            match segment {
                Segment::Text(text) => out.push_str(text),
                Segment::Slot(slot) => {
                    let value = values.get(*slot).ok_or(PromptError::MissingValue {
                        template: self.kind.name(),
                        slot: *slot,
                    })?;
                    out.push_str(value);
                }
            }
        }
        Ok(out)
    }
}

/// The full set of templates a run uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Prompts {
    templates: BTreeMap<TemplateKind, Template>,
}

impl Prompts {
    /// The shipped templates, each replaced by `<folder>/<name>.txt` where that file exists.
    pub fn load(folder: Option<&Path>) -> Result<Prompts, PromptError> {
        if let Some(folder) = folder {
            check_folder(folder)?;
        }
        let mut templates = BTreeMap::new();
        for kind in TemplateKind::ALL {
            let user_file = folder.map(|f| f.join(kind.file_name()));
            let template = match user_file.filter(|path| path.is_file()) {
                Some(path) => {
                    let shown = crate::paths::display(&path);
                    let text =
                        std::fs::read_to_string(&path).map_err(|source| PromptError::Read {
                            path: shown.clone(),
                            source,
                        })?;
                    Template::parse(kind, TemplateOrigin::File(shown), &text)?
                }
                None => Template::parse(kind, TemplateOrigin::Shipped, kind.shipped_text())?,
            };
            templates.insert(kind, template);
        }
        Ok(Prompts { templates })
    }

    /// The shipped templates alone.
    pub fn shipped() -> Result<Prompts, PromptError> {
        Prompts::load(None)
    }

    pub fn template(&self, kind: TemplateKind) -> &Template {
        // `load` inserts every kind, and a `Prompts` is only made by `load`.
        &self.templates[&kind]
    }

    /// The templates a user's folder replaced, for the run log.
    pub fn overridden(&self) -> Vec<(TemplateKind, &TemplateOrigin)> {
        self.templates
            .values()
            .filter(|t| t.origin != TemplateOrigin::Shipped)
            .map(|t| (t.kind, &t.origin))
            .collect()
    }

    /// Renders template `kind` with `values`.
    pub fn render(&self, kind: TemplateKind, values: &SlotValues) -> Result<String, PromptError> {
        self.template(kind).render(values)
    }
}

/// A prompts folder must be a folder whose `.txt` files are all templates: a misspelt file
/// name would otherwise be ignored without a word.
fn check_folder(folder: &Path) -> Result<(), PromptError> {
    let shown = crate::paths::display(folder);
    if !folder.is_dir() {
        return Err(PromptError::NotAFolder { path: shown });
    }
    let entries = std::fs::read_dir(folder).map_err(|source| PromptError::Read {
        path: shown.clone(),
        source,
    })?;
    let known: Vec<String> = TemplateKind::ALL.iter().map(|k| k.file_name()).collect();
    for entry in entries {
        let entry = entry.map_err(|source| PromptError::Read {
            path: shown.clone(),
            source,
        })?;
        let path: PathBuf = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        if path.extension().is_some_and(|ext| ext == "txt") && !known.contains(&name) {
            return Err(PromptError::UnknownFile {
                path: crate::paths::display(&path),
                known: known.join(", "),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(kind: TemplateKind, text: &str) -> Result<Template, PromptError> {
        Template::parse(kind, TemplateOrigin::File("mine.txt".into()), text)
    }

    #[test]
    fn every_shipped_template_loads() {
        let prompts = Prompts::shipped().unwrap();
        for kind in TemplateKind::ALL {
            assert_eq!(prompts.template(kind).origin(), &TemplateOrigin::Shipped);
        }
        assert!(prompts.overridden().is_empty());
    }

    #[test]
    fn slots_are_replaced_once_and_values_are_not_rescanned() {
        let template = parse(TemplateKind::CoderRetry, "Because: {{ error }}.\nAgain.").unwrap();
        let mut values = SlotValues::new();
        values.set(Error, "it had {{code}} in it");
        assert_eq!(
            template.render(&values).unwrap(),
            "Because: it had {{code}} in it.\nAgain."
        );
    }

    #[test]
    fn unknown_and_unavailable_slots_name_template_line_and_slot() {
        let err = parse(TemplateKind::CoderRetry, "a\n{{eror}}").unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("coder_retry") && text.contains("line 2") && text.contains("{{eror}}"),
            "{text}"
        );
        assert!(
            text.contains("mine.txt") && text.contains("{{error}}"),
            "{text}"
        );
        // `code` exists but the first kernel has no code to show.
        let err = parse(TemplateKind::CoderGenerate, "{{problem_source}} {{code}}").unwrap_err();
        assert!(
            matches!(&err, PromptError::UnknownSlot { slot, .. } if slot == "code"),
            "{err}"
        );
    }

    #[test]
    fn unclosed_braces_and_unused_required_slots_are_errors() {
        let err = parse(TemplateKind::CoderRetry, "{{error}} and {{oops").unwrap_err();
        assert!(
            matches!(err, PromptError::Unclosed { line: 1, .. }),
            "{err}"
        );
        let err = parse(TemplateKind::CoderOptimize, "{{code}} without the edit").unwrap_err();
        assert!(
            matches!(
                err,
                PromptError::MissingSlot {
                    slot: Prescription,
                    ..
                }
            ),
            "{err}"
        );
    }

    #[test]
    fn a_missing_value_names_template_and_slot() {
        let template = parse(TemplateKind::CoderRetry, "{{error}}").unwrap();
        let err = template.render(&SlotValues::new()).unwrap_err();
        assert_eq!(
            err.to_string(),
            "template coder_retry: no value for slot {{error}}"
        );
    }

    #[test]
    fn the_judge_repair_prompt_cannot_show_a_fix() {
        assert!(!TemplateKind::JudgeRepair.slots().contains(&Fix));
        assert!(TemplateKind::CoderRepair.slots().contains(&Fix));
        for kind in TemplateKind::ALL {
            for slot in kind.required_slots() {
                assert!(kind.slots().contains(slot), "{kind:?} needs {slot}");
            }
        }
    }

    #[test]
    fn a_user_folder_overrides_file_by_file_and_refuses_strangers() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("coder_retry.txt"), "Fix this: {{error}}").unwrap();
        std::fs::write(dir.path().join("README.md"), "notes are fine").unwrap();
        let prompts = Prompts::load(Some(dir.path())).unwrap();
        let mut values = SlotValues::new();
        values.set(Error, "no code block");
        assert_eq!(
            prompts.render(TemplateKind::CoderRetry, &values).unwrap(),
            "Fix this: no code block"
        );
        assert_eq!(prompts.overridden().len(), 1);
        assert_eq!(
            prompts.template(TemplateKind::JudgeRetry).origin(),
            &TemplateOrigin::Shipped
        );
        std::fs::write(dir.path().join("coder_optimise.txt"), "{{code}}").unwrap();
        let err = Prompts::load(Some(dir.path())).unwrap_err();
        assert!(
            matches!(&err, PromptError::UnknownFile { path, .. } if path.ends_with("coder_optimise.txt")),
            "{err}"
        );
        let err = Prompts::load(Some(&dir.path().join("absent"))).unwrap_err();
        assert!(matches!(err, PromptError::NotAFolder { .. }), "{err}");
    }
}
