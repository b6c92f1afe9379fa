//! Links the binary so it runs without anyone exporting LD_LIBRARY_PATH by hand.
//!
//! - libtorch_cuda is linked with `--no-as-needed`: cargo passes `--as-needed`, which would drop it
//!   (nothing references it by symbol), and tch would then report CUDA unavailable on a GPU host.
//! - An RPATH (not RUNPATH, so it also serves libtorch_cuda's own dependencies) names torch's `lib/`
//!   and the CUDA libraries the torch wheel pulled in beside it. Where those folders do not exist
//!   (a GPU host that has its own torch), LD_LIBRARY_PATH still applies.
//! - The libtorch version is recorded so `kforge doctor` can compare it with Python's torch.

use std::env;
use std::fs;
use std::path::{Path, PathBuf};

fn main() {
    println!("cargo:rerun-if-env-changed=LIBTORCH");
    println!("cargo:rerun-if-changed=build.rs");
    let Ok(libtorch) = env::var("LIBTORCH") else {
        // torch-sys fails first with its own message; this one says what to run.
        println!(
            "cargo:warning=LIBTORCH is not set: run scripts/setup.sh once (it installs the pinned \
             torch wheel and writes .cargo/config.toml)"
        );
        return;
    };
    let libtorch = PathBuf::from(libtorch);
    let lib = libtorch.join("lib");

    let mut library_dirs = vec![lib.clone()];
    library_dirs.extend(wheel_cuda_library_dirs(&libtorch));
    println!("cargo:rustc-link-arg=-Wl,--disable-new-dtags");
    for dir in &library_dirs {
        println!("cargo:rustc-link-arg=-Wl,-rpath,{}", dir.display());
        println!("cargo:rustc-link-arg=-Wl,-rpath-link,{}", dir.display());
    }
    if lib.join("libtorch_cuda.so").exists() {
        println!("cargo:rustc-link-search=native={}", lib.display());
        println!("cargo:rustc-link-arg=-Wl,--no-as-needed");
        println!("cargo:rustc-link-arg=-ltorch_cuda");
        println!("cargo:rustc-link-arg=-ltorch");
        println!("cargo:rustc-link-arg=-Wl,--as-needed");
    }

    let version = fs::read_to_string(libtorch.join("version.py"))
        .ok()
        .and_then(|text| {
            text.lines()
                .find_map(|line| line.strip_prefix("__version__ = "))
                .map(|v| v.trim().trim_matches('\'').trim_matches('"').to_string())
        })
        .or_else(|| fs::read_to_string(libtorch.join("build-version")).ok())
        .unwrap_or_else(|| "unknown".to_string());
    println!("cargo:rustc-env=KFORGE_LIBTORCH_VERSION={}", version.trim());
}

/// `site-packages/nvidia/*/lib`: where the torch wheel's CUDA dependencies live.
fn wheel_cuda_library_dirs(libtorch: &Path) -> Vec<PathBuf> {
    let Some(site_packages) = libtorch.parent() else {
        return Vec::new();
    };
    let mut dirs = Vec::new();
    let Ok(entries) = fs::read_dir(site_packages.join("nvidia")) else {
        return dirs;
    };
    for entry in entries.flatten() {
        for candidate in [entry.path().join("lib"), entry.path().join("lib64")] {
            if candidate.is_dir() {
                dirs.push(candidate);
            }
        }
    }
    dirs.sort();
    dirs
}
