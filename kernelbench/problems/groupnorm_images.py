import torch
import torch.nn as nn


class Model(nn.Module):
    """GroupNorm over NCHW feature maps: statistics per (sample, group of channels)."""

    def __init__(self, num_groups: int, channels: int):
        super().__init__()
        self.norm = nn.GroupNorm(num_groups, channels, eps=1e-5)
        with torch.no_grad():
            self.norm.weight.uniform_(0.5, 1.5)
            self.norm.bias.uniform_(-0.5, 0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x)


# 128 x 256 x 128 x 128 fp32: 2.1 GB in, 2.1 GB out; 32 groups of 8 channels.
batch_size = 128
channels = 256
num_groups = 32
height = 128
width = 128


def get_inputs():
    x = torch.randn(batch_size, channels, height, width)
    return [x]


def get_init_inputs():
    return [num_groups, channels]
