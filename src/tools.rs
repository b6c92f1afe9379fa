//! Finding the external tools kforge drives (nvcc, ncu, python3), in one documented order:
//! the setting (`tools.*`, `KFORGE_NVCC`...), then PATH, then the usual CUDA install folders, then
//! what `scripts/setup.sh` put in the kforge cache. Each answer says how it was found, so a
//! report can say "nvcc from the kforge cache" rather than leave the user guessing.

use std::path::{Path, PathBuf};

use crate::config::Settings;

/// The nvcc wheels setup.sh installs, relative to `$KFORGE_HOME`.
pub const CACHED_NVCC_HOME: &str = "nvcc-13.0.88/nvidia/cu13";
/// The Python environment setup.sh creates when the machine has no matching torch.
pub const CACHED_PYTHON: &str = "py/bin/python3";

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Located {
    pub path: PathBuf,
    /// "setting tools.nvcc", "PATH", "CUDA_HOME", "kforge cache", ...
    pub found_by: String,
}

#[derive(Debug, Clone, thiserror::Error)]
#[error("{tool} not found (looked in: {})", .tried.join(", "))]
pub struct NotFound {
    pub tool: &'static str,
    pub tried: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tool {
    Nvcc,
    Ncu,
    Python,
}

impl Tool {
    pub fn name(self) -> &'static str {
        match self {
            Tool::Nvcc => "nvcc",
            Tool::Ncu => "ncu",
            Tool::Python => "python3",
        }
    }

    fn setting(self, settings: &Settings) -> Option<&PathBuf> {
        match self {
            Tool::Nvcc => settings.tools.nvcc.as_ref(),
            Tool::Ncu => settings.tools.ncu.as_ref(),
            Tool::Python => settings.tools.python.as_ref(),
        }
    }

    fn setting_key(self) -> &'static str {
        match self {
            Tool::Nvcc => "tools.nvcc",
            Tool::Ncu => "tools.ncu",
            Tool::Python => "tools.python",
        }
    }
}

/// Finds `tool` for these settings.
pub fn locate(tool: Tool, settings: &Settings) -> Result<Located, NotFound> {
    let mut tried = Vec::new();
    if let Some(path) = tool.setting(settings) {
        // A setting that points nowhere is reported, not silently replaced by another tool.
        if is_executable(path) {
            return Ok(Located {
                path: path.clone(),
                found_by: format!("setting {}", tool.setting_key()),
            });
        }
        tried.push(format!(
            "{} = {} (not an executable file)",
            tool.setting_key(),
            crate::paths::display(path)
        ));
        return Err(NotFound {
            tool: tool.name(),
            tried,
        });
    }
    // The cached Python has torch by construction; prefer it over a PATH python3 without torch.
    if tool == Tool::Python {
        let cached = settings.home.join(CACHED_PYTHON);
        if is_executable(&cached) {
            return Ok(Located {
                path: cached,
                found_by: "kforge cache".into(),
            });
        }
    }
    if let Ok(path) = which::which(tool.name()) {
        return Ok(Located {
            path,
            found_by: "PATH".into(),
        });
    }
    tried.push("PATH".into());
    for (label, dir) in install_dirs(tool) {
        let candidate = dir.join(tool.name());
        if is_executable(&candidate) {
            return Ok(Located {
                path: candidate,
                found_by: label,
            });
        }
        tried.push(crate::paths::display(&dir));
    }
    if tool == Tool::Nvcc {
        let cached = settings.home.join(CACHED_NVCC_HOME).join("bin/nvcc");
        if is_executable(&cached) {
            return Ok(Located {
                path: cached,
                found_by: "kforge cache".into(),
            });
        }
        tried.push("kforge cache".into());
    }
    Err(NotFound {
        tool: tool.name(),
        tried,
    })
}

/// CUDA_HOME/CUDA_PATH, /usr/local/cuda, and for ncu the Nsight Compute install folders.
fn install_dirs(tool: Tool) -> Vec<(String, PathBuf)> {
    let mut dirs = Vec::new();
    for var in ["CUDA_HOME", "CUDA_PATH"] {
        if let Some(root) = std::env::var_os(var) {
            dirs.push((var.to_string(), PathBuf::from(root).join("bin")));
        }
    }
    if tool != Tool::Python {
        dirs.push((
            "/usr/local/cuda".into(),
            PathBuf::from("/usr/local/cuda/bin"),
        ));
    }
    if tool == Tool::Ncu {
        let mut found: Vec<PathBuf> = std::fs::read_dir("/opt/nvidia/nsight-compute")
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path())
            .collect();
        // Newest version first.
        found.sort();
        found.reverse();
        dirs.extend(
            found
                .into_iter()
                .map(|p| ("Nsight Compute install".into(), p)),
        );
    }
    dirs
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    path.metadata()
        .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_setting_that_points_nowhere_is_an_error_naming_it() {
        let mut settings = Settings::default();
        settings.tools.nvcc = Some(PathBuf::from("/nonexistent/nvcc"));
        let err = locate(Tool::Nvcc, &settings).unwrap_err();
        assert!(err.to_string().contains("tools.nvcc"), "{err}");
    }

    #[test]
    fn a_setting_wins() {
        let dir = tempfile::tempdir().unwrap();
        let fake = dir.path().join("ncu");
        std::fs::write(&fake, "#!/bin/sh\n").unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
        let mut settings = Settings::default();
        settings.tools.ncu = Some(fake.clone());
        let found = locate(Tool::Ncu, &settings).unwrap();
        assert_eq!(found.path, fake);
        assert_eq!(found.found_by, "setting tools.ncu");
    }
}
