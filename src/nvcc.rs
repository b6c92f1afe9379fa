//! nvcc as kforge drives it: the version, the exact command line that turns one `.cu` file into
//! a shared library for one architecture, and the ptxas resource report parsed per kernel.
//! Both `kforge doctor` and the evaluator build through [`Nvcc::shared_library`], so a doctor
//! that says "nvcc builds sm_90" has tested the same command a candidate will get.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::proc;

/// A GPU architecture as nvcc names it: `sm_90`, `sm_90a`, `sm_80`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Arch(String);

#[derive(Debug, Clone, thiserror::Error, PartialEq)]
#[error("`{0}` is not a GPU architecture; write it as nvcc does, e.g. sm_90 or sm_90a")]
pub struct BadArch(String);

impl Arch {
    pub fn parse(text: &str) -> Result<Self, BadArch> {
        let digits = text
            .strip_prefix("sm_")
            .ok_or_else(|| BadArch(text.into()))?;
        let core = digits.strip_suffix('a').unwrap_or(digits);
        if core.len() >= 2 && core.chars().all(|c| c.is_ascii_digit()) {
            Ok(Arch(text.to_string()))
        } else {
            Err(BadArch(text.into()))
        }
    }

    pub fn from_compute_capability(major: u32, minor: u32) -> Self {
        Arch(format!("sm_{major}{minor}"))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// `-gencode=arch=compute_90a,code=sm_90a`: the form that also assembles wgmma (HOPPER.md).
    pub fn gencode(&self) -> String {
        let number = &self.0["sm_".len()..];
        format!("-gencode=arch=compute_{number},code=sm_{number}")
    }
}

impl std::fmt::Display for Arch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// A located nvcc and the folders its libraries live in.
#[derive(Debug, Clone)]
pub struct Nvcc {
    pub path: PathBuf,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NvccVersion {
    /// "13.0"
    pub release: String,
    /// "13.0.88"
    pub full: String,
}

impl Nvcc {
    pub fn new(path: impl Into<PathBuf>) -> Self {
        Nvcc { path: path.into() }
    }

    /// `-L` folders beside nvcc: the PyPI wheels keep `lib/` where nvcc.profile does not look.
    fn library_dirs(&self) -> Vec<PathBuf> {
        let Some(root) = self.path.parent().and_then(Path::parent) else {
            return Vec::new();
        };
        ["lib", "lib64"]
            .iter()
            .map(|d| root.join(d))
            .filter(|d| d.join("libcudart_static.a").exists())
            .collect()
    }

    pub fn command(&self) -> proc::Command {
        // nvcc finds cicc, ptxas and the host compiler through PATH; its own folder goes first.
        let mut command = proc::Command::new(&self.path);
        if let Some(bin) = self.path.parent() {
            command = command.path_prepend(bin);
        }
        command
    }

    pub async fn version(&self) -> Result<NvccVersion, String> {
        let out = self
            .command()
            .arg("--version")
            .timeout(Duration::from_secs(30))
            .run()
            .await
            .map_err(|e| e.to_string())?;
        if !out.success() {
            return Err(format!(
                "`nvcc --version` failed ({}): {}",
                out.exit,
                first_lines(&out.combined(), 3)
            ));
        }
        parse_version(&out.stdout).ok_or_else(|| {
            format!(
                "unrecognised `nvcc --version` output: {}",
                first_lines(&out.stdout, 2)
            )
        })
    }

    /// The command that compiles `source` into the shared library `output` for `arch`, with the
    /// ptxas resource report (`-Xptxas -v`) and lineinfo for profiling.
    pub fn shared_library(
        &self,
        source: &Path,
        output: &Path,
        arch: &Arch,
        include_dirs: &[PathBuf],
        extra_flags: &[String],
    ) -> proc::Command {
        let mut command = self
            .command()
            .args(["-shared", "-Xcompiler", "-fPIC", "-O3", "-lineinfo"])
            .arg(arch.gencode())
            .args(["-Xptxas", "-v"]);
        for dir in include_dirs {
            command = command.arg(format!("-I{}", dir.display()));
        }
        for dir in self.library_dirs() {
            command = command.arg(format!("-L{}", dir.display()));
        }
        command
            .args(extra_flags.iter().cloned())
            .arg("-o")
            .arg(output)
            .arg(source)
    }

    /// The command that builds a standalone executable (doctor's profiling probe).
    pub fn executable(&self, source: &Path, output: &Path, arch: &Arch) -> proc::Command {
        let mut command = self.command().arg(arch.gencode());
        for dir in self.library_dirs() {
            command = command.arg(format!("-L{}", dir.display()));
        }
        command.arg("-o").arg(output).arg(source)
    }
}

/// "Cuda compilation tools, release 13.0, V13.0.88" → 13.0 / 13.0.88.
pub fn parse_version(text: &str) -> Option<NvccVersion> {
    let line = text.lines().find(|l| l.contains("release"))?;
    let release = line
        .split("release")
        .nth(1)?
        .trim()
        .split(',')
        .next()?
        .trim()
        .to_string();
    let full = line
        .split_whitespace()
        .find_map(|w| w.strip_prefix('V'))
        .map(|v| v.trim_end_matches(',').to_string())
        .unwrap_or_else(|| release.clone());
    Some(NvccVersion { release, full })
}

/// The first `n` non-empty lines, for one-line error summaries.
pub fn first_lines(text: &str, n: usize) -> String {
    text.lines()
        .map(str::trim_end)
        .filter(|l| !l.trim().is_empty())
        .take(n)
        .collect::<Vec<_>>()
        .join(" | ")
}

/// The lines of an nvcc log that say what went wrong (errors before warnings).
pub fn error_lines(log: &str) -> Vec<String> {
    let mut errors: Vec<String> = log
        .lines()
        .filter(|l| {
            let lower = l.to_ascii_lowercase();
            lower.contains("error") || lower.contains("fatal") || lower.contains("cannot find")
        })
        .map(|l| l.trim().to_string())
        .collect();
    errors.dedup();
    errors
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_real_version_output() {
        let text = "nvcc: NVIDIA (R) Cuda compiler driver\nCopyright (c) 2005-2025 NVIDIA Corporation\nBuilt on Wed_Aug_20_01:58:59_PM_PDT_2025\nCuda compilation tools, release 13.0, V13.0.88\nBuild cuda_13.0.r13.0/compiler.36424714_0\n";
        let v = parse_version(text).unwrap();
        assert_eq!(v.release, "13.0");
        assert_eq!(v.full, "13.0.88");
        assert_eq!(parse_version("garbage"), None);
    }

    #[test]
    fn arch_forms() {
        assert_eq!(
            Arch::parse("sm_90").unwrap().gencode(),
            "-gencode=arch=compute_90,code=sm_90"
        );
        assert_eq!(
            Arch::parse("sm_90a").unwrap().gencode(),
            "-gencode=arch=compute_90a,code=sm_90a"
        );
        assert!(Arch::parse("90").is_err());
        assert!(Arch::parse("sm_x").is_err());
        assert_eq!(Arch::from_compute_capability(8, 6).as_str(), "sm_86");
    }

    #[test]
    fn error_lines_pick_the_failures() {
        let log = "ptxas info    : 0 bytes gmem\nk.cu(3): error: identifier \"foo\" is undefined\n/usr/bin/ld: cannot find -lcudart_static: No such file or directory\n";
        let lines = error_lines(log);
        assert_eq!(lines.len(), 2);
        assert!(lines[0].contains("identifier"));
    }
}
