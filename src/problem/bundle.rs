//! Loading a bundle and running its reference. A bundle runs only on the kind of device it was
//! traced on (tracing records factory devices as constants), and the reference always runs under
//! no_grad with TorchScript's graph optimisations off, the setting DESIGN.md §4 measured to time
//! like eager.

use std::path::{Path, PathBuf};

use tch::{CModule, Device, IValue, Tensor};

use super::inputs::InputGenerator;
use super::spec::{Baseline, BundleDevice, OutputSpec, ProblemSpec, TensorSpec, dtype_kind};
use super::{FORMAT_VERSION, ProblemError, default_bundle_root, gpu_slug};
use crate::config::Settings;
use crate::paths;

pub const PROBLEM_FILE: &str = "problem.json";
pub const REFERENCE_FILE: &str = "reference.pt";
pub const INPUTS_FILE: &str = "inputs.pt";
pub const EXPECTED_FILE: &str = "expected.pt";
pub const BASELINES_DIR: &str = "baselines";

/// A loaded bundle: its folder and its `problem.json`.
#[derive(Debug, Clone)]
pub struct ProblemBundle {
    pub dir: PathBuf,
    pub spec: ProblemSpec,
}

/// The reference model on one device.
pub struct Reference {
    module: CModule,
    parameters: Vec<Tensor>,
    inputs: Vec<TensorSpec>,
    outputs: Vec<OutputSpec>,
    device: Device,
    dir: PathBuf,
}

/// What Python eager gave for the self-check seed (`expected.pt`): the inputs `get_inputs()`
/// drew and the outputs the model returned on them.
pub struct RecordedRun {
    pub seed: i64,
    pub inputs: Vec<Tensor>,
    pub outputs: Vec<Tensor>,
}

impl ProblemBundle {
    /// Loads `dir/problem.json` and checks the TorchScript files are there.
    pub fn load(dir: &Path) -> Result<Self, ProblemError> {
        let shown = paths::display(dir);
        let path = dir.join(PROBLEM_FILE);
        if !path.is_file() {
            return Err(ProblemError::MissingFile {
                dir: shown,
                file: PROBLEM_FILE,
            });
        }
        let text = std::fs::read_to_string(&path).map_err(|source| ProblemError::Io {
            path: paths::display(&path),
            source,
        })?;
        let bad_json = |message: String| ProblemError::BadJson {
            path: paths::display(&path),
            message,
        };
        // The version first: an older or newer layout should say so, not fail on a field.
        let value: serde_json::Value =
            serde_json::from_str(&text).map_err(|e| bad_json(e.to_string()))?;
        match value
            .get("format_version")
            .and_then(serde_json::Value::as_u64)
        {
            Some(v) if v == u64::from(FORMAT_VERSION) => {}
            other => {
                return Err(ProblemError::FormatVersion {
                    dir: shown,
                    found: other.map_or_else(|| "(none)".to_string(), |v| v.to_string()),
                    expected: FORMAT_VERSION,
                });
            }
        }
        let spec: ProblemSpec =
            serde_json::from_value(value).map_err(|e| bad_json(e.to_string()))?;
        let mut needed = vec![REFERENCE_FILE, INPUTS_FILE];
        if spec.expected.is_some() {
            needed.push(EXPECTED_FILE);
        }
        for file in needed {
            if !dir.join(file).is_file() {
                return Err(ProblemError::MissingFile { dir: shown, file });
            }
        }
        Ok(ProblemBundle {
            dir: dir.to_path_buf(),
            spec,
        })
    }

    /// A path to a bundle folder, or a bundle name under `<home>/bundles` (`softmax_rows`,
    /// `level1/19_ReLU`).
    pub fn resolve(name_or_path: &str, settings: &Settings) -> Result<Self, ProblemError> {
        let as_path = PathBuf::from(name_or_path);
        if as_path.join(PROBLEM_FILE).is_file() {
            return Self::load(&as_path);
        }
        let under_home = default_bundle_root(settings).join(name_or_path);
        if under_home.join(PROBLEM_FILE).is_file() {
            return Self::load(&under_home);
        }
        Err(ProblemError::NotFound {
            name: name_or_path.to_string(),
            tried: vec![paths::display(&as_path), paths::display(&under_home)],
        })
    }

    /// The device the bundle was traced on: `Cuda(0)` or `Cpu`.
    pub fn device(&self) -> Device {
        match self.spec.device {
            BundleDevice::Cuda => Device::Cuda(0),
            BundleDevice::Cpu => Device::Cpu,
        }
    }

    /// The input generator, loaded on `device` (which must be the bundle's device).
    pub fn input_generator(&self, device: Device) -> Result<InputGenerator, ProblemError> {
        self.check_device(device)?;
        let module = self.load_module(INPUTS_FILE)?;
        Ok(InputGenerator::new(
            module,
            self.spec.inputs.clone(),
            device,
            self.dir.clone(),
        ))
    }

    /// The reference with its weights, loaded on `device` (which must be the bundle's device).
    pub fn reference(&self, device: Device) -> Result<Reference, ProblemError> {
        self.check_device(device)?;
        let module = self.load_module(REFERENCE_FILE)?;
        let dummy = Tensor::zeros([1], (tch::Kind::Float, device));
        let state = tch::no_grad(|| module.method_is("state", &[IValue::Tensor(dummy)]))
            .map_err(|e| ProblemError::torch(&self.dir, "reading the reference's parameters", e))?;
        let parameters: Vec<Tensor> = tensors_of(state, &self.dir, "state()")?
            .into_iter()
            .map(|t| t.detach())
            .collect();
        if parameters.len() != self.spec.parameters.len() {
            return Err(ProblemError::mismatch(
                &self.dir,
                format!(
                    "reference.pt holds {} parameters and buffers but problem.json lists {}",
                    parameters.len(),
                    self.spec.parameters.len()
                ),
            ));
        }
        for (tensor, spec) in parameters.iter().zip(&self.spec.parameters) {
            check_tensor(tensor, &spec.shape, &spec.dtype).map_err(|why| {
                ProblemError::mismatch(&self.dir, format!("parameter {}: {why}", spec.name))
            })?;
        }
        Ok(Reference {
            module,
            parameters,
            inputs: self.spec.inputs.clone(),
            outputs: self.spec.outputs.clone(),
            device,
            dir: self.dir.clone(),
        })
    }

    /// Python's own inputs and eager outputs for the self-check seed, when the bundle recorded
    /// them (problems whose check data fit in 64 MiB).
    pub fn recorded_run(&self, device: Device) -> Result<Option<RecordedRun>, ProblemError> {
        let Some(expected) = &self.spec.expected else {
            return Ok(None);
        };
        self.check_device(device)?;
        let module = self.load_module(EXPECTED_FILE)?;
        let dummy = Tensor::zeros([1], (tch::Kind::Float, device));
        let value = tch::no_grad(|| module.forward_is(&[IValue::Tensor(dummy)]))
            .map_err(|e| ProblemError::torch(&self.dir, "reading expected.pt", e))?;
        let mut tensors = tensors_of(value, &self.dir, "expected.pt")?;
        if tensors.len() != expected.inputs + expected.outputs {
            return Err(ProblemError::mismatch(
                &self.dir,
                format!(
                    "expected.pt holds {} tensors, problem.json says {} inputs + {} outputs",
                    tensors.len(),
                    expected.inputs,
                    expected.outputs
                ),
            ));
        }
        let outputs = tensors.split_off(expected.inputs);
        Ok(Some(RecordedRun {
            seed: expected.seed,
            inputs: tensors,
            outputs,
        }))
    }

    /// `baselines/<gpu-slug>.json` for this GPU, when it was measured for this bundle's content.
    pub fn baseline(&self, gpu_name: &str) -> Option<Baseline> {
        let path = self.baseline_path(gpu_name);
        let text = std::fs::read_to_string(&path).ok()?;
        let baseline: Baseline = match serde_json::from_str(&text) {
            Ok(b) => b,
            Err(e) => {
                tracing::warn!("ignoring {}: {e}", paths::display(&path));
                return None;
            }
        };
        if baseline.content_hash != self.spec.content_hash {
            tracing::warn!(
                "ignoring {}: measured for other content of this problem (re-import with \
                 --rebaseline)",
                paths::display(&path)
            );
            return None;
        }
        Some(baseline)
    }

    pub fn baseline_path(&self, gpu_name: &str) -> PathBuf {
        self.dir
            .join(BASELINES_DIR)
            .join(format!("{}.json", gpu_slug(gpu_name)))
    }

    fn check_device(&self, requested: Device) -> Result<(), ProblemError> {
        let (fits, hint) = match (self.spec.device, requested) {
            (BundleDevice::Cpu, Device::Cpu) => (true, ""),
            (BundleDevice::Cuda, Device::Cuda(0)) => (true, ""),
            (BundleDevice::Cuda, Device::Cuda(_)) => (
                false,
                "traced bundles name cuda:0; pick the GPU with CUDA_VISIBLE_DEVICES instead",
            ),
            (BundleDevice::Cuda, _) => (
                false,
                "re-import with `kforge import --device cpu` for a CPU bundle",
            ),
            (BundleDevice::Cpu, _) => (
                false,
                "re-import on the GPU host (or with `--device cuda`) for a GPU bundle",
            ),
        };
        if fits {
            return Ok(());
        }
        Err(ProblemError::DeviceMismatch {
            dir: paths::display(&self.dir),
            bundle: self.spec.device.as_str().to_string(),
            requested: format!("{requested:?}"),
            hint,
        })
    }

    fn load_module(&self, file: &str) -> Result<CModule, ProblemError> {
        let path = self.dir.join(file);
        // No device remap (the device was checked above): loading onto a device would also move
        // the trace's scalar constants (Python floats, kept on the CPU) to the GPU, where binary
        // ops lose their scalar-argument fast path and the reference slows down (seen on the
        // H200: 1.3× eager for `x + alpha * residual`).
        CModule::load(&path)
            .map_err(|e| ProblemError::torch(&self.dir, format!("loading {file}"), e))
    }
}

impl Reference {
    /// Runs the reference on the input tensors (in problem.json order, on this device) and
    /// returns its outputs, checked against problem.json's output specs.
    pub fn run(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>, ProblemError> {
        if inputs.len() != self.inputs.len() {
            return Err(ProblemError::mismatch(
                &self.dir,
                format!(
                    "the reference takes {} inputs, got {}",
                    self.inputs.len(),
                    inputs.len()
                ),
            ));
        }
        for (tensor, spec) in inputs.iter().zip(&self.inputs) {
            check_tensor(tensor, &spec.shape, &spec.dtype).map_err(|why| {
                ProblemError::mismatch(&self.dir, format!("input {}: {why}", spec.name))
            })?;
            if tensor.device() != self.device {
                return Err(ProblemError::mismatch(
                    &self.dir,
                    format!(
                        "input {} is on {:?}, the reference on {:?}",
                        spec.name,
                        tensor.device(),
                        self.device
                    ),
                ));
            }
        }
        let args: Vec<IValue> = inputs
            .iter()
            .map(|t| IValue::Tensor(t.shallow_clone()))
            .collect();
        let value = run_unoptimized(|| self.module.forward_is(&args))
            .map_err(|e| ProblemError::torch(&self.dir, "running the reference", e))?;
        let outputs = tensors_of(value, &self.dir, "the reference")?;
        if outputs.len() != self.outputs.len() {
            return Err(ProblemError::mismatch(
                &self.dir,
                format!(
                    "the reference returned {} outputs, problem.json lists {}",
                    outputs.len(),
                    self.outputs.len()
                ),
            ));
        }
        for (i, (tensor, spec)) in outputs.iter().zip(&self.outputs).enumerate() {
            check_tensor(tensor, &spec.shape, &spec.dtype)
                .map_err(|why| ProblemError::mismatch(&self.dir, format!("output {i}: {why}")))?;
        }
        Ok(outputs)
    }

    /// The parameters and buffers in state_dict order (problem.json's `parameters`), sharing
    /// storage with the reference's own weights: treat them as read-only.
    pub fn parameters(&self) -> Vec<Tensor> {
        self.parameters.iter().map(Tensor::shallow_clone).collect()
    }

    pub fn device(&self) -> Device {
        self.device
    }
}

/// Runs TorchScript with graph optimisations off (the setting is per thread, so it is set on
/// every call) and without autograd.
pub(crate) fn run_unoptimized<T>(
    call: impl FnOnce() -> Result<T, tch::TchError>,
) -> Result<T, tch::TchError> {
    tch::jit::f_set_graph_executor_optimize(false)?;
    tch::no_grad(call)
}

/// The tensors of a tuple (or a single tensor) a TorchScript method returned.
pub(crate) fn tensors_of(
    value: IValue,
    dir: &Path,
    what: &str,
) -> Result<Vec<Tensor>, ProblemError> {
    match value {
        IValue::Tensor(t) => Ok(vec![t]),
        IValue::Tuple(items) | IValue::GenericList(items) => items
            .into_iter()
            .enumerate()
            .map(|(i, item)| match item {
                IValue::Tensor(t) => Ok(t),
                other => Err(ProblemError::mismatch(
                    dir,
                    format!("{what} returned a non-tensor at position {i}: {other:?}"),
                )),
            })
            .collect(),
        IValue::TensorList(items) => Ok(items),
        other => Err(ProblemError::mismatch(
            dir,
            format!("{what} returned {other:?}, not a tuple of tensors"),
        )),
    }
}

/// Why `tensor` does not match a spec's shape and dtype, if it does not.
pub(crate) fn check_tensor(tensor: &Tensor, shape: &[i64], dtype: &str) -> Result<(), String> {
    let actual_shape = tensor.size();
    if actual_shape != shape {
        return Err(format!("shape {actual_shape:?}, expected {shape:?}"));
    }
    match dtype_kind(dtype) {
        Some(kind) if kind == tensor.kind() => Ok(()),
        Some(_) => Err(format!("dtype {:?}, expected {dtype}", tensor.kind())),
        None => Err(format!("dtype {dtype} is not one kforge runs")),
    }
}
