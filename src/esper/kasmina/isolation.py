"""Pure tensor ops that combine a host activation h with a seed output s. No state, no side effects."""

from __future__ import annotations

from torch import Tensor


def ste_forward(h: Tensor, s: Tensor) -> Tensor:
    """Value exactly h (for finite s), gradient 1 to h and to s: the seed trains without changing the forward."""
    return h + (s - s.detach())


def blend_lerp(h: Tensor, s: Tensor, w: Tensor | float) -> Tensor:
    """h + w·(s − h): exactly h when w = 0 (for finite s), so α = 0 preserves the host bit for bit."""
    return h + w * (s - h)
