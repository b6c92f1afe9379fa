//! Problem bundles (DESIGN.md §2): what `kforge import` makes of a KernelBench-format problem,
//! and the one way the rest of kforge reads it back without Python.
//!
//! A bundle is a folder `<out>/<name>/` holding `problem.json` ([`ProblemSpec`]), the reference
//! as TorchScript with its weights (`reference.pt`), a TorchScript input generator that
//! reproduces the problem's own `get_inputs()` for a seed (`inputs.pt`), optionally the Python
//! eager outputs for the self-check seed (`expected.pt`), and per-GPU baselines
//! (`baselines/<gpu-slug>.json`). `kernelbench/export.py` writes bundles; [`ProblemBundle`] loads
//! them, [`InputGenerator`] draws inputs and [`Reference`] runs the reference, with TorchScript's
//! graph optimisations off (DESIGN.md §4: optimised TorchScript times up to 5.5× faster than
//! eager and would deflate speedups).
//!
//! Layout: [`spec`] mirrors the JSON files, [`bundle`] loads and runs a bundle, [`inputs`] draws
//! inputs, [`import`] drives the exporter over files and folders, [`cli`] is `kforge import`.

pub mod bundle;
pub mod cli;
pub mod import;
pub mod inputs;
pub mod spec;

use std::path::PathBuf;

pub use bundle::{ProblemBundle, RecordedRun, Reference};
pub use inputs::InputGenerator;
pub use spec::{
    Baseline, BundleDevice, ConstantSpec, InputStructure, OutputSpec, ParameterKind, ParameterSpec,
    ProblemSpec, TensorSpec,
};

/// The bundle format this kforge writes and reads; `export.py` carries the same number.
pub const FORMAT_VERSION: u32 = 1;

/// Where bundles live unless `--out` says otherwise: `<home>/bundles`.
pub const BUNDLES_DIR: &str = "bundles";

/// Why a bundle could not be loaded or run. Every message says what to do next.
#[derive(Debug, thiserror::Error)]
pub enum ProblemError {
    #[error("no problem bundle `{name}` (looked in: {}); import it with `kforge import <problem.py>`", .tried.join(", "))]
    NotFound { name: String, tried: Vec<String> },
    #[error("bundle {dir} has no {file}: re-import it with `kforge import <problem.py>`")]
    MissingFile { dir: String, file: &'static str },
    #[error("cannot read {path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "{path} is not a valid bundle file: {message}; re-import it with `kforge import <problem.py>`"
    )]
    BadJson { path: String, message: String },
    #[error(
        "bundle {dir} has format version {found}, this kforge reads version {expected}: re-import \
         it with `kforge import <problem.py>`"
    )]
    FormatVersion {
        dir: String,
        found: String,
        expected: u32,
    },
    #[error("bundle {dir}: {what}: {message}")]
    Torch {
        dir: String,
        what: String,
        message: String,
    },
    #[error(
        "bundle {dir} was traced on {bundle} and can only run there (asked for {requested}); {hint}"
    )]
    DeviceMismatch {
        dir: String,
        bundle: String,
        requested: String,
        hint: &'static str,
    },
    #[error("bundle {dir}: {detail}")]
    Mismatch { dir: String, detail: String },
}

impl ProblemError {
    fn torch(dir: &std::path::Path, what: impl Into<String>, err: tch::TchError) -> Self {
        ProblemError::Torch {
            dir: crate::paths::display(dir),
            what: what.into(),
            message: err.to_string(),
        }
    }

    fn mismatch(dir: &std::path::Path, detail: String) -> Self {
        ProblemError::Mismatch {
            dir: crate::paths::display(dir),
            detail,
        }
    }
}

/// The file name a GPU's baselines take: `NVIDIA H200` → `nvidia-h200` (export.py spells the
/// same rule in `gpu_slug`).
pub fn gpu_slug(gpu_name: &str) -> String {
    let lowered: String = gpu_name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .collect();
    lowered
        .split('-')
        .filter(|part| !part.is_empty())
        .collect::<Vec<_>>()
        .join("-")
}

/// `<home>/bundles`.
pub fn default_bundle_root(settings: &crate::config::Settings) -> PathBuf {
    settings.home.join(BUNDLES_DIR)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gpu_names_become_file_names() {
        assert_eq!(gpu_slug("NVIDIA H200"), "nvidia-h200");
        assert_eq!(
            gpu_slug("NVIDIA GeForce RTX 4090 (rev. 2)"),
            "nvidia-geforce-rtx-4090-rev-2"
        );
        assert_eq!(gpu_slug("  A100-SXM4--80GB "), "a100-sxm4-80gb");
    }
}
