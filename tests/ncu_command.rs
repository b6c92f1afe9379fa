//! The ncu command lines, and profiling end to end against a stand-in `ncu` (a shell script
//! printing what the real one printed on the H200 host), including every way a profile can be
//! unavailable.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use kforge::ncu::{
    DEFAULT_IMPORT_TIMEOUT, DEFAULT_MAX_LAUNCHES, DEFAULT_PROFILE_TIMEOUT, Page, ProfileSpec,
    ProfileUnavailable, SectionSet, classify_profile_output, collect, import_command,
    profile_commands,
};
use kforge::proc::{Exit, Output};

fn spec<'a>(
    ncu: &'a Path,
    sections: &'a kforge::ncu::ResolvedSections,
    stem: &'a Path,
    args: &'a [OsString],
) -> ProfileSpec<'a> {
    ProfileSpec {
        ncu,
        sections,
        report_stem: stem,
        target: Path::new("/opt/kforge/kforge"),
        target_args: args,
        profile_timeout: DEFAULT_PROFILE_TIMEOUT,
        import_timeout: DEFAULT_IMPORT_TIMEOUT,
        max_launches: Some(DEFAULT_MAX_LAUNCHES),
    }
}

#[test]
fn profile_and_import_command_lines() {
    let cache = tempfile::tempdir().unwrap();
    let sections = SectionSet::Default.resolve(cache.path()).unwrap();
    let args: Vec<OsString> = [
        "worker",
        "--request",
        "/runs/n1/request.json",
        "--result",
        "/runs/n1/result.json",
    ]
    .iter()
    .map(OsString::from)
    .collect();
    let commands = profile_commands(&spec(
        Path::new("/usr/local/cuda/bin/ncu"),
        &sections,
        Path::new("/runs/n1/profile"),
        &args,
    ));
    let folder = sections.folder.display().to_string();
    assert_eq!(
        commands.profile.display_line(),
        format!(
            "/usr/local/cuda/bin/ncu --profile-from-start off --clock-control none \
             --target-processes all --replay-mode kernel --section-folder {folder} \
             --section KforgeDefault --launch-count 200 --force-overwrite --export \
             /runs/n1/profile /opt/kforge/kforge worker --request /runs/n1/request.json \
             --result /runs/n1/result.json"
        )
    );
    assert_eq!(
        commands.import.display_line(),
        "/usr/local/cuda/bin/ncu --import /runs/n1/profile.ncu-rep --csv --page raw --print-units base"
    );
    assert_eq!(commands.report, Path::new("/runs/n1/profile.ncu-rep"));
    assert_eq!(commands.profile_timeout, DEFAULT_PROFILE_TIMEOUT);
    assert_eq!(
        import_command(
            Path::new("ncu"),
            Path::new("r.ncu-rep"),
            Page::Details,
            Duration::from_secs(5)
        )
        .display_line(),
        "ncu --import r.ncu-rep --csv --page details --print-units base"
    );
}

fn output(exit: Exit, stdout: &str, stderr: &str) -> Output {
    Output {
        exit,
        stdout: stdout.to_string(),
        stderr: stderr.to_string(),
        stdout_truncated: false,
        stderr_truncated: false,
        elapsed: Duration::from_millis(10),
    }
}

#[test]
fn failure_texts_are_classified() {
    let timeout = Duration::from_secs(180);
    let classify = |exit, stdout: &str| classify_profile_output(&output(exit, stdout, ""), timeout);
    assert_eq!(
        classify(
            Exit::Code(1),
            "==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU Performance Counters on the target device 0."
        ),
        Some(ProfileUnavailable::CountersNotPermitted)
    );
    assert_eq!(
        classify(
            Exit::Code(1),
            "==ERROR== Failed to initialize the profiler: LibraryNotLoaded"
        ),
        Some(ProfileUnavailable::ProfilerLibraryNotLoaded)
    );
    assert_eq!(
        classify(
            Exit::Code(0),
            "==PROF== Connected to process 876 (/tmp/probe)\nprobe done\n==PROF== Disconnected from process 876\n==WARNING== No kernels were profiled.\n"
        ),
        Some(ProfileUnavailable::NoKernelsProfiled)
    );
    assert_eq!(
        classify(
            Exit::Code(1),
            "==ERROR== The application returned an error code (1).\n"
        ),
        Some(ProfileUnavailable::TargetFailed {
            detail: "it exited with status 1".into()
        })
    );
    assert_eq!(
        classify(
            Exit::TimedOut,
            "==PROF== Profiling \"scale\" - 0 (1/200): 0%....50%"
        ),
        Some(ProfileUnavailable::TimedOut { seconds: 180 })
    );
    assert_eq!(
        classify(Exit::Code(1), "==ERROR== Option '--section NoSuchSection' did not match any section.\n==ERROR== Use --list-sections to see the list of available sections.\n"),
        Some(ProfileUnavailable::NcuFailed {
            exit: "exit code 1".into(),
            detail: "Option '--section NoSuchSection' did not match any section. | Use --list-sections to see the list of available sections.".into(),
        })
    );
    assert_eq!(
        classify(Exit::Signal(9), "some output\nlast words\n"),
        Some(ProfileUnavailable::NcuFailed {
            exit: "killed by signal 9 (SIGKILL)".into(),
            detail: "some output | last words".into()
        })
    );
    assert_eq!(
        classify(Exit::Code(0), "==PROF== Report: /tmp/x.ncu-rep\n"),
        None
    );
    // Every reason reads as a sentence a user can act on.
    let message = ProfileUnavailable::CountersNotPermitted.to_string();
    assert!(
        message.contains("NVreg_RestrictProfilingToAdminUsers=0"),
        "{message}"
    );
}

/// A stand-in ncu: the profile run prints `profile_out` and, when `writes_report`, creates the
/// report ncu would; the import run prints `import_file` (or fails).
fn fake_ncu(
    dir: &Path,
    profile_out: &str,
    profile_status: i32,
    writes_report: bool,
    import: Option<&Path>,
) -> PathBuf {
    let touch = if writes_report {
        r#"for a in "$@"; do if [ "$prev" = "--export" ]; then : > "$a.ncu-rep"; fi; prev=$a; done"#
    } else {
        ""
    };
    let import = match import {
        Some(file) => format!("cat '{}'; exit 0", file.display()),
        None => "echo \"==ERROR== Could not open report file '$2'.\"; exit 1".to_string(),
    };
    let script = format!(
        "#!/bin/sh\nif [ \"$1\" = \"--import\" ]; then {import}; fi\n{touch}\ncat <<'EOF'\n{profile_out}\nEOF\nexit {profile_status}\n"
    );
    let path = dir.join("ncu");
    std::fs::write(&path, script).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/ncu")
        .join(name)
}

const PROFILED: &str = "==PROF== Connected to process 506 (/tmp/probe)\n==PROF== Profiling \"scale\" - 0 (1/200): 0%....50%....100% - 13 passes\nprobe done\n==PROF== Disconnected from process 506";

async fn run_fake(
    profile_out: &str,
    status: i32,
    writes_report: bool,
    import: Option<&Path>,
) -> Result<kforge::ncu::ProfileRun, ProfileUnavailable> {
    let dir = tempfile::tempdir().unwrap();
    let ncu = fake_ncu(dir.path(), profile_out, status, writes_report, import);
    let sections = SectionSet::Fast.resolve(dir.path()).unwrap();
    let stem = dir.path().join("profile");
    let args: Vec<OsString> = Vec::new();
    let mut spec = spec(&ncu, &sections, &stem, &args);
    spec.profile_timeout = Duration::from_secs(20);
    collect(&profile_commands(&spec)).await
}

#[tokio::test]
async fn a_profile_that_works() {
    let run = run_fake(PROFILED, 0, true, Some(&fixture("kforge-default-raw.csv")))
        .await
        .unwrap();
    assert_eq!(run.report.kernels.len(), 4);
    assert_eq!(run.report_path.file_name().unwrap(), "profile.ncu-rep");
    assert!(run.profile_wall > Duration::ZERO);
}

#[tokio::test]
async fn profiles_that_cannot_be_had() {
    let permission = "==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU Performance Counters on the target device 0.";
    assert_eq!(
        run_fake(permission, 1, false, None).await.unwrap_err(),
        ProfileUnavailable::CountersNotPermitted
    );
    let none =
        "==PROF== Connected to process 876 (/tmp/probe)\n==WARNING== No kernels were profiled.";
    assert_eq!(
        run_fake(none, 0, false, None).await.unwrap_err(),
        ProfileUnavailable::NoKernelsProfiled
    );
    // ncu said nothing wrong but wrote no report.
    assert!(matches!(
        run_fake(PROFILED, 0, false, None).await,
        Err(ProfileUnavailable::ReportUnreadable { .. })
    ));
    // The report exists but cannot be exported.
    let err = run_fake(PROFILED, 0, true, None).await.unwrap_err();
    let ProfileUnavailable::ReportUnreadable { detail } = &err else {
        panic!("{err}")
    };
    assert!(detail.contains("Could not open report file"), "{detail}");
    // The export is not a raw-page table.
    assert!(matches!(
        run_fake(PROFILED, 0, true, Some(&fixture("ncu-full-details.csv"))).await,
        Err(ProfileUnavailable::ReportUnreadable { .. })
    ));
}

#[tokio::test]
async fn missing_ncu_and_timeouts() {
    let dir = tempfile::tempdir().unwrap();
    let sections = SectionSet::Fast.resolve(dir.path()).unwrap();
    let stem = dir.path().join("profile");
    let args: Vec<OsString> = Vec::new();
    let missing = dir.path().join("no-such-ncu");
    let err = collect(&profile_commands(&spec(&missing, &sections, &stem, &args)))
        .await
        .unwrap_err();
    assert!(
        matches!(err, ProfileUnavailable::NcuMissing { .. }),
        "{err}"
    );

    let slow = dir.path().join("slow-ncu");
    std::fs::write(&slow, "#!/bin/sh\nsleep 30\n").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&slow, std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut timed = spec(&slow, &sections, &stem, &args);
    timed.profile_timeout = Duration::from_millis(300);
    let started = std::time::Instant::now();
    let err = collect(&profile_commands(&timed)).await.unwrap_err();
    assert_eq!(err, ProfileUnavailable::TimedOut { seconds: 1 });
    assert!(started.elapsed() < Duration::from_secs(10));
}
