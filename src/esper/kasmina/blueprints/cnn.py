"""CNN blueprints: shape-preserving modules on (B, C, H, W).

Standard (PyTorch default, kaiming-uniform) initialization: α = 0 already preserves the host function, so seeds must
not start at zero output or they would receive no useful gradient.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from esper.kasmina.blueprints.registry import register_blueprint

_GROUP_CANDIDATES = (32, 16, 8, 4, 2, 1)


def group_count(channels: int) -> int:
    """g(C): the most groups that still leave ≥ 16 channels per group, else the most groups that divide C."""
    for groups in _GROUP_CANDIDATES:
        if channels % groups == 0 and channels // groups >= 16:
            return groups
    return next(groups for groups in _GROUP_CANDIDATES if channels % groups == 0)


class SeedConvBlock(nn.Module):
    """Conv3×3 (no bias) → GroupNorm(g(C)) → ReLU; GroupNorm keeps seeds independent of batch statistics."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, kernel_size=3, padding=1, bias=False)
        self.norm = nn.GroupNorm(group_count(channels), channels)

    def forward(self, x: Tensor) -> Tensor:
        return torch.relu(self.norm(self.conv(x)))


class ConvLight(nn.Module):
    """y = x + SeedConvBlock(x)."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.block = SeedConvBlock(channels)

    def forward(self, x: Tensor) -> Tensor:
        return x + self.block(x)


class ConvHeavy(nn.Module):
    """y = x + SeedConvBlock(SeedConvBlock(x))."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.block1 = SeedConvBlock(channels)
        self.block2 = SeedConvBlock(channels)

    def forward(self, x: Tensor) -> Tensor:
        return x + self.block2(self.block1(x))


def _se_reduction(channels: int) -> int:
    return max(1, channels // 4)


class SqueezeExcitation(nn.Module):
    """Channel attention: y = x · 2σ(W₂·SiLU(W₁·GAP(x))), no biases.

    The 2σ gate is 1 at a zero pre-activation, so the seed starts close to the identity instead of halving its
    input. SiLU instead of ReLU: with only C/4 hidden units fed by non-negative post-ReLU activations, a ReLU
    bottleneck is dead for every sample in a sizeable fraction of initializations, and then no parameter ever
    receives a gradient; SiLU is non-zero (with a non-zero slope) for every non-zero input.
    """

    def __init__(self, channels: int) -> None:
        super().__init__()
        reduced = _se_reduction(channels)
        self.fc1 = nn.Linear(channels, reduced, bias=False)
        self.fc2 = nn.Linear(reduced, channels, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        scale = 2.0 * torch.sigmoid(self.fc2(F.silu(self.fc1(x.mean(dim=(2, 3))))))
        return x * scale[:, :, None, None]


class GroupNormSeed(nn.Module):
    """y = x + tanh(s)·(GroupNorm(x) − x), s init 1: a learnable pull towards the normalized activation."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.norm = nn.GroupNorm(min(32, channels), channels)
        self.strength = nn.Parameter(torch.ones(()))

    def forward(self, x: Tensor) -> Tensor:
        # torch's CPU GroupNorm backward crashes (segfault) on a 4-D input whose strides suggest channels_last when
        # the input needs no gradient, which is exactly the TRAINING incubator's detached input. `.contiguous()` is
        # not enough: at H = W = 1 a channels_last tensor counts as contiguous in both formats and is returned
        # unchanged. A (B, C, H·W) view has no channels_last reading at all, so the kernel takes the plain path.
        normalized = self.norm(x.flatten(2)).reshape(x.shape)
        return x + torch.tanh(self.strength) * (normalized - x)


class DepthwiseSeparable(nn.Module):
    """y = x + ReLU(GN(Conv1×1(DWConv3×3(x)))), no biases: a cheap spatial + channel mixing residual."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.depthwise = nn.Conv2d(channels, channels, kernel_size=3, padding=1, groups=channels, bias=False)
        self.pointwise = nn.Conv2d(channels, channels, kernel_size=1, bias=False)
        self.norm = nn.GroupNorm(group_count(channels), channels)

    def forward(self, x: Tensor) -> Tensor:
        return x + torch.relu(self.norm(self.pointwise(self.depthwise(x))))


def _identity(channels: int) -> nn.Module:
    return nn.Identity()


_CATALOG: tuple[tuple[str, Callable[[int], nn.Module], Callable[[int], int], str, bool], ...] = (
    ("noop", _identity, lambda c: 0, "Identity: a placeholder seed with no parameters", True),
    ("conv_light", ConvLight, lambda c: 9 * c * c + 2 * c, "Residual 3x3 conv block", True),
    ("attention", SqueezeExcitation, lambda c: 2 * c * _se_reduction(c), "Squeeze-excitation channel attention", True),
    ("norm", GroupNormSeed, lambda c: 2 * c + 1, "Learnable pull towards GroupNorm", True),
    ("depthwise", DepthwiseSeparable, lambda c: c * c + 11 * c, "Residual depthwise-separable conv", True),
    ("conv_heavy", ConvHeavy, lambda c: 18 * c * c + 4 * c, "Residual stack of two 3x3 conv blocks", False),
)
"""The built-in CNN blueprints, registered in this order through the same `register_blueprint` a plugin uses (the
order is the policy head's; `conv_heavy` stays out of the head, so policies never choose it, while `fixed:` and
`grow:` can build it)."""

for _name, _factory, _param_count, _description, _in_head in _CATALOG:
    register_blueprint(_name, topology="cnn", param_count=_param_count, description=_description,
                       in_head=_in_head)(_factory)
