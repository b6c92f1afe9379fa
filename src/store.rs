//! The run directory (DESIGN.md §2): everything a tuning run leaves behind, laid out so a killed
//! run can be resumed and a finished one read without kforge.
//!
//! ```text
//! <run>/events.jsonl   append-only: one JSON object per line, flushed and synced per event
//! <run>/tree.json      a snapshot of the search, replaced atomically
//! <run>/nodes/<id>/    kernel.cu, compile.log, eval.json, ncu.csv, judge.json, prompts, responses
//! <run>/best/          the best correct kernel so far, replaced atomically the moment it is found
//! <run>/summary.json   written when the run ends
//! ```
//!
//! Guarantees: an event is on disk (fsync) before `append` returns, so a crash loses at most the
//! event being written; a torn last line (the process killed mid-write) is cut off on reopen and
//! reported, never parsed as garbage; every other file is written to a temporary name and renamed,
//! so a reader never sees half a file. Event payloads are the caller's (any serde type): the store
//! does not know the search's or the agents' types.

use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};

use serde::Serialize;
use serde::de::DeserializeOwned;

pub const EVENTS_FILE: &str = "events.jsonl";

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("{action} {path}: {source}")]
    Io {
        action: &'static str,
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "{path} line {line} is not a run event ({message}); the run directory was edited or belongs to another kforge version"
    )]
    BadEvent {
        path: String,
        line: usize,
        message: String,
    },
    #[error("{0} is not a kforge run directory (no {EVENTS_FILE})")]
    NotARun(String),
    #[error("{0} already exists; choose another run name or resume it with --resume")]
    Exists(String),
}

fn io(action: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> StoreError {
    let path = crate::paths::display(path);
    move |source| StoreError::Io {
        action,
        path,
        source,
    }
}

/// An open run directory.
#[derive(Debug)]
pub struct RunDir {
    root: PathBuf,
    events: File,
    appended: usize,
}

/// What reopening a run found.
#[derive(Debug)]
pub struct Reopened<E> {
    pub run: RunDir,
    pub events: Vec<E>,
    /// Bytes of a torn last line that were cut off (the run was killed mid-write).
    pub torn_bytes: usize,
}

impl RunDir {
    /// Creates `<parent>/<name>/` with an empty event log; refuses an existing run.
    pub fn create(parent: &Path, name: &str) -> Result<RunDir, StoreError> {
        let root = parent.join(name);
        if root.join(EVENTS_FILE).exists() {
            return Err(StoreError::Exists(crate::paths::display(&root)));
        }
        std::fs::create_dir_all(root.join("nodes")).map_err(io("cannot create", &root))?;
        let path = root.join(EVENTS_FILE);
        let events = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(io("cannot create", &path))?;
        Ok(RunDir {
            root,
            events,
            appended: 0,
        })
    }

    /// Reopens a run to continue it: reads every complete event, cuts off a torn last line.
    pub fn reopen<E: DeserializeOwned>(root: &Path) -> Result<Reopened<E>, StoreError> {
        let path = root.join(EVENTS_FILE);
        if !path.is_file() {
            return Err(StoreError::NotARun(crate::paths::display(root)));
        }
        let (bytes, torn_bytes) = read_whole_lines(&path).map_err(io("cannot read", &path))?;
        let mut events = Vec::new();
        for (index, line) in BufReader::new(&bytes[..]).lines().enumerate() {
            let line = line.map_err(io("cannot read", &path))?;
            if line.trim().is_empty() {
                continue;
            }
            let event = serde_json::from_str(&line).map_err(|e| StoreError::BadEvent {
                path: crate::paths::display(&path),
                line: index + 1,
                message: e.to_string(),
            })?;
            events.push(event);
        }
        let events_file = OpenOptions::new()
            .append(true)
            .open(&path)
            .map_err(io("cannot open", &path))?;
        Ok(Reopened {
            run: RunDir {
                root: root.to_path_buf(),
                events: events_file,
                appended: 0,
            },
            events,
            torn_bytes,
        })
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Events appended through this handle.
    pub fn appended(&self) -> usize {
        self.appended
    }

    /// Appends one event and syncs it to disk before returning.
    pub fn append<E: Serialize>(&mut self, event: &E) -> Result<(), StoreError> {
        let path = self.root.join(EVENTS_FILE);
        let mut line = serde_json::to_vec(event).map_err(|e| StoreError::BadEvent {
            path: crate::paths::display(&path),
            line: self.appended + 1,
            message: e.to_string(),
        })?;
        line.push(b'\n');
        self.events
            .write_all(&line)
            .and_then(|()| self.events.sync_data())
            .map_err(io("cannot append to", &path))?;
        self.appended += 1;
        Ok(())
    }

    /// The folder of one node (created on first use).
    pub fn node_dir(&self, node: u64) -> Result<PathBuf, StoreError> {
        let dir = node_path(&self.root, node);
        std::fs::create_dir_all(&dir).map_err(io("cannot create", &dir))?;
        Ok(dir)
    }

    /// Writes `relative` under the run atomically (temporary file, then rename).
    pub fn write(&self, relative: &Path, contents: &[u8]) -> Result<PathBuf, StoreError> {
        let path = self.root.join(relative);
        write_atomic(&path, contents)?;
        Ok(path)
    }

    /// Replaces `best/` with these files in one rename, so `best/` is always one whole kernel.
    pub fn replace_best(&self, files: &[(&str, &[u8])]) -> Result<PathBuf, StoreError> {
        let staging = self.root.join(".best.partial");
        let best = self.root.join("best");
        let old = self.root.join(".best.old");
        let _ = std::fs::remove_dir_all(&staging);
        std::fs::create_dir_all(&staging).map_err(io("cannot create", &staging))?;
        for (name, contents) in files {
            let path = staging.join(name);
            std::fs::write(&path, contents).map_err(io("cannot write", &path))?;
        }
        let _ = std::fs::remove_dir_all(&old);
        if best.exists() {
            std::fs::rename(&best, &old).map_err(io("cannot replace", &best))?;
        }
        std::fs::rename(&staging, &best).map_err(io("cannot replace", &best))?;
        let _ = std::fs::remove_dir_all(&old);
        Ok(best)
    }
}

/// Where node `node` of the run at `root` keeps its files (see [`RunDir::node_dir`]).
pub fn node_path(root: &Path, node: u64) -> PathBuf {
    root.join("nodes").join(node.to_string())
}

/// Reads an append-only JSON-lines file and cuts off a torn last line (the writer was killed
/// mid-write), on disk too, so the next append starts a line of its own. Returns the complete
/// lines and how many bytes were cut off.
pub fn read_whole_lines(path: &Path) -> std::io::Result<(Vec<u8>, usize)> {
    let mut bytes = std::fs::read(path)?;
    let complete = bytes.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
    let torn_bytes = bytes.len() - complete;
    if torn_bytes > 0 {
        let file = OpenOptions::new().write(true).open(path)?;
        file.set_len(complete as u64)?;
        file.sync_all()?;
        bytes.truncate(complete);
    }
    Ok((bytes, torn_bytes))
}

/// Writes a file through a temporary sibling and a rename.
pub fn write_atomic(path: &Path, contents: &[u8]) -> Result<(), StoreError> {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(io("cannot create", parent))?;
    }
    let mut tmp = path.as_os_str().to_os_string();
    tmp.push(".partial");
    let tmp = PathBuf::from(tmp);
    let mut file = File::create(&tmp).map_err(io("cannot write", &tmp))?;
    file.write_all(contents)
        .and_then(|()| file.sync_data())
        .map_err(io("cannot write", &tmp))?;
    std::fs::rename(&tmp, path).map_err(io("cannot write", path))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    struct Event {
        n: u32,
        text: String,
    }

    fn event(n: u32) -> Event {
        Event {
            n,
            text: format!("event {n}"),
        }
    }

    #[test]
    fn events_survive_reopening_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let mut run = RunDir::create(dir.path(), "r1").unwrap();
        for n in 0..3 {
            run.append(&event(n)).unwrap();
        }
        drop(run);
        let reopened = RunDir::reopen::<Event>(&dir.path().join("r1")).unwrap();
        assert_eq!(reopened.events, vec![event(0), event(1), event(2)]);
        assert_eq!(reopened.torn_bytes, 0);
        let mut run = reopened.run;
        run.append(&event(3)).unwrap();
        let again = RunDir::reopen::<Event>(&dir.path().join("r1")).unwrap();
        assert_eq!(again.events.len(), 4);
    }

    #[test]
    fn a_torn_last_line_is_cut_off_and_reported() {
        let dir = tempfile::tempdir().unwrap();
        let mut run = RunDir::create(dir.path(), "r").unwrap();
        run.append(&event(0)).unwrap();
        run.append(&event(1)).unwrap();
        drop(run);
        let path = dir.path().join("r").join(EVENTS_FILE);
        let mut file = OpenOptions::new().append(true).open(&path).unwrap();
        file.write_all(b"{\"n\":2,\"te").unwrap();
        drop(file);
        let reopened = RunDir::reopen::<Event>(&dir.path().join("r")).unwrap();
        assert_eq!(reopened.events, vec![event(0), event(1)]);
        assert_eq!(reopened.torn_bytes, 10);
        let mut run = reopened.run;
        run.append(&event(2)).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text.lines().count(), 3, "{text}");
        assert!(
            text.lines()
                .all(|l| serde_json::from_str::<Event>(l).is_ok())
        );
    }

    #[test]
    fn a_corrupt_middle_line_is_an_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("r");
        std::fs::create_dir_all(&root).unwrap();
        std::fs::write(
            root.join(EVENTS_FILE),
            "{\"n\":0,\"text\":\"a\"}\nnot json\n{\"n\":2,\"text\":\"c\"}\n",
        )
        .unwrap();
        let err = RunDir::reopen::<Event>(&root).unwrap_err().to_string();
        assert!(err.contains("line 2"), "{err}");
    }

    #[test]
    fn create_refuses_an_existing_run_and_reopen_a_non_run() {
        let dir = tempfile::tempdir().unwrap();
        RunDir::create(dir.path(), "r").unwrap();
        assert!(matches!(
            RunDir::create(dir.path(), "r"),
            Err(StoreError::Exists(_))
        ));
        assert!(matches!(
            RunDir::reopen::<Event>(dir.path()),
            Err(StoreError::NotARun(_))
        ));
    }

    #[test]
    fn best_is_replaced_whole() {
        let dir = tempfile::tempdir().unwrap();
        let run = RunDir::create(dir.path(), "r").unwrap();
        run.replace_best(&[("kernel.cu", b"v1"), ("eval.json", b"{}")])
            .unwrap();
        let best = run.replace_best(&[("kernel.cu", b"v2")]).unwrap();
        assert_eq!(std::fs::read(best.join("kernel.cu")).unwrap(), b"v2");
        assert!(
            !best.join("eval.json").exists(),
            "nothing of the old best remains"
        );
        let leftovers: Vec<_> = std::fs::read_dir(run.root())
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with('.'))
            .collect();
        assert!(leftovers.is_empty(), "{leftovers:?}");
    }

    #[test]
    fn node_files_are_written_atomically() {
        let dir = tempfile::tempdir().unwrap();
        let run = RunDir::create(dir.path(), "r").unwrap();
        let node = run.node_dir(7).unwrap();
        assert!(node.ends_with("nodes/7"));
        let path = run.write(Path::new("nodes/7/kernel.cu"), b"code").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"code");
        assert!(!path.with_extension("cu.partial").exists());
    }
}
