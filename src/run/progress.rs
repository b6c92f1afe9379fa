//! What a running tuning session shows: a progress bar (nodes against the node budget, best
//! speedup, spend, jobs in flight) on a terminal, or one line per finished node when stderr is a
//! log file, so a run under CI or `nohup` still says what it is doing.

use std::io::IsTerminal;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use super::records::RunHeader;
use crate::search::{Job, JobKind, NodeId, NodeState, Search};

/// How progress is shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Style {
    /// A bar on a terminal, lines otherwise.
    Auto,
    /// One line per finished node.
    Lines,
    Quiet,
}

pub struct Progress {
    bar: Option<ProgressBar>,
    lines: bool,
}

impl Progress {
    pub fn new(style: Style, header: &RunHeader, search: &Search) -> Progress {
        let terminal = std::io::stderr().is_terminal();
        let (bar, lines) = match style {
            Style::Quiet => (None, false),
            Style::Lines => (None, true),
            Style::Auto if !terminal => (None, true),
            Style::Auto => {
                let bar = ProgressBar::with_draw_target(
                    Some(u64::from(header.config.budget.max_nodes)),
                    ProgressDrawTarget::stderr(),
                );
                // A constant template: it parses.
                if let Ok(style) = ProgressStyle::with_template(
                    "{spinner} {prefix} [{bar:24}] {pos}/{len} nodes · {msg} · {elapsed}",
                ) {
                    bar.set_style(style.progress_chars("=> "));
                }
                bar.set_prefix(header.problem.clone());
                bar.enable_steady_tick(std::time::Duration::from_millis(250));
                (Some(bar), false)
            }
        };
        let progress = Progress { bar, lines };
        progress.refresh(search);
        progress
    }

    fn refresh(&self, search: &Search) {
        if let Some(bar) = &self.bar {
            bar.set_position(u64::from(search.candidates()));
            bar.set_message(status_line(search));
        }
    }

    pub fn issued(&self, job: &Job) {
        if let Some(bar) = &self.bar {
            let what = match job.kind {
                JobKind::Optimize => "optimizing",
                JobKind::Repair { .. } => "repairing",
            };
            bar.set_message(format!("{what} node {} → {}", job.parent, job.child));
        }
    }

    /// One node finished (evaluated or abandoned).
    pub fn completed(&self, search: &Search, node: NodeId) {
        let line = search.node(node).map(node_line).unwrap_or_default();
        match &self.bar {
            Some(bar) => {
                bar.println(&line);
                self.refresh(search);
            }
            None if self.lines => eprintln!("{line} · {}", status_line(search)),
            None => {}
        }
    }

    pub fn clear(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}

fn status_line(search: &Search) -> String {
    let best = search
        .best()
        .and_then(|node| node.speedup())
        .map_or("no correct kernel yet".to_string(), |s| {
            format!("best {s:.2}×")
        });
    let spent = search.spent();
    format!(
        "{best} · {} · {} tokens · {} in flight",
        spent.dollars,
        spent.tokens,
        search.in_flight().len()
    )
}

/// `node 5 (from 2, repair 1): correct 1.42× — <strategy>`
pub fn node_line(node: &crate::search::Node) -> String {
    let origin = match (node.parent, &node.kind) {
        (Some(parent), crate::search::NodeKind::Repair { attempt }) => {
            format!("from {parent}, repair {attempt}")
        }
        (Some(parent), _) => format!("from {parent}"),
        (None, _) => "root".into(),
    };
    let verdict = match (&node.state, &node.evaluation) {
        (NodeState::Abandoned { reason }, _) => format!("abandoned: {}", first_line(reason)),
        (_, Some(crate::search::Evaluation::Correct { speedup, .. })) => {
            format!("correct {speedup:.2}×")
        }
        (_, Some(crate::search::Evaluation::Failed { reason })) => {
            format!("failed: {}", first_line(reason))
        }
        (_, Some(crate::search::Evaluation::Unverified { reason })) => {
            format!("built ({})", first_line(reason))
        }
        (_, None) => "in flight".into(),
    };
    let strategy = node
        .strategy
        .as_deref()
        .map(|s| format!(" — {}", first_line(s)))
        .unwrap_or_default();
    format!("node {} ({origin}): {verdict}{strategy}", node.id)
}

fn first_line(text: &str) -> String {
    let line = text.lines().next().unwrap_or("").trim();
    match line.char_indices().nth(90) {
        Some((cut, _)) => format!("{}…", &line[..cut]),
        None => line.to_string(),
    }
}
