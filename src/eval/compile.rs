//! Compiling a candidate: one `.cu` file plus the shipped `kforge.h` into a shared library for
//! one architecture, with the full log kept and ptxas's resource report parsed per kernel.
//!
//! Builds are cached under `<home>/compile-cache/<key>/`, the key being a hash of the source,
//! the header, the flags, the architecture and the nvcc version: the same candidate is never
//! compiled twice, and a changed header or nvcc never reuses a stale library. A build that fails
//! is cached too (its log is the Coder's feedback either way).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::nvcc::{Arch, Nvcc};
use crate::proc;

/// The candidate ABI header, written beside every candidate before it is compiled.
pub const ABI_HEADER: &str = include_str!("kforge.h");
pub const ABI_HEADER_NAME: &str = "kforge.h";

/// Resources ptxas reports for one kernel.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct KernelResources {
    /// Demangled where possible (`add_one(float*, int)`).
    pub name: String,
    pub mangled: String,
    pub registers: u32,
    pub shared_memory_bytes: u64,
    pub stack_frame_bytes: u64,
    pub spill_stores_bytes: u64,
    pub spill_loads_bytes: u64,
    pub constant_memory_bytes: u64,
    pub barriers: u32,
}

/// What compiling one candidate produced.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CompileResult {
    pub ok: bool,
    /// The shared library (present when `ok`).
    pub library: Option<PathBuf>,
    pub arch: String,
    /// The exact command line that was run.
    pub command: String,
    /// nvcc's whole output (stdout then stderr).
    pub log: String,
    pub kernels: Vec<KernelResources>,
    pub seconds: f64,
    pub cached: bool,
    pub timed_out: bool,
    pub cache_key: String,
}

impl CompileResult {
    /// The error lines of the log, for reports and the Coder's repair prompt.
    pub fn error_excerpt(&self, max_lines: usize) -> String {
        let errors = crate::nvcc::error_lines(&self.log);
        if errors.is_empty() {
            return self
                .log
                .lines()
                .take(max_lines)
                .collect::<Vec<_>>()
                .join("\n");
        }
        errors
            .into_iter()
            .take(max_lines)
            .collect::<Vec<_>>()
            .join("\n")
    }
}

#[derive(Debug, thiserror::Error)]
pub enum CompileError {
    #[error("cannot use the compile cache at {dir}: {source}")]
    Cache {
        dir: String,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Spawn(#[from] proc::ProcError),
}

/// Compiles candidates with one nvcc for one architecture.
#[derive(Debug, Clone)]
pub struct Compiler {
    pub nvcc: Nvcc,
    /// nvcc's full version, part of the cache key.
    pub nvcc_version: String,
    pub arch: Arch,
    pub cache_dir: PathBuf,
    pub timeout: Duration,
    pub extra_flags: Vec<String>,
}

impl Compiler {
    fn cache_key(&self, source: &str) -> String {
        let mut hasher = Sha256::new();
        for part in [
            source,
            ABI_HEADER,
            self.arch.as_str(),
            &self.nvcc_version,
            &self.extra_flags.join("\u{1f}"),
        ] {
            hasher.update(part.as_bytes());
            hasher.update([0u8]);
        }
        hex::encode(&hasher.finalize()[..16])
    }

    /// Compiles `source` (the candidate's text), reusing the cache.
    pub async fn compile(&self, source: &str) -> Result<CompileResult, CompileError> {
        let key = self.cache_key(source);
        let dir = self.cache_dir.join(&key);
        let result_file = dir.join("compile.json");
        if let Ok(text) = std::fs::read_to_string(&result_file)
            && let Ok(mut cached) = serde_json::from_str::<CompileResult>(&text)
            && (!cached.ok || cached.library.as_ref().is_some_and(|l| l.exists()))
        {
            cached.cached = true;
            return Ok(cached);
        }
        let cache_err = |source| CompileError::Cache {
            dir: crate::paths::display(&dir),
            source,
        };
        std::fs::create_dir_all(&dir).map_err(cache_err)?;
        let cu = dir.join("candidate.cu");
        std::fs::write(&cu, source).map_err(cache_err)?;
        std::fs::write(dir.join(ABI_HEADER_NAME), ABI_HEADER).map_err(cache_err)?;
        // Build under a temporary name so a killed build never leaves a library that looks done.
        let partial = dir.join("candidate.so.partial");
        let library = dir.join("candidate.so");
        let command = self
            .nvcc
            .shared_library(
                &cu,
                &partial,
                &self.arch,
                std::slice::from_ref(&dir),
                &self.extra_flags,
            )
            .cwd(&dir)
            .timeout(self.timeout);
        let command_line = command.display_line();
        let started = Instant::now();
        let out = command.run().await?;
        let seconds = started.elapsed().as_secs_f64();
        let timed_out = out.exit == proc::Exit::TimedOut;
        let mut log = out.combined();
        if timed_out {
            log.push_str(&format!(
                "\nkforge: nvcc did not finish within {} s and was stopped\n",
                self.timeout.as_secs()
            ));
        }
        let ok = out.success() && partial.exists();
        if ok {
            std::fs::rename(&partial, &library).map_err(cache_err)?;
        } else {
            let _ = std::fs::remove_file(&partial);
        }
        let result = CompileResult {
            ok,
            library: ok.then_some(library),
            arch: self.arch.to_string(),
            command: command_line.replace(&*dir.to_string_lossy(), "."),
            kernels: parse_ptxas(&log),
            log: log.replace(&*dir.to_string_lossy(), "."),
            seconds,
            cached: false,
            timed_out,
            cache_key: key,
        };
        std::fs::write(dir.join("compile.log"), &result.log).map_err(cache_err)?;
        // A timed-out build is not cached: the next try may have a less loaded machine.
        if !timed_out {
            let json = serde_json::to_string_pretty(&result).unwrap_or_default();
            std::fs::write(&result_file, json).map_err(cache_err)?;
        }
        Ok(result)
    }
}

/// Parses `-Xptxas -v` output into one entry per kernel.
///
/// ptxas writes, per entry function:
/// ```text
/// ptxas info    : Compiling entry function '_Z7add_onePfi' for 'sm_90'
/// ptxas info    : Function properties for _Z7add_onePfi
///     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
/// ptxas info    : Used 8 registers, used 1 barriers, 4096 bytes smem, 368 bytes cmem[0]
/// ```
pub fn parse_ptxas(log: &str) -> Vec<KernelResources> {
    let mut kernels: Vec<KernelResources> = Vec::new();
    let mut current: Option<usize> = None;
    let mut properties_for: Option<String> = None;
    for line in log.lines() {
        let line = line.trim();
        if let Some(rest) = line.split("Compiling entry function '").nth(1) {
            let mangled = rest.split('\'').next().unwrap_or("").to_string();
            kernels.push(KernelResources {
                name: demangle(&mangled),
                mangled,
                ..KernelResources::default()
            });
            current = Some(kernels.len() - 1);
        } else if let Some(rest) = line.split("Function properties for ").nth(1) {
            properties_for = Some(rest.trim().to_string());
        } else if line.contains("bytes stack frame") {
            let target = properties_for
                .as_ref()
                .and_then(|name| kernels.iter().position(|k| &k.mangled == name));
            if let Some(k) = target.map(|i| &mut kernels[i]) {
                k.stack_frame_bytes = number_before(line, "bytes stack frame").unwrap_or(0);
                k.spill_stores_bytes = number_before(line, "bytes spill stores").unwrap_or(0);
                k.spill_loads_bytes = number_before(line, "bytes spill loads").unwrap_or(0);
            }
        } else if line.contains("Used ") && line.contains("registers") {
            if let Some(k) = current.map(|i| &mut kernels[i]) {
                k.registers = number_before(line, "registers").unwrap_or(0) as u32;
                k.barriers = number_before(line, "barriers").unwrap_or(0) as u32;
                k.shared_memory_bytes = number_before(line, "bytes smem").unwrap_or(0);
                k.constant_memory_bytes = number_before(line, "bytes cmem[0]").unwrap_or(0);
            }
            current = None;
        }
    }
    kernels
}

/// The integer just before `marker` in `line` ("8 registers" → 8).
fn number_before(line: &str, marker: &str) -> Option<u64> {
    let index = line.find(marker)?;
    line[..index]
        .split(|c: char| c == ',' || c.is_whitespace())
        .rev()
        .find(|w| !w.is_empty())?
        .parse()
        .ok()
}

fn demangle(mangled: &str) -> String {
    cpp_demangle::Symbol::new(mangled)
        .ok()
        .and_then(|s| s.demangle().ok())
        .unwrap_or_else(|| mangled.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    const PTXAS_LOG: &str = "ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function '_Z14softmax_kernelPKfPfi' for 'sm_90'
ptxas info    : Function properties for _Z14softmax_kernelPKfPfi
    16 bytes stack frame, 8 bytes spill stores, 12 bytes spill loads
ptxas info    : Used 40 registers, used 1 barriers, 4096 bytes smem, 380 bytes cmem[0]
ptxas info    : Compile time = 6.731 ms
ptxas info    : Compiling entry function '_Z7add_onePfi' for 'sm_90'
ptxas info    : Function properties for _Z7add_onePfi
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 8 registers, used 0 barriers, 364 bytes cmem[0]
";

    #[test]
    fn ptxas_report_is_parsed_per_kernel() {
        let kernels = parse_ptxas(PTXAS_LOG);
        assert_eq!(kernels.len(), 2);
        let k = &kernels[0];
        assert_eq!(k.name, "softmax_kernel(float const*, float*, int)");
        assert_eq!(k.registers, 40);
        assert_eq!(k.barriers, 1);
        assert_eq!(k.shared_memory_bytes, 4096);
        assert_eq!(k.stack_frame_bytes, 16);
        assert_eq!(k.spill_stores_bytes, 8);
        assert_eq!(k.spill_loads_bytes, 12);
        assert_eq!(k.constant_memory_bytes, 380);
        assert_eq!(kernels[1].registers, 8);
        assert_eq!(kernels[1].shared_memory_bytes, 0);
    }

    #[test]
    fn garbage_gives_no_kernels() {
        assert!(parse_ptxas("nothing here\n").is_empty());
    }
}
