//! `kforge import` over our own problems (kernelbench/problems/) at tiny sizes, then every bundle
//! checked from Rust: the input generator reproduces Python's get_inputs() exactly for the
//! recorded seed, another seed changes the values but not the structure, the reference matches
//! Python eager, parameters come in state_dict order, and re-importing is a no-op.
//!
//! The import runs once per test binary (about 10 s of torch time on a CPU) into
//! `$CARGO_TARGET_TMPDIR/problem_bundles`; python3 is found by the normal tool lookup.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use kforge::problem::{InputStructure, ParameterKind, ProblemBundle, ProblemError};
use tch::{Device, Kind, Tensor};

/// Small values for every size constant our problems define (a multi-file import applies each
/// to the files that define it). Keep this covering every constant: a problem left at its H200
/// size would take gigabytes here.
const TINY_SIZES: &[&str] = &[
    "batch_size=4",
    "dim=32",
    "N=16",
    "in_features=16",
    "out_features=8",
    "in_channels=3",
    "out_channels=4",
    "channels=8",
    "height=8",
    "width=8",
    "num_groups=2",
    "num_classes=10",
    "inner=6",
];

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn problem_stems() -> Vec<String> {
    let mut stems: Vec<String> = std::fs::read_dir(repo().join("kernelbench/problems"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "py"))
        .map(|p| p.file_stem().unwrap().to_string_lossy().into_owned())
        .collect();
    stems.sort();
    stems
}

struct Imported {
    out: PathBuf,
    stdout: String,
}

fn import_command(out: &Path) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_kforge"));
    command
        .arg("import")
        .arg(repo().join("kernelbench/problems"))
        .arg("--out")
        .arg(out)
        .args(["--device", "cpu", "--no-baselines"]);
    for size in TINY_SIZES {
        command.args(["--size", size]);
    }
    command
}

fn imported() -> &'static Imported {
    static IMPORTED: OnceLock<Imported> = OnceLock::new();
    IMPORTED.get_or_init(|| {
        let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("problem_bundles");
        let _ = std::fs::remove_dir_all(&out);
        let output = import_command(&out).output().unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
        assert!(
            output.status.success(),
            "kforge import failed ({}):\n{stdout}\n{}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
        Imported { out, stdout }
    })
}

fn bundle(stem: &str) -> ProblemBundle {
    ProblemBundle::load(&imported().out.join(stem)).unwrap()
}

fn bundles() -> Vec<ProblemBundle> {
    problem_stems().iter().map(|s| bundle(s)).collect()
}

fn all(t: &Tensor) -> bool {
    t.all().int64_value(&[]) != 0
}

fn is_float(kind: Kind) -> bool {
    matches!(
        kind,
        Kind::Float | Kind::Double | Kind::Half | Kind::BFloat16
    )
}

/// Whether `t` has the structure the exporter recorded for it.
fn holds(structure: InputStructure, t: &Tensor) -> bool {
    match structure {
        InputStructure::Boolean => t.kind() == Kind::Bool,
        InputStructure::Integer => !is_float(t.kind()) && t.kind() != Kind::Bool,
        InputStructure::PlusMinusOne => all(&t.abs().eq(1.0)),
        InputStructure::UpperTriangular => all(&t.tril(-1).eq(0.0)),
        InputStructure::LowerTriangular => all(&t.triu(1).eq(0.0)),
        InputStructure::Diagonal => all(&t.tril(-1).eq(0.0)) && all(&t.triu(1).eq(0.0)),
        InputStructure::Symmetric => t.equal(&t.transpose(-2, -1)),
        InputStructure::NonNegative => all(&t.ge(0.0)),
        InputStructure::Constant => all(&t.eq_tensor(&t.flatten(0, -1).get(0))),
        InputStructure::Other => panic!("the exporter wrote a structure this kforge does not know"),
    }
}

#[test]
fn every_problem_becomes_a_bundle() {
    let imported = imported();
    let stems = problem_stems();
    assert!(stems.len() >= 12, "{stems:?}");
    for stem in &stems {
        assert!(
            imported
                .stdout
                .lines()
                .any(|l| l.starts_with("imported") && l.split_whitespace().nth(1) == Some(stem)),
            "no `imported {stem}` line in:\n{}",
            imported.stdout
        );
        let bundle = bundle(stem);
        let spec = &bundle.spec;
        assert_eq!(spec.name, *stem);
        assert_eq!(bundle.device(), Device::Cpu);
        assert!(spec.self_check.passed, "{stem}");
        assert_eq!(spec.self_check.seeds_checked.len(), 3, "{stem}");
        assert!(
            !spec.inputs.is_empty() && !spec.outputs.is_empty(),
            "{stem}"
        );
        assert!(!spec.size_overrides.is_empty(), "{stem} ran at full size");
        assert!(
            spec.min_bytes > 0 && spec.min_bytes < 1 << 20,
            "{stem}: {}",
            spec.min_bytes
        );
        assert!(spec.source.contains("class Model"), "{stem}");
        assert!(
            spec.expected.is_some(),
            "{stem}: tiny problems record their outputs"
        );
    }
    assert!(
        imported.stdout.contains(&format!(
            "{} problems: {} imported",
            stems.len(),
            stems.len()
        )),
        "{}",
        imported.stdout
    );
}

#[test]
fn generated_inputs_and_the_reference_reproduce_python() {
    for bundle in bundles() {
        let name = &bundle.spec.name;
        let generator = bundle.input_generator(Device::Cpu).unwrap();
        let reference = bundle.reference(Device::Cpu).unwrap();
        let recorded = bundle.recorded_run(Device::Cpu).unwrap().unwrap();
        let inputs = generator.generate(recorded.seed).unwrap();
        assert_eq!(inputs.len(), recorded.inputs.len(), "{name}");
        for (i, (ours, python)) in inputs.iter().zip(&recorded.inputs).enumerate() {
            assert!(
                ours.equal(python),
                "{name}: input {i} differs from Python's get_inputs()"
            );
        }
        let again = generator.generate(recorded.seed).unwrap();
        for (a, b) in inputs.iter().zip(&again) {
            assert!(a.equal(b), "{name}: the same seed gave different inputs");
        }
        let outputs = reference.run(&inputs).unwrap();
        assert_eq!(outputs.len(), recorded.outputs.len(), "{name}");
        for (i, (ours, python)) in outputs.iter().zip(&recorded.outputs).enumerate() {
            assert!(
                ours.allclose(python, 1e-5, 1e-6, false),
                "{name}: output {i} differs from Python eager"
            );
        }
    }
}

#[test]
fn another_seed_changes_values_but_not_structure() {
    let mut structures_seen = Vec::new();
    for bundle in bundles() {
        let name = &bundle.spec.name;
        let generator = bundle.input_generator(Device::Cpu).unwrap();
        let (a, b) = (
            generator.generate(11).unwrap(),
            generator.generate(12).unwrap(),
        );
        for ((x, y), spec) in a.iter().zip(&b).zip(&bundle.spec.inputs) {
            assert_eq!(x.size(), spec.shape, "{name}.{}", spec.name);
            assert_eq!(x.size(), y.size(), "{name}.{}", spec.name);
            assert_eq!(x.kind(), y.kind(), "{name}.{}", spec.name);
            if is_float(x.kind()) && spec.structure != Some(InputStructure::Constant) {
                assert!(
                    !x.equal(y),
                    "{name}.{}: seeds 11 and 12 gave the same values",
                    spec.name
                );
            }
            if let Some(structure) = spec.structure {
                structures_seen.push(structure);
                assert!(
                    holds(structure, x),
                    "{name}.{} lost {structure:?}",
                    spec.name
                );
                assert!(
                    holds(structure, y),
                    "{name}.{} lost {structure:?}",
                    spec.name
                );
            }
        }
    }
    for wanted in [
        InputStructure::UpperTriangular,
        InputStructure::Symmetric,
        InputStructure::Boolean,
        InputStructure::Integer,
        InputStructure::PlusMinusOne,
    ] {
        assert!(
            structures_seen.contains(&wanted),
            "no problem has {wanted:?} inputs"
        );
    }
}

#[test]
fn class_indices_stay_in_range() {
    let bundle = bundle("cross_entropy_loss");
    let classes = bundle.spec.module_constants["num_classes"]
        .as_i64()
        .unwrap();
    assert_eq!(classes, 10);
    let generator = bundle.input_generator(Device::Cpu).unwrap();
    for seed in [5, 6, 7] {
        let targets = &generator.generate(seed).unwrap()[1];
        assert_eq!(targets.kind(), Kind::Int64);
        assert!(targets.min().int64_value(&[]) >= 0);
        assert!(targets.max().int64_value(&[]) < classes);
    }
}

#[test]
fn parameters_come_in_state_dict_order_and_are_the_weights_used() {
    let gemm = bundle("gemm_bias_relu");
    let names: Vec<&str> = gemm
        .spec
        .parameters
        .iter()
        .map(|p| p.name.as_str())
        .collect();
    assert_eq!(names, ["linear.weight", "linear.bias"]);
    let reference = gemm.reference(Device::Cpu).unwrap();
    let parameters = reference.parameters();
    assert_eq!(parameters[0].size(), [8, 16]);
    assert_eq!(parameters[1].size(), [8]);
    let x = &gemm
        .input_generator(Device::Cpu)
        .unwrap()
        .generate(3)
        .unwrap()[0];
    let by_hand = x.matmul(&parameters[0].tr()).g_add(&parameters[1]).relu();
    let traced = &reference.run(std::slice::from_ref(x)).unwrap()[0];
    assert!(traced.allclose(&by_hand, 1e-5, 1e-6, false));

    let loss = bundle("cross_entropy_loss");
    let weight = &loss.spec.parameters[0];
    assert_eq!(
        (weight.name.as_str(), weight.kind, weight.persistent),
        ("class_weight", ParameterKind::Buffer, Some(true))
    );
    let weights = loss.reference(Device::Cpu).unwrap().parameters();
    assert_eq!(weights[0].size(), [10]);
    assert!(all(&weights[0].ge(0.5)), "the buffer is rand + 0.5");

    let softmax = bundle("softmax_rows");
    assert!(softmax.spec.parameters.is_empty());
    assert!(
        softmax
            .reference(Device::Cpu)
            .unwrap()
            .parameters()
            .is_empty()
    );
}

#[test]
fn a_float_forward_argument_is_baked_into_the_reference() {
    let bundle = bundle("scaled_residual_add");
    let constants = &bundle.spec.constants;
    assert_eq!(constants.len(), 1);
    assert_eq!(
        (constants[0].position, constants[0].name.as_str()),
        (2, "alpha")
    );
    assert_eq!(constants[0].value, serde_json::json!(0.25));
    assert_eq!(bundle.spec.inputs.len(), 2);
    let inputs = bundle
        .input_generator(Device::Cpu)
        .unwrap()
        .generate(9)
        .unwrap();
    let out = &bundle.reference(Device::Cpu).unwrap().run(&inputs).unwrap()[0];
    let by_hand = &inputs[0] + &inputs[1] * 0.25;
    assert!(out.allclose(&by_hand, 1e-6, 1e-7, false));
}

#[test]
fn two_outputs_and_a_stochastic_model() {
    let two = bundle("softmax_logsumexp");
    assert_eq!(two.spec.outputs.len(), 2);
    assert_eq!(two.spec.outputs[1].shape, [4]);
    let inputs = two
        .input_generator(Device::Cpu)
        .unwrap()
        .generate(4)
        .unwrap();
    let outputs = two.reference(Device::Cpu).unwrap().run(&inputs).unwrap();
    let lse = inputs[0].logsumexp([-1], false);
    assert!(outputs[1].allclose(&lse, 1e-5, 1e-6, false));

    let dropout = bundle("linear_dropout_tanh");
    assert!(dropout.spec.stochastic && dropout.spec.eval_mode);
    assert!(
        dropout.spec.notes.iter().any(|n| n.contains("eval mode")),
        "{:?}",
        dropout.spec.notes
    );
    let reference = dropout.reference(Device::Cpu).unwrap();
    let inputs = dropout
        .input_generator(Device::Cpu)
        .unwrap()
        .generate(4)
        .unwrap();
    let (first, second) = (
        reference.run(&inputs).unwrap(),
        reference.run(&inputs).unwrap(),
    );
    assert!(
        first[0].equal(&second[0]),
        "eval mode must be deterministic"
    );

    let deterministic = bundle("square_gemm");
    assert!(!deterministic.spec.stochastic && !deterministic.spec.eval_mode);
}

#[test]
fn reimporting_unchanged_problems_is_a_noop() {
    let imported = imported();
    let spec_file = imported.out.join("softmax_rows/problem.json");
    let before = std::fs::metadata(&spec_file).unwrap().modified().unwrap();
    let output = import_command(&imported.out).output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{stdout}");
    let stems = problem_stems();
    assert!(
        stdout.contains(&format!(
            "{} problems: 0 imported, {} unchanged",
            stems.len(),
            stems.len()
        )),
        "{stdout}"
    );
    assert_eq!(
        std::fs::metadata(&spec_file).unwrap().modified().unwrap(),
        before
    );
}

/// A copy of one bundle to break.
fn copy_bundle(stem: &str, into: &Path) -> PathBuf {
    let from = imported().out.join(stem);
    let to = into.join(stem);
    std::fs::create_dir_all(&to).unwrap();
    for entry in std::fs::read_dir(&from).unwrap() {
        let path = entry.unwrap().path();
        if path.is_file() {
            std::fs::copy(&path, to.join(path.file_name().unwrap())).unwrap();
        }
    }
    to
}

#[test]
fn broken_bundles_say_what_to_do() {
    let dir = tempfile::tempdir().unwrap();

    let old = copy_bundle("softmax_rows", &dir.path().join("old"));
    let text = std::fs::read_to_string(old.join("problem.json")).unwrap();
    std::fs::write(
        old.join("problem.json"),
        text.replacen("\"format_version\": 1", "\"format_version\": 0", 1),
    )
    .unwrap();
    let err = ProblemBundle::load(&old).unwrap_err();
    assert!(matches!(err, ProblemError::FormatVersion { .. }), "{err}");
    assert!(err.to_string().contains("format version 0"), "{err}");
    assert!(
        err.to_string().contains("re-import it with `kforge import"),
        "{err}"
    );

    let missing = copy_bundle("softmax_rows", &dir.path().join("missing"));
    std::fs::remove_file(missing.join("reference.pt")).unwrap();
    let err = ProblemBundle::load(&missing).unwrap_err();
    assert!(err.to_string().contains("has no reference.pt"), "{err}");

    let garbled = copy_bundle("softmax_rows", &dir.path().join("garbled"));
    std::fs::write(garbled.join("problem.json"), "{\"format_version\": 1, ").unwrap();
    let err = ProblemBundle::load(&garbled).unwrap_err();
    assert!(matches!(err, ProblemError::BadJson { .. }), "{err}");

    let good = bundle("softmax_rows");
    let Err(err) = good.input_generator(Device::Cuda(0)) else {
        panic!("a CPU bundle must not load on a GPU");
    };
    assert!(err.to_string().contains("traced on cpu"), "{err}");
    let reference = good.reference(Device::Cpu).unwrap();
    let err = reference
        .run(&[Tensor::zeros([3, 3], (Kind::Float, Device::Cpu))])
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("input x: shape [3, 3], expected [4, 32]"),
        "{err}"
    );
}

#[test]
fn bundles_resolve_by_path_or_by_name_under_home() {
    let home = tempfile::tempdir().unwrap();
    copy_bundle("hinge_loss", &home.path().join("bundles"));
    let settings = kforge::config::Settings {
        home: home.path().to_path_buf(),
        ..Default::default()
    };
    let by_name = ProblemBundle::resolve("hinge_loss", &settings).unwrap();
    assert_eq!(by_name.spec.name, "hinge_loss");
    let path = imported().out.join("hinge_loss");
    let by_path = ProblemBundle::resolve(path.to_str().unwrap(), &settings).unwrap();
    assert_eq!(by_path.dir, path);
    let err = ProblemBundle::resolve("no_such_problem", &settings).unwrap_err();
    assert!(err.to_string().contains("kforge import"), "{err}");
}
