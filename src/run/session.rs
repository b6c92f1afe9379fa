//! A scripted session: Coder and Judge replies written by hand, served by which node is asked
//! about, so a tuning run (the demo, a GPU check) goes through the real compiler, evaluator and
//! profiler with no model and no key. The replies are a graph over kernel ids:
//!
//! ```toml
//! problem = "softmax_rows"
//! cpu_sizes = ["batch_size=64", "dim=4096"]     # the import's sizes where there is no GPU
//! [[judge]]                                      # the Judge's reply when it reads this node
//! node = "reference"                             # or a kernel id
//! mode = "optimize"                              # or "repair" (for a kernel found wrong)
//! reply = "judge/reference.json"
//! [[coder]]                                      # the Coder's reply for one edge
//! parent = "reference"
//! prescription = 1                               # the rank it applies (or `repair = true`)
//! kernel = "block_3pass"                         # kernels/block_3pass.cu
//! note = "One block per row."                    # the sentence before its code block
//! ```
//!
//! A node is recognised by its code: a kernel whose text is one of the session's kernels is that
//! kernel. A call the session has no reply for is an error naming the site, which the run
//! records as an abandoned expansion.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Deserialize;

use super::models::{CallSite, CoderStep, FixedReply, Models, NodeRef};
use crate::llm::{Agent, LlmClient, LlmError, ModelSpec, ProviderKind};

const REFERENCE: &str = "reference";

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Deserialize)]
#[serde(rename_all = "snake_case")]
enum JudgeMode {
    #[default]
    Optimize,
    Repair,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SessionFile {
    problem: String,
    #[serde(default)]
    cpu_sizes: Vec<String>,
    #[serde(default)]
    judge: Vec<JudgeEntry>,
    #[serde(default)]
    coder: Vec<CoderEntry>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct JudgeEntry {
    node: String,
    /// `optimize` (the default) or `repair`: the verdict for a correct or built node, or for
    /// one the evaluator found wrong.
    #[serde(default)]
    mode: JudgeMode,
    reply: PathBuf,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CoderEntry {
    parent: String,
    #[serde(default)]
    prescription: Option<usize>,
    #[serde(default)]
    repair: bool,
    kernel: String,
    #[serde(default)]
    note: Option<String>,
}

/// Why a session folder cannot be used.
#[derive(Debug, thiserror::Error)]
#[error("scripted session {path}: {detail}")]
pub struct SessionError {
    path: String,
    detail: String,
}

/// A loaded session.
#[derive(Debug)]
pub struct ScriptedSession {
    folder: PathBuf,
    pub problem: String,
    pub cpu_sizes: Vec<(String, String)>,
    /// Kernel id → code (trimmed), for recognising nodes.
    kernels: BTreeMap<String, String>,
    /// (node id, mode) → the Judge's reply text.
    judge: BTreeMap<(String, JudgeMode), String>,
    /// (parent, step) → the Coder's reply text.
    coder: BTreeMap<(String, EdgeKey), String>,
    spec: ModelSpec,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum EdgeKey {
    Rank(usize),
    Repair,
}

impl ScriptedSession {
    /// Loads `<folder>/session.toml` and every file it names, and checks the graph is whole:
    /// every kernel has a Judge reply and every edge leads to a kernel of the session.
    pub fn load(folder: &Path) -> Result<ScriptedSession, SessionError> {
        let fail = |detail: String| SessionError {
            path: crate::paths::display(folder),
            detail,
        };
        let read = |relative: &Path| {
            std::fs::read_to_string(folder.join(relative))
                .map_err(|e| fail(format!("cannot read {}: {e}", relative.display())))
        };
        let file: SessionFile = toml::from_str(&read(Path::new("session.toml"))?)
            .map_err(|e| fail(format!("session.toml: {e}")))?;
        let mut cpu_sizes = Vec::new();
        for size in &file.cpu_sizes {
            let (name, value) = crate::problem::import::parse_size(size)
                .map_err(|e| fail(format!("cpu_sizes: {e}")))?;
            cpu_sizes.push((name, value));
        }
        let mut kernels = BTreeMap::new();
        let mut coder = BTreeMap::new();
        for entry in &file.coder {
            let code = read(&Path::new("kernels").join(format!("{}.cu", entry.kernel)))?;
            let code = code.trim().to_string();
            if let Some((other, _)) = kernels
                .iter()
                .find(|(id, known): &(&String, &String)| **known == code && **id != entry.kernel)
            {
                return Err(fail(format!(
                    "kernels {other} and {} have the same code",
                    entry.kernel
                )));
            }
            kernels.insert(entry.kernel.clone(), code.clone());
            let key = match (entry.prescription, entry.repair) {
                (Some(rank), false) if rank >= 1 => EdgeKey::Rank(rank),
                (None, true) => EdgeKey::Repair,
                _ => {
                    return Err(fail(format!(
                        "the coder entry from {} to {} needs either prescription = <rank from 1> \
                         or repair = true",
                        entry.parent, entry.kernel
                    )));
                }
            };
            let note = entry.note.as_deref().unwrap_or("").trim();
            let reply = format!("{note}\n\n```cuda\n{code}\n```\n")
                .trim_start()
                .to_string();
            if coder.insert((entry.parent.clone(), key), reply).is_some() {
                return Err(fail(format!(
                    "two coder entries for the same edge from {}",
                    entry.parent
                )));
            }
        }
        let mut judge = BTreeMap::new();
        for entry in &file.judge {
            if entry.node != REFERENCE && !kernels.contains_key(&entry.node) {
                return Err(fail(format!(
                    "a judge entry names {}, which no coder entry produces",
                    entry.node
                )));
            }
            let key = (entry.node.clone(), entry.mode);
            if judge.insert(key, read(&entry.reply)?).is_some() {
                return Err(fail(format!(
                    "two {:?} judge entries for {}",
                    entry.mode, entry.node
                )));
            }
        }
        for (parent, _) in coder.keys() {
            if parent != REFERENCE && !kernels.contains_key(parent) {
                return Err(fail(format!(
                    "a coder entry starts from unknown node {parent}"
                )));
            }
        }
        for node in std::iter::once(REFERENCE).chain(kernels.keys().map(String::as_str)) {
            if !judge.contains_key(&(node.to_string(), JudgeMode::Optimize)) {
                return Err(fail(format!("no optimize judge entry for {node}")));
            }
        }
        Ok(ScriptedSession {
            folder: folder.to_path_buf(),
            spec: ModelSpec {
                provider: ProviderKind::Replay,
                model: format!("scripted-demo/{}", file.problem),
                base_url: None,
            },
            problem: file.problem,
            cpu_sizes,
            kernels,
            judge,
            coder,
        })
    }

    /// The kernel id of `node`, `reference` for the root.
    fn node_id(&self, node: &NodeRef<'_>) -> Result<&str, LlmError> {
        match node {
            NodeRef::Reference => Ok(REFERENCE),
            NodeRef::Kernel { code } => {
                let code = code.trim();
                self.kernels
                    .iter()
                    .find(|(_, known)| known.as_str() == code)
                    .map(|(id, _)| id.as_str())
                    .ok_or_else(|| self.miss("a kernel that is not one of the session's".into()))
            }
        }
    }

    fn miss(&self, what: String) -> LlmError {
        LlmError::ReplayFile {
            path: self.folder.join("session.toml"),
            detail: format!("the scripted session has no reply for {what}"),
        }
    }
}

impl Models for ScriptedSession {
    fn client(&self, agent: Agent, site: &CallSite<'_>) -> Result<Arc<dyn LlmClient>, LlmError> {
        let text = match (agent, site) {
            (Agent::Judge, CallSite::Judge { node, repair }) => {
                let id = self.node_id(node)?;
                let mode = if *repair {
                    JudgeMode::Repair
                } else {
                    JudgeMode::Optimize
                };
                self.judge
                    .get(&(id.to_string(), mode))
                    .cloned()
                    .ok_or_else(|| self.miss(format!("the Judge on {id} ({mode:?} mode)")))?
            }
            (Agent::Coder, CallSite::Coder { parent, step }) => {
                let id = self.node_id(parent)?;
                let key = match step {
                    CoderStep::Prescription { index } => EdgeKey::Rank(index + 1),
                    CoderStep::Repair => EdgeKey::Repair,
                };
                self.coder
                    .get(&(id.to_string(), key))
                    .cloned()
                    .ok_or_else(|| self.miss(format!("the Coder from {id} ({key:?})")))?
            }
            _ => return Err(self.miss("a call site of the other agent".into())),
        };
        Ok(Arc::new(FixedReply::new(self.spec.clone(), text)))
    }

    fn name(&self, _agent: Agent) -> String {
        format!("scripted:{}", self.problem)
    }

    fn scripted_label(&self) -> Option<String> {
        Some(format!(
            "scripted demo: the Coder's and the Judge's replies are hand-written (session \
             {}); no model is called",
            self.problem
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, relative: &str, text: &str) {
        let path = dir.join(relative);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    #[test]
    fn replies_are_found_by_node_and_holes_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        write(d, "kernels/a.cu", "// a\n");
        write(d, "kernels/b.cu", "// b\n");
        write(d, "judge/reference.json", "{\"ref\": 1}");
        write(d, "judge/a.json", "{\"a\": 1}");
        write(d, "judge/a-repair.json", "{\"a\": \"repair\"}");
        write(d, "judge/b.json", "{\"b\": 1}");
        let toml = "problem = \"p\"\ncpu_sizes = [\"n=4\"]\n\
            [[judge]]\nnode = \"reference\"\nreply = \"judge/reference.json\"\n\
            [[judge]]\nnode = \"a\"\nreply = \"judge/a.json\"\n\
            [[judge]]\nnode = \"a\"\nmode = \"repair\"\nreply = \"judge/a-repair.json\"\n\
            [[judge]]\nnode = \"b\"\nreply = \"judge/b.json\"\n\
            [[coder]]\nparent = \"reference\"\nprescription = 1\nkernel = \"a\"\nnote = \"First.\"\n\
            [[coder]]\nparent = \"a\"\nrepair = true\nkernel = \"b\"\n";
        write(d, "session.toml", toml);
        let session = ScriptedSession::load(d).unwrap();
        assert_eq!(session.cpu_sizes, [("n".to_string(), "4".to_string())]);
        let reply = |agent, site: CallSite<'_>| {
            let client = session.client(agent, &site)?;
            let request = crate::llm::ChatRequest {
                system: None,
                messages: vec![crate::llm::Message::user("x")],
                sampling: Default::default(),
            };
            let runtime = tokio::runtime::Builder::new_current_thread()
                .build()
                .unwrap();
            runtime.block_on(client.complete(&request)).map(|r| r.text)
        };
        let judged = reply(
            Agent::Judge,
            CallSite::Judge {
                node: NodeRef::Kernel { code: "// a" },
                repair: true,
            },
        );
        assert_eq!(judged.unwrap(), "{\"a\": \"repair\"}");
        let coded = reply(
            Agent::Coder,
            CallSite::Coder {
                parent: NodeRef::Reference,
                step: CoderStep::Prescription { index: 0 },
            },
        )
        .unwrap();
        assert_eq!(coded, "First.\n\n```cuda\n// a\n```\n");
        let missing = reply(
            Agent::Coder,
            CallSite::Coder {
                parent: NodeRef::Reference,
                step: CoderStep::Prescription { index: 1 },
            },
        )
        .unwrap_err()
        .to_string();
        assert!(
            missing.contains("no reply for the Coder from reference"),
            "{missing}"
        );
        let unknown = reply(
            Agent::Judge,
            CallSite::Judge {
                node: NodeRef::Kernel { code: "// c" },
                repair: false,
            },
        )
        .unwrap_err();
        assert!(unknown.to_string().contains("not one of the session's"));

        // A kernel without a Judge reply makes the session unusable, and says which.
        std::fs::remove_file(d.join("judge/b.json")).unwrap();
        write(
            d,
            "session.toml",
            &toml.replace("[[judge]]\nnode = \"b\"\nreply = \"judge/b.json\"\n", ""),
        );
        let err = ScriptedSession::load(d).unwrap_err().to_string();
        assert!(err.contains("no optimize judge entry for b"), "{err}");
    }
}
