import torch
import torch.nn as nn


class Model(nn.Module):
    """Mean hinge loss of scores against labels that are exactly -1 or +1."""

    def __init__(self):
        super().__init__()

    def forward(self, scores: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return torch.clamp(1.0 - scores * labels, min=0.0).mean()


# 16384 x 16384 fp32 scores and labels: 2.1 GB read.
batch_size = 16384
dim = 16384


def get_inputs():
    scores = torch.randn(batch_size, dim)
    labels = torch.randint(0, 2, (batch_size, dim)).float() * 2.0 - 1.0
    return [scores, labels]


def get_init_inputs():
    return []
