"""Pure tensor ops that combine a host activation h with a seed output s. No state, no side effects.

A TRAINING seed needs no op here: its slot returns h itself, and the seed trains in a forward of its own (the
incubator in Tolaria's train step), so nothing of it can leak into the host's function or gradients.
"""

from __future__ import annotations

from torch import Tensor


def blend_lerp(h: Tensor, s: Tensor, w: Tensor | float) -> Tensor:
    """h + w·(s − h): exactly h when w = 0 (for finite s), so α = 0 preserves the host bit for bit."""
    return h + w * (s - h)
