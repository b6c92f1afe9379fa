//! What a run writes, and reads back: the lines of `events.jsonl` ([`RunEvent`]) and each node's
//! files. The prompts of a node's children are always rendered from these files (never from
//! memory), so a resumed run shows the models exactly what the first run did.
//!
//! ```text
//! nodes/<id>/kernel.cu           the Coder's code
//! nodes/<id>/compile.log         nvcc's whole log
//! nodes/<id>/eval.json           the result document (DESIGN.md §3.3), ncu view included
//! nodes/<id>/ncu.json            the profile: the Judge's view, diagnosis, every metric
//! nodes/<id>/ncu.ncu-rep         the Nsight Compute report (open it in the ncu UI)
//! nodes/<id>/judge.json          the Judge's verdict this expansion followed (if it asked)
//! nodes/<id>/llm/<agent>-<n>.md  every prompt and reply of the expansion, in order
//! nodes/0/ncu.json               the reference's profile (the root's view)
//! ```

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::evaluator::ProfileRecord;
use crate::agents::{Exchange, Profile};
use crate::eval::CandidateResult;
use crate::eval::protocol::ProtocolOptions;
use crate::llm::Sampling;
use crate::search::{JournalEntry, NodeId, SearchConfig};
use crate::store::{StoreError, write_atomic};

/// What a run is, written first in its log; a resume takes its settings from here.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunHeader {
    pub kforge_version: String,
    pub problem: String,
    /// The bundle folder the run evaluates against (a home folder written `~`).
    pub bundle: PathBuf,
    pub coder: String,
    pub judge: String,
    /// What every Coder and Judge request of the run is sent with (part of what a resumed
    /// run's requests must match to be answered from the recording).
    pub coder_sampling: Sampling,
    pub judge_sampling: Sampling,
    /// Set for a scripted session (no model called).
    pub scripted: Option<String>,
    /// The scripted session's folder, so a resume serves the same replies.
    #[serde(default)]
    pub session: Option<PathBuf>,
    pub compile_only: bool,
    pub gpu: Option<String>,
    pub arch: String,
    pub config: SearchConfig,
    pub seed: u64,
    pub protocol: ProtocolOptions,
    /// ncu sections (`default`, `fast`, a folder), or `None` for no profiles.
    pub profile_sections: Option<String>,
}

/// One line of `events.jsonl`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum RunEvent {
    Started {
        header: Box<RunHeader>,
    },
    /// A resume of a killed run.
    Resumed {
        /// Bytes of a torn last event cut off.
        torn_bytes: usize,
        /// The budget from here on (flags given to the resume may raise it).
        #[serde(default)]
        budget: Option<crate::search::Budget>,
    },
    /// A change of the search's state, replayed on resume.
    Search {
        entry: JournalEntry,
    },
    /// The orchestrator began handing out jobs after a completion (or at the start).
    RefillStarted,
    /// ... and stopped: the search said wait or done.
    RefillEnded,
    /// One LLM call (for reading the log; spend is counted from the search's entries).
    LlmCall {
        node: NodeId,
        agent: String,
        model: String,
        tokens: Option<u64>,
        dollars: Option<f64>,
        seconds: f64,
        /// Why the reply was refused and asked again, if it was.
        rejected: Option<String>,
        /// What the budgets counted for it (a resume carries the Judge's part of a job that
        /// was killed after its prescription was applied).
        spend: crate::search::Spend,
    },
    /// A node's evaluation finished (the verdict, for reading the log).
    Evaluated {
        node: NodeId,
        status: String,
        summary: String,
    },
    /// `best/` now holds this node.
    Best {
        node: NodeId,
        speedup: f64,
    },
    Finished {
        reason: String,
    },
}

pub fn node_dir(root: &Path, node: NodeId) -> PathBuf {
    crate::store::node_path(root, u64::from(node.0))
}

pub fn write(dir: &Path, name: &str, contents: impl AsRef<[u8]>) -> Result<(), StoreError> {
    write_atomic(&dir.join(name), contents.as_ref())
}

/// Writes `value` as JSON with home folders written as `~` (a result quotes nvcc's command line
/// and the library's path; the run directory does not say where this machine keeps things).
pub fn write_json<T: Serialize>(dir: &Path, name: &str, value: &T) -> Result<(), StoreError> {
    // Every record type serializes (no maps with non-string keys, no failing impls).
    let text = serde_json::to_string_pretty(value).unwrap_or_default();
    write(dir, name, crate::paths::scrub(&text))
}

/// The prompts and replies of one expansion's calls, numbered on from `first`.
pub fn write_exchanges(
    dir: &Path,
    agent: &str,
    first: usize,
    exchanges: &[Exchange],
) -> Result<(), StoreError> {
    for (offset, exchange) in exchanges.iter().enumerate() {
        let mut text = String::new();
        if let Some(system) = &exchange.request.system {
            text.push_str(&format!("# system\n\n{system}\n\n"));
        }
        for message in &exchange.request.messages {
            let role = match message.role {
                crate::llm::Role::User => "user",
                crate::llm::Role::Assistant => "assistant",
            };
            text.push_str(&format!("# {role}\n\n{}\n\n", message.content));
        }
        text.push_str(&format!(
            "# reply ({}, {:?})\n\n{}\n",
            exchange.response.model, exchange.response.finish, exchange.response.text
        ));
        if let Some(why) = &exchange.rejected {
            text.push_str(&format!("\n# rejected\n\n{why}\n"));
        }
        write(
            &dir.join("llm"),
            &format!("{agent}-{}.md", first + offset),
            crate::paths::scrub(&text),
        )?;
    }
    Ok(())
}

/// A node as its children's prompts show it.
#[derive(Debug, Clone)]
pub struct NodeRecord {
    pub code: String,
    pub result: CandidateResult,
    pub profile: ProfileRecord,
}

impl NodeRecord {
    pub fn load(root: &Path, node: NodeId) -> Result<NodeRecord, String> {
        let dir = node_dir(root, node);
        let read = |name: &str| {
            std::fs::read_to_string(dir.join(name)).map_err(|e| {
                format!("node {node}: cannot read {name} ({e}); the run directory is incomplete")
            })
        };
        let code = read("kernel.cu")?;
        let result: CandidateResult = serde_json::from_str(&read("eval.json")?)
            .map_err(|e| format!("node {node}: eval.json is not a result document: {e}"))?;
        let profile = load_profile(&dir).unwrap_or_else(|| {
            ProfileRecord::unavailable(match result.status {
                crate::eval::Status::Correct => "not profiled",
                crate::eval::Status::Compiled => super::evaluator::COMPILE_ONLY,
                _ => "the kernel failed, so it was not profiled",
            })
        });
        Ok(NodeRecord {
            code,
            result,
            profile,
        })
    }

    pub fn profile(&self) -> Profile<'_> {
        profile_view(&self.profile)
    }
}

pub fn load_profile(dir: &Path) -> Option<ProfileRecord> {
    let text = std::fs::read_to_string(dir.join("ncu.json")).ok()?;
    serde_json::from_str(&text).ok()
}

pub fn profile_view(record: &ProfileRecord) -> Profile<'_> {
    match (&record.judge_view, &record.reason) {
        (Some(view), _) if record.profiled => Profile::Profiled(view),
        (_, Some(reason)) => Profile::NotProfiled { reason },
        _ => Profile::NotProfiled {
            reason: "not profiled",
        },
    }
}
