"""Image corruptions in the style of MNIST-C and CIFAR-10-C, computed in torch from a seed per image.

A task family varies its instance types by corrupting a base task's images: brightness and contrast shifts, Gaussian
noise, blur, rotation, translation and low-frequency "fog". Each image's corruption parameters come from its own seed
(`derive_seed(family, type, split, image index)`), so an image is corrupted the same way whichever subset of the pool
an episode draws, on any machine and in any batch. Severity 1–5 scales each corruption as the benchmarks do.
Images are float tensors (N, C, H, W) on the scale the model sees (before the task's normalization).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor

from esper.leyline.errors import UserInputError
from esper.leyline.seeding import derive_seed

__all__ = ["CORRUPTIONS", "MAX_SEVERITY", "corrupt"]

MAX_SEVERITY = 5


def _uniform(seeds: Tensor, salt: int) -> Tensor:
    """One uniform draw in [0, 1) per image, a pure function of (its seed, salt): hashed, so the same on every CPU."""
    return torch.tensor([derive_seed(int(s), salt) / 2.0**63 for s in seeds.tolist()], dtype=torch.float32)


def _signed(seeds: Tensor, salt: int) -> Tensor:
    """A uniform draw in [−1, 1) per image."""
    return 2.0 * _uniform(seeds, salt) - 1.0


def _per_image(values: Tensor) -> Tensor:
    return values.view(-1, 1, 1, 1)


def _brightness(x: Tensor, severity: int, seeds: Tensor) -> Tensor:
    shift = 0.15 * severity * _signed(seeds, 0)
    return x + _per_image(shift)


def _contrast(x: Tensor, severity: int, seeds: Tensor) -> Tensor:
    factor = torch.exp(0.35 * severity * _signed(seeds, 1))  # log-uniform around 1
    mean = x.mean(dim=(1, 2, 3), keepdim=True)
    return (x - mean) * _per_image(factor) + mean


def _gaussian_noise(x: Tensor, severity: int, seeds: Tensor) -> Tensor:
    noise = torch.stack([torch.randn(x.shape[1:], generator=torch.Generator().manual_seed(int(s)))
                         for s in seeds.tolist()])
    return x + (0.12 * severity) * noise


def _blur(x: Tensor, severity: int, seeds: Tensor) -> Tensor:
    sigma = 0.3 + 0.3 * severity * (0.75 + 0.5 * _uniform(seeds, 2))  # one Gaussian width per image
    radius = 1 + severity
    offsets = torch.arange(-radius, radius + 1, dtype=torch.float32)
    kernels = torch.exp(-(offsets.view(1, -1) ** 2) / (2 * sigma.view(-1, 1) ** 2))
    kernels = kernels / kernels.sum(1, keepdim=True)  # (N, K): separable, one kernel per image
    # A weighted sum of shifted copies rather than a (grouped) convolution: elementwise arithmetic in a fixed order,
    # so an image's result is the same bits whichever other images share its batch.
    _, _, h, w = x.shape
    taps = [kernels[:, k].view(-1, 1, 1, 1) for k in range(2 * radius + 1)]
    rows = F.pad(x, (radius, radius, 0, 0), mode="replicate")
    x = sum((t * rows[..., k:k + w] for k, t in enumerate(taps)), torch.zeros_like(x))
    cols = F.pad(x, (0, 0, radius, radius), mode="replicate")
    return sum((t * cols[..., k:k + h, :] for k, t in enumerate(taps)), torch.zeros_like(x))


def _affine(x: Tensor, theta: Tensor) -> Tensor:
    grid = F.affine_grid(theta, list(x.shape), align_corners=False)
    return F.grid_sample(x, grid, mode="bilinear", padding_mode="border", align_corners=False)


def _rotation(x: Tensor, severity: int, seeds: Tensor) -> Tensor:
    angle = math.radians(9.0 * severity) * _signed(seeds, 3)
    cos, sin = angle.cos(), angle.sin()
    zero = torch.zeros_like(angle)
    theta = torch.stack([torch.stack([cos, -sin, zero], 1), torch.stack([sin, cos, zero], 1)], 1)
    return _affine(x, theta)


def _translation(x: Tensor, severity: int, seeds: Tensor) -> Tensor:
    shift = 0.06 * severity  # of the half-width: severity 5 moves by up to 15 % of the image
    dx, dy = shift * _signed(seeds, 4), shift * _signed(seeds, 5)
    one, zero = torch.ones_like(dx), torch.zeros_like(dx)
    theta = torch.stack([torch.stack([one, zero, dx], 1), torch.stack([zero, one, dy], 1)], 1)
    return _affine(x, theta)


def _fog(x: Tensor, severity: int, seeds: Tensor) -> Tensor:
    """Low-frequency additive haze: a few random smooth waves per image (a cheap stand-in for plasma fractals)."""
    n, _, h, w = x.shape
    ys = torch.linspace(-math.pi, math.pi, h).view(1, h, 1)
    xs = torch.linspace(-math.pi, math.pi, w).view(1, 1, w)
    haze = torch.zeros(n, h, w)
    for k in range(3):
        fx, fy = 0.5 + _uniform(seeds, 10 + 4 * k), 0.5 + _uniform(seeds, 11 + 4 * k)
        phase = 2 * math.pi * _uniform(seeds, 12 + 4 * k)
        weight = _uniform(seeds, 13 + 4 * k).view(n, 1, 1)
        haze += weight * torch.sin(fx.view(n, 1, 1) * xs + fy.view(n, 1, 1) * ys + phase.view(n, 1, 1))
    return x + (0.15 * severity) * haze.unsqueeze(1)


Corruption = Callable[[Tensor, int, Tensor], Tensor]
CORRUPTIONS: dict[str, Corruption] = {
    "brightness": _brightness, "contrast": _contrast, "gaussian_noise": _gaussian_noise, "blur": _blur,
    "rotation": _rotation, "translation": _translation, "fog": _fog,
}


def corrupt(images: Tensor, name: str, severity: int, seeds: Sequence[int] | Tensor) -> Tensor:
    """`images` (N, C, H, W, float) corrupted by `name` at `severity`, image i from seed `seeds[i]` alone."""
    if name not in CORRUPTIONS:
        raise UserInputError(f"Unknown corruption '{name}'. Available: {sorted(CORRUPTIONS)}")
    if not 1 <= severity <= MAX_SEVERITY:
        raise UserInputError(f"Corruption severity must be 1..{MAX_SEVERITY}, got {severity}")
    seeds = torch.as_tensor(seeds, dtype=torch.int64)
    if images.dim() != 4 or len(seeds) != len(images):
        raise ValueError(f"corrupt needs (N, C, H, W) images and N seeds, got {tuple(images.shape)} and {len(seeds)}")
    with torch.no_grad():
        return CORRUPTIONS[name](images.float(), severity, seeds).contiguous()
