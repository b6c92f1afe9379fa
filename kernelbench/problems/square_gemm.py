import torch
import torch.nn as nn


class Model(nn.Module):
    """C = A @ B for square fp32 matrices."""

    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.matmul(a, b)


# 4096^3: 137 GFLOP, about 2 ms at the H200's 67 TFLOP/s fp32 rate.
N = 4096


def get_inputs():
    a = torch.randn(N, N)
    b = torch.randn(N, N)
    return [a, b]


def get_init_inputs():
    return []
