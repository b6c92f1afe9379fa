//! Drawing a problem's inputs for a seed. `inputs.pt` is a trace of the problem's own
//! `get_inputs()` (randn, rand, randint, triu, comparisons... recorded as operations), so after
//! `tch::manual_seed(seed)` it yields exactly what Python's `torch.manual_seed(seed);
//! get_inputs()` yields on the same device, structure included (triangular, symmetric, boolean
//! masks, class indices, ±1 labels): the candidate may rely on that structure (DESIGN.md §3.1).

use std::path::PathBuf;

use tch::{CModule, Device, IValue, Tensor};

use super::ProblemError;
use super::bundle::{check_tensor, run_unoptimized, tensors_of};
use super::spec::TensorSpec;

/// A bundle's input generator on one device.
pub struct InputGenerator {
    module: CModule,
    dummy: Tensor,
    inputs: Vec<TensorSpec>,
    device: Device,
    dir: PathBuf,
}

impl InputGenerator {
    pub(crate) fn new(
        module: CModule,
        inputs: Vec<TensorSpec>,
        device: Device,
        dir: PathBuf,
    ) -> Self {
        InputGenerator {
            module,
            dummy: Tensor::zeros([1], (tch::Kind::Float, device)),
            inputs,
            device,
            dir,
        }
    }

    /// The forward inputs for `seed`, in problem.json order, on the generator's device. Seeds
    /// torch's global generators (CPU and CUDA), as Python's `torch.manual_seed` does.
    pub fn generate(&self, seed: i64) -> Result<Vec<Tensor>, ProblemError> {
        tch::manual_seed(seed);
        // Unoptimised, like the reference: a fuser could contract `randn(...) * a + b` into an
        // FMA and round differently from Python's eager get_inputs().
        let value = run_unoptimized(|| {
            self.module
                .forward_is(&[IValue::Tensor(self.dummy.shallow_clone())])
        })
        .map_err(|e| ProblemError::Torch {
            dir: crate::paths::display(&self.dir),
            what: format!("drawing inputs for seed {seed}"),
            message: e.to_string(),
        })?;
        let tensors = tensors_of(value, &self.dir, "inputs.pt")?;
        if tensors.len() != self.inputs.len() {
            return Err(ProblemError::Mismatch {
                dir: crate::paths::display(&self.dir),
                detail: format!(
                    "inputs.pt made {} inputs, problem.json lists {}",
                    tensors.len(),
                    self.inputs.len()
                ),
            });
        }
        for (tensor, spec) in tensors.iter().zip(&self.inputs) {
            check_tensor(tensor, &spec.shape, &spec.dtype).map_err(|why| {
                ProblemError::Mismatch {
                    dir: crate::paths::display(&self.dir),
                    detail: format!("inputs.pt made input {}: {why}", spec.name),
                }
            })?;
        }
        Ok(tensors)
    }

    pub fn specs(&self) -> &[TensorSpec] {
        &self.inputs
    }

    pub fn device(&self) -> Device {
        self.device
    }
}
