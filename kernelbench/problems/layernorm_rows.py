import torch
import torch.nn as nn


class Model(nn.Module):
    """LayerNorm over the last dimension, with a learned scale and shift."""

    def __init__(self, dim: int):
        super().__init__()
        self.norm = nn.LayerNorm(dim, eps=1e-5)
        # Non-trivial affine parameters, so a kernel that ignores them fails the check.
        with torch.no_grad():
            self.norm.weight.uniform_(0.5, 1.5)
            self.norm.bias.uniform_(-0.5, 0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x)


# 65536 rows of 16384 fp32: 4.3 GB in, 4.3 GB out.
batch_size = 65536
dim = 16384


def get_inputs():
    x = torch.randn(batch_size, dim) * 2.0 + 3.0
    return [x]


def get_init_inputs():
    return [dim]
