//! The bundle's JSON files as Rust types: `problem.json` ([`ProblemSpec`]) and
//! `baselines/<gpu>.json` ([`Baseline`]), exactly as `kernelbench/export.py` writes them.
//! Unknown fields are ignored so a newer exporter of the same format version still loads.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use tch::Kind;

/// `problem.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProblemSpec {
    pub format_version: u32,
    /// The file stem, or `level<N>/<stem>` for a KernelBench checkout.
    pub name: String,
    pub level: Option<u32>,
    /// The problem file's name (no folder: bundles never record machine paths).
    pub source_file: String,
    /// The problem's Python source as imported (before size overrides).
    pub source: String,
    pub source_sha256: String,
    /// `--size` overrides applied to module-level constants.
    pub size_overrides: BTreeMap<String, serde_json::Value>,
    /// Every numeric module-level constant after the overrides (the problem's sizes).
    #[serde(default)]
    pub module_constants: BTreeMap<String, serde_json::Value>,
    /// Where the bundle was traced; tracing pins factories and constants to that device.
    pub device: BundleDevice,
    /// The forward tensor arguments, in order.
    pub inputs: Vec<TensorSpec>,
    /// Non-tensor forward arguments, baked into the reference.
    pub constants: Vec<ConstantSpec>,
    /// Parameters and buffers in `state_dict` order (non-persistent buffers in the place they
    /// would take), as the candidate receives them after the inputs.
    pub parameters: Vec<ParameterSpec>,
    pub outputs: Vec<OutputSpec>,
    pub init_inputs: serde_json::Value,
    pub init_seed: i64,
    /// FLOPs per call by PyTorch's FlopCounterMode (0 when it counts none; see `notes`).
    pub flops: u64,
    /// The same FLOPs per aten op (`aten.convolution.default`, `aten.mm.default`, ...): the
    /// compute floor gives TF32-eligible ops the TF32 rate.
    #[serde(default)]
    pub flops_by_op: BTreeMap<String, u64>,
    /// Every input, parameter and buffer read once plus every output written once.
    pub min_bytes: u64,
    /// Outputs differ run to run on the same inputs in training mode (dropout).
    pub stochastic: bool,
    /// The exporter switched the model to eval mode because it was stochastic.
    pub eval_mode: bool,
    pub notes: Vec<String>,
    pub self_check: SelfCheck,
    /// `expected.pt`, when the check seed's inputs and outputs were small enough to record.
    pub expected: Option<ExpectedRecord>,
    pub exported_with: ExportedWith,
    /// Hash of source, overrides, device, level, name, format and exporter: an unchanged
    /// problem re-imports as a no-op.
    pub content_hash: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BundleDevice {
    Cuda,
    Cpu,
}

impl BundleDevice {
    pub fn as_str(self) -> &'static str {
        match self {
            BundleDevice::Cuda => "cuda",
            BundleDevice::Cpu => "cpu",
        }
    }
}

/// One forward tensor argument.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TensorSpec {
    pub name: String,
    /// Position among all forward arguments (constants included).
    pub position: usize,
    pub shape: Vec<i64>,
    /// A torch dtype name: `float32`, `float16`, `bfloat16`, `int64`, `bool`, ...
    pub dtype: String,
    /// What the values always satisfy (seen on several seeds), where anything.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub structure: Option<InputStructure>,
    /// Smallest and largest value seen over the sampled seeds (not a guarantee).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_range: Option<[f64; 2]>,
}

/// Structure an input always has, which a candidate may rely on (DESIGN.md §3.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum InputStructure {
    Boolean,
    Integer,
    Constant,
    PlusMinusOne,
    Diagonal,
    UpperTriangular,
    LowerTriangular,
    Symmetric,
    NonNegative,
    /// A structure this kforge does not know (written by a newer exporter).
    #[serde(other)]
    Other,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ConstantSpec {
    pub position: usize,
    pub name: String,
    pub value: serde_json::Value,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ParameterSpec {
    /// The `state_dict` key, e.g. `linear.weight`.
    pub name: String,
    pub shape: Vec<i64>,
    pub dtype: String,
    pub kind: ParameterKind,
    /// Buffers only: whether `state_dict` includes it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub persistent: Option<bool>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ParameterKind {
    Parameter,
    Buffer,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OutputSpec {
    pub shape: Vec<i64>,
    pub dtype: String,
}

/// The exported reference on generated inputs against Python eager on `get_inputs()`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SelfCheck {
    pub seed: i64,
    pub passed: bool,
    pub max_abs_diff: Option<f64>,
    /// Every seed on which trace and eager agreed (the first is `seed`).
    #[serde(default)]
    pub seeds_checked: Vec<i64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExpectedRecord {
    pub seed: i64,
    pub file: String,
    pub inputs: usize,
    pub outputs: usize,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExportedWith {
    pub torch: String,
    pub python: String,
}

/// The tch kind of a torch dtype name, `None` for names kforge does not run.
pub fn dtype_kind(dtype: &str) -> Option<Kind> {
    Some(match dtype {
        "float32" => Kind::Float,
        "float64" => Kind::Double,
        "float16" => Kind::Half,
        "bfloat16" => Kind::BFloat16,
        "int64" => Kind::Int64,
        "int32" => Kind::Int,
        "int16" => Kind::Int16,
        "int8" => Kind::Int8,
        "uint8" => Kind::Uint8,
        "bool" => Kind::Bool,
        "complex64" => Kind::ComplexFloat,
        "complex128" => Kind::ComplexDouble,
        _ => return None,
    })
}

/// `baselines/<gpu-slug>.json`: times measured at import on one GPU (DESIGN.md §4 protocol).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Baseline {
    pub format_version: u32,
    /// The GPU's name as the driver reports it, e.g. `NVIDIA H200`.
    pub gpu: String,
    pub gpu_slug: String,
    /// When it was measured (UTC, RFC 3339).
    pub date: String,
    /// The bundle content these times belong to.
    pub content_hash: String,
    pub torch: String,
    pub protocol: BaselineProtocol,
    /// Median of PyTorch eager.
    pub eager_ms: f64,
    /// Median of `torch.compile` (None when compiling failed: see `compile_error`).
    pub compile_ms: Option<f64>,
    /// Median of the traced reference with `torch.jit.optimized_execution(False)`: what the
    /// evaluator's in-process reference time should match.
    pub reference_ms: f64,
    pub eager: TimingStats,
    pub compile: Option<TimingStats>,
    pub reference: TimingStats,
    pub compile_seconds: Option<f64>,
    pub compile_error: Option<String>,
    /// Measured device-to-device copy rate, bytes read plus written per second.
    pub bandwidth_bytes_per_s: f64,
    /// Peak FLOP/s per dtype: the higher of a measured matmul and the datasheet.
    pub peak_flops_per_s: BTreeMap<String, f64>,
    /// The dtype whose peak the compute floor uses.
    pub flops_dtype: String,
    pub memory_floor_ms: f64,
    pub compute_floor_ms: f64,
    /// Speed of light: max(min_bytes / bandwidth, flops / peak).
    pub floor_ms: f64,
    /// `memory` or `compute`: which side sets the floor.
    pub floor_bound: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BaselineProtocol {
    pub warmup_calls: u32,
    pub timed_calls: u32,
    pub input_sets: u32,
    pub l2_flush_bytes: u64,
    pub timer: String,
    pub no_grad: bool,
    pub allow_tf32_matmul: bool,
    pub allow_tf32_cudnn: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TimingStats {
    pub median_ms: f64,
    pub mean_ms: f64,
    pub min_ms: f64,
    pub max_ms: f64,
    pub stddev_ms: f64,
    pub calls: u32,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dtype_names_map_to_kinds() {
        assert_eq!(dtype_kind("float32"), Some(Kind::Float));
        assert_eq!(dtype_kind("bfloat16"), Some(Kind::BFloat16));
        assert_eq!(dtype_kind("bool"), Some(Kind::Bool));
        assert_eq!(dtype_kind("int64"), Some(Kind::Int64));
        assert_eq!(dtype_kind("quint8"), None);
    }

    #[test]
    fn unknown_structures_still_parse() {
        let spec: TensorSpec = serde_json::from_str(
            r#"{"name":"x","position":0,"shape":[2,2],"dtype":"float32","structure":"banded"}"#,
        )
        .unwrap();
        assert_eq!(spec.structure, Some(InputStructure::Other));
        let spec: TensorSpec = serde_json::from_str(
            r#"{"name":"u","position":0,"shape":[2,2],"dtype":"float32","structure":"upper_triangular"}"#,
        )
        .unwrap();
        assert_eq!(spec.structure, Some(InputStructure::UpperTriangular));
    }
}
