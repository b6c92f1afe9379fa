//! Compiling candidates with the real nvcc (the pinned PyPI wheels on machines without CUDA):
//! success with a ptxas report, a compile error with its log, and the cache.

use std::time::Duration;

use kforge::config::Settings;
use kforge::eval::compile::Compiler;
use kforge::nvcc::{Arch, Nvcc};
use kforge::tools::{self, Tool};

async fn compiler(cache: &std::path::Path) -> Compiler {
    let settings = Settings::default();
    let located = tools::locate(Tool::Nvcc, &settings)
        .expect("nvcc (scripts/setup.sh installs it into the kforge cache)");
    let nvcc = Nvcc::new(&located.path);
    let version = nvcc.version().await.expect("nvcc --version");
    Compiler {
        nvcc,
        nvcc_version: version.full,
        arch: Arch::parse("sm_90").unwrap(),
        cache_dir: cache.to_path_buf(),
        timeout: Duration::from_secs(300),
        extra_flags: Vec::new(),
    }
}

const GOOD: &str = include_str!("fixtures/candidates/gelu_correct.cu");

#[tokio::test]
async fn a_correct_candidate_compiles_with_a_ptxas_report_and_is_cached() {
    let cache = tempfile::tempdir().unwrap();
    let compiler = compiler(cache.path()).await;
    let first = compiler.compile(GOOD).await.unwrap();
    assert!(first.ok, "{}", first.log);
    assert!(!first.cached);
    let library = first.library.clone().unwrap();
    assert!(library.exists());
    assert!(
        first
            .command
            .contains("-gencode=arch=compute_90,code=sm_90"),
        "{}",
        first.command
    );
    let kernel = first
        .kernels
        .iter()
        .find(|k| k.name.contains("gelu"))
        .unwrap_or_else(|| panic!("no gelu kernel in {:?}\n{}", first.kernels, first.log));
    assert!(kernel.registers > 0);
    // The log never names the machine's cache folder.
    assert!(!first.log.contains(&*cache.path().to_string_lossy()));

    let second = compiler.compile(GOOD).await.unwrap();
    assert!(second.cached);
    assert_eq!(second.library, first.library);

    // Another architecture is another build.
    let mut sm80 = compiler.clone();
    sm80.arch = Arch::parse("sm_80").unwrap();
    let other = sm80.compile(GOOD).await.unwrap();
    assert!(other.ok && !other.cached);
    assert_ne!(other.library, first.library);
}

#[tokio::test]
async fn a_compile_error_keeps_the_log_and_names_the_line() {
    let cache = tempfile::tempdir().unwrap();
    let compiler = compiler(cache.path()).await;
    let bad = include_str!("fixtures/candidates/compile_error.cu");
    let result = compiler.compile(bad).await.unwrap();
    assert!(!result.ok);
    assert!(result.library.is_none());
    let excerpt = result.error_excerpt(5);
    assert!(excerpt.contains("error"), "{}", result.log);
    assert!(excerpt.contains("undefined_variable"), "{excerpt}");
    assert!(result.log.contains("candidate.cu("), "{}", result.log);
}

#[tokio::test]
async fn a_missing_entry_point_still_compiles_and_is_caught_at_load() {
    // Compile succeeds; the worker reports the missing kforge_forward (checked on the GPU host).
    let cache = tempfile::tempdir().unwrap();
    let compiler = compiler(cache.path()).await;
    let result = compiler
        .compile("#include \"kforge.h\"\n__global__ void k() {}\n")
        .await
        .unwrap();
    assert!(result.ok, "{}", result.log);
}
