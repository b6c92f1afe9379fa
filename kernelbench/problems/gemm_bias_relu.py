import torch
import torch.nn as nn


class Model(nn.Module):
    """A linear layer (GEMM + bias) followed by ReLU: the classic epilogue fusion."""

    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features, bias=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.linear(x))


# 2048 x 8192 @ 8192 x 4096: 137 GFLOP.
batch_size = 2048
in_features = 8192
out_features = 4096


def get_inputs():
    x = torch.randn(batch_size, in_features)
    return [x]


def get_init_inputs():
    return [in_features, out_features]
