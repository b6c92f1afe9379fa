import torch
import torch.nn as nn


class Model(nn.Module):
    """Linear layer, dropout, tanh. Dropout makes training-mode outputs random run to run."""

    def __init__(self, in_features: int, out_features: int, dropout_p: float):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.dropout = nn.Dropout(p=dropout_p)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.dropout(self.linear(x)))


# 4096 x 4096 @ 4096 x 4096: 137 GFLOP.
batch_size = 4096
in_features = 4096
out_features = 4096
dropout_p = 0.1


def get_inputs():
    x = torch.randn(batch_size, in_features)
    return [x]


def get_init_inputs():
    return [in_features, out_features, dropout_p]
