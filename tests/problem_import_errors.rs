//! `kforge import` on problems that cannot be exported (tests/fixtures/problems/): each is
//! skipped with a one-line reason naming the file, the batch goes on, and the exit code is
//! non-zero only when nothing could be imported.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn fixture(name: &str) -> PathBuf {
    repo().join("tests/fixtures/problems").join(name)
}

fn kforge_import(args: &[&Path], extra: &[&str], out: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kforge"))
        .arg("import")
        .args(args)
        .arg("--out")
        .arg(out)
        .args(["--device", "cpu", "--no-baselines"])
        .args(extra)
        .output()
        .unwrap()
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// The `skipped` line for `file`'s stem, if any.
fn skip_line<'a>(stdout: &'a str, stem: &str) -> Option<&'a str> {
    stdout
        .lines()
        .find(|l| l.starts_with("skipped") && l.contains(&format!("{stem}.py: ")))
}

#[test]
fn broken_problems_are_skipped_and_the_batch_goes_on() {
    let out = tempfile::tempdir().unwrap();
    let good = repo().join("kernelbench/problems/softmax_rows.py");
    let output = kforge_import(
        &[&repo().join("tests/fixtures/problems"), &good],
        &["--size", "batch_size=4", "--size", "dim=8"],
        out.path(),
    );
    let text = stdout(&output);
    let expected = [
        (
            "branches_on_values",
            "forward branches on tensor values (line 8)",
        ),
        // The segfault kills the interpreter; a fresh one takes the rest of the batch.
        (
            "crashes_interpreter",
            "the exporter died on it (killed by signal 11 (SIGSEGV))",
        ),
        ("dict_inputs", "get_inputs() item 1 is a dict"),
        (
            "downloads_weights",
            "downloads pretrained weights (`from_pretrained`, line 10)",
        ),
        ("no_model", "defines no `class Model(nn.Module)`"),
        ("numpy_inputs", "not reproducible from torch.manual_seed"),
        (
            "reads_item",
            "forward depends on input values in a way tracing cannot capture",
        ),
        ("syntax_error", "syntax error at line 7: invalid syntax"),
    ];
    for (stem, reason) in expected {
        let line = skip_line(&text, stem).unwrap_or_else(|| panic!("no skip for {stem}:\n{text}"));
        assert!(line.contains(reason), "{stem}: {line}");
        assert_eq!(line.lines().count(), 1);
    }
    assert!(
        text.lines()
            .any(|l| l.starts_with("imported") && l.contains("softmax_rows")),
        "{text}"
    );
    assert!(
        text.contains("9 problems: 1 imported, 0 unchanged, 8 skipped"),
        "{text}"
    );
    assert!(
        output.status.success(),
        "one problem imported: exit 0\n{text}"
    );
    let made: Vec<_> = std::fs::read_dir(out.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        made,
        ["softmax_rows"],
        "skipped problems leave nothing behind"
    );
}

#[test]
fn nothing_importable_exits_1_and_a_hang_is_stopped() {
    let out = tempfile::tempdir().unwrap();
    let output = kforge_import(
        &[&fixture("syntax_error.py"), &fixture("slow/sleeps.py")],
        &["--timeout", "2"],
        out.path(),
    );
    let text = stdout(&output);
    assert_eq!(output.status.code(), Some(1), "{text}");
    assert!(skip_line(&text, "syntax_error").is_some(), "{text}");
    let line = skip_line(&text, "sleeps").unwrap_or_else(|| panic!("{text}"));
    assert!(line.contains("timed out after 2 s"), "{line}");
    assert!(
        text.contains("2 problems: 0 imported, 0 unchanged, 2 skipped"),
        "{text}"
    );
}

#[test]
fn a_size_one_file_does_not_have_is_named_with_the_ones_it_has() {
    let out = tempfile::tempdir().unwrap();
    let output = kforge_import(
        &[&repo().join("kernelbench/problems/softmax_rows.py")],
        &["--size", "batchsize=4"],
        out.path(),
    );
    let text = stdout(&output);
    assert_eq!(output.status.code(), Some(1), "{text}");
    let line = skip_line(&text, "softmax_rows").unwrap_or_else(|| panic!("{text}"));
    assert!(
        line.contains(
            "--size batchsize: not a module-level constant of this file (it has: batch_size, dim)"
        ),
        "{line}"
    );
}

#[test]
fn bad_usage_exits_2_before_python_starts() {
    let out = tempfile::tempdir().unwrap();
    let softmax = repo().join("kernelbench/problems/softmax_rows.py");
    let output = kforge_import(&[&softmax], &["--size", "dim=abc"], out.path());
    assert_eq!(output.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&output.stderr).contains("expected NAME=NUMBER"),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let output = kforge_import(&[&fixture("no_such_problem.py")], &[], out.path());
    assert_eq!(output.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&output.stderr).contains("no_such_problem.py: no such file"),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
}
