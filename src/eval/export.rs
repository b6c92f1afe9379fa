//! Makes a winning kernel usable outside kforge, wrapping the same `.cu` unchanged:
//! - a KernelBench `ModelNew` file (`load_inline`), so a result can be cross-checked with
//!   KernelBench's own eval;
//! - a `torch.library` custom op, for use in a model.
//!
//! Both include the problem's own source (for `Model`, so `ModelNew` builds the same parameters
//! in the same order under the same seed) and a small C++ shim that turns `torch::Tensor`s into
//! the ABI's `kf_tensor`s and calls `kforge_forward` on PyTorch's current stream.

use crate::problem::ProblemSpec;

use super::compile::ABI_HEADER;

/// The C++ dtype constant for a torch dtype name in problem.json.
fn torch_cpp_dtype(name: &str) -> Option<&'static str> {
    Some(match name {
        "float32" | "float" => "torch::kFloat32",
        "float16" | "half" => "torch::kFloat16",
        "bfloat16" => "torch::kBFloat16",
        "float64" | "double" => "torch::kFloat64",
        "int64" | "long" => "torch::kInt64",
        "int32" | "int" => "torch::kInt32",
        "int16" => "torch::kInt16",
        "int8" => "torch::kInt8",
        "uint8" => "torch::kUInt8",
        "bool" => "torch::kBool",
        _ => return None,
    })
}

#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    #[error("output {index} has dtype {dtype}, which the export shim does not know")]
    UnknownDtype { index: usize, dtype: String },
}

/// The CUDA source for load_inline: the ABI header inlined, the candidate, and the shim.
fn inline_cuda_source(spec: &ProblemSpec, candidate: &str) -> Result<String, ExportError> {
    let mut allocations = String::new();
    for (index, output) in spec.outputs.iter().enumerate() {
        let dtype = torch_cpp_dtype(&output.dtype).ok_or_else(|| ExportError::UnknownDtype {
            index,
            dtype: output.dtype.clone(),
        })?;
        let shape = output
            .shape
            .iter()
            .map(|d| d.to_string())
            .collect::<Vec<_>>()
            .join(", ");
        allocations.push_str(&format!(
            "  outputs.push_back(torch::empty({{{shape}}}, torch::TensorOptions().dtype({dtype}).device(device)));\n"
        ));
    }
    let header = ABI_HEADER.replace("#pragma once", "");
    let candidate = candidate
        .lines()
        .filter(|l| !l.trim_start().starts_with("#include \"kforge.h\""))
        .collect::<Vec<_>>()
        .join("\n");
    Ok(format!(
        r#"// ---- kforge.h (inlined) ----
{header}
// ---- candidate (unchanged) ----
{candidate}
// ---- kforge export shim ----
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <vector>

static int32_t kf_dtype_of(const torch::Tensor &t) {{
  switch (t.scalar_type()) {{
    case torch::kFloat32: return KF_FLOAT32;
    case torch::kFloat16: return KF_FLOAT16;
    case torch::kBFloat16: return KF_BFLOAT16;
    case torch::kFloat64: return KF_FLOAT64;
    case torch::kInt64: return KF_INT64;
    case torch::kInt32: return KF_INT32;
    case torch::kInt16: return KF_INT16;
    case torch::kInt8: return KF_INT8;
    case torch::kUInt8: return KF_UINT8;
    case torch::kBool: return KF_BOOL;
    default: TORCH_CHECK(false, "kforge: unsupported dtype"); return -1;
  }}
}}

static kf_tensor kf_describe(const torch::Tensor &t) {{
  TORCH_CHECK(t.is_cuda(), "kforge: tensors must be on the GPU");
  TORCH_CHECK(t.dim() <= KF_MAX_DIMS, "kforge: too many dimensions");
  kf_tensor d{{}};
  d.data = t.data_ptr();
  d.dtype = kf_dtype_of(t);
  d.ndim = (int32_t)t.dim();
  for (int i = 0; i < t.dim(); ++i) {{ d.sizes[i] = t.size(i); d.strides[i] = t.stride(i); }}
  d.numel = t.numel();
  return d;
}}

std::vector<torch::Tensor> kforge_forward_torch(std::vector<torch::Tensor> inputs,
                                                std::vector<torch::Tensor> params) {{
  TORCH_CHECK(!inputs.empty(), "kforge: no inputs");
  auto device = inputs[0].device();
  std::vector<torch::Tensor> outputs;
{allocations}  std::vector<kf_tensor> in, ps, out;
  for (auto &t : inputs) in.push_back(kf_describe(t));
  for (auto &t : params) ps.push_back(kf_describe(t));
  for (auto &t : outputs) out.push_back(kf_describe(t));
  int status = kforge_forward(in.data(), (int)in.size(), ps.data(), (int)ps.size(), out.data(),
                              (int)out.size(), at::cuda::getCurrentCUDAStream().stream());
  TORCH_CHECK(status == 0, "kforge_forward returned ", status);
  return outputs;
}}
"#
    ))
}

const CPP_DECLARATION: &str = "std::vector<torch::Tensor> kforge_forward_torch(std::vector<torch::Tensor> inputs, std::vector<torch::Tensor> params);";

/// A Python string literal: JSON's escapes (\n, \", \\, \uXXXX) are all valid Python.
fn python_string(text: &str) -> String {
    serde_json::to_string(text).unwrap_or_else(|_| String::from("\"\""))
}

/// A KernelBench-style file defining `Model` (the problem's own) and `ModelNew` (the kernel).
pub fn kernelbench_model_new(spec: &ProblemSpec, candidate: &str) -> Result<String, ExportError> {
    let cuda = inline_cuda_source(spec, candidate)?;
    let single = spec.outputs.len() == 1;
    Ok(format!(
        r#"# Generated by `kforge export --kernelbench` for problem {name}.
# ModelNew wraps the kforge candidate unchanged (load_inline); Model is the problem's own source.
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

# ---- the problem (Model, sizes, get_inputs, get_init_inputs) ----
{source}

# ---- the kernel ----
_KFORGE_CUDA_SRC = {cuda}
_KFORGE_CPP_SRC = {cpp}
_kforge_ext = None


def _kforge_extension():
    global _kforge_ext
    if _kforge_ext is None:
        _kforge_ext = load_inline(
            name="kforge_{ident}",
            cpp_sources=_KFORGE_CPP_SRC,
            cuda_sources=_KFORGE_CUDA_SRC,
            functions=["kforge_forward_torch"],
            extra_cuda_cflags=["-O3", "-lineinfo"],
            verbose=False,
        )
    return _kforge_ext


class ModelNew(nn.Module):
    """The kforge kernel behind Model's interface: same constructor, same parameters."""

    def __init__(self, *args, **kwargs):
        super().__init__()
        self.model = Model(*args, **kwargs)

    def forward(self, *args):
        inputs = [a.contiguous() for a in args if isinstance(a, torch.Tensor)]
        params = [t for t in self.model.state_dict().values()]
        outputs = _kforge_extension().kforge_forward_torch(inputs, params)
        return {ret}
"#,
        name = spec.name,
        source = spec.source,
        cuda = python_string(&cuda),
        cpp = python_string(CPP_DECLARATION),
        ident = sanitize(&spec.name),
        ret = if single {
            "outputs[0]"
        } else {
            "tuple(outputs)"
        },
    ))
}

/// A module registering the kernel as the custom op `kforge::<name>`.
pub fn torch_library_op(spec: &ProblemSpec, candidate: &str) -> Result<String, ExportError> {
    let cuda = inline_cuda_source(spec, candidate)?;
    let ident = sanitize(&spec.name);
    let fakes = spec
        .outputs
        .iter()
        .map(|o| {
            format!(
                "torch.empty({:?}, dtype=torch.{}, device=inputs[0].device)",
                o.shape, o.dtype
            )
        })
        .collect::<Vec<_>>()
        .join(", ");
    Ok(format!(
        r#"# Generated by `kforge export --torch-op` for problem {name}.
# Registers the kforge kernel as torch.ops.kforge.{ident}(inputs, params) -> list of outputs, with
# a fake (meta) implementation so it works under torch.compile.
import torch
from torch.utils.cpp_extension import load_inline

_KFORGE_CUDA_SRC = {cuda}
_KFORGE_CPP_SRC = {cpp}
_ext = load_inline(
    name="kforge_op_{ident}",
    cpp_sources=_KFORGE_CPP_SRC,
    cuda_sources=_KFORGE_CUDA_SRC,
    functions=["kforge_forward_torch"],
    extra_cuda_cflags=["-O3", "-lineinfo"],
    verbose=False,
)


@torch.library.custom_op("kforge::{ident}", mutates_args=())
def {ident}(inputs: list[torch.Tensor], params: list[torch.Tensor]) -> list[torch.Tensor]:
    return _ext.kforge_forward_torch([t.contiguous() for t in inputs], list(params))


@{ident}.register_fake
def _(inputs, params):
    return [{fakes}]
"#,
        name = spec.name,
        cuda = python_string(&cuda),
        cpp = python_string(CPP_DECLARATION),
    ))
}

/// A Python/C identifier from a problem name ("19_ReLU" → "p19_relu").
fn sanitize(name: &str) -> String {
    let mut ident: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '_'
            }
        })
        .collect();
    if ident.chars().next().is_none_or(|c| c.is_ascii_digit()) {
        ident.insert(0, 'p');
    }
    ident
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identifiers_are_valid() {
        assert_eq!(sanitize("19_ReLU"), "p19_relu");
        assert_eq!(sanitize("softmax-rows"), "softmax_rows");
    }

    #[test]
    fn python_strings_escape_quotes_and_backslashes() {
        let s = python_string("a \"b\" \\n '''");
        assert!(s.starts_with('"') && s.ends_with('"'));
        assert!(s.contains("\\\"b\\\""));
    }
}
