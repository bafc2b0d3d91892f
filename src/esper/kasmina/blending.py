"""Blend schedules and the learned gate.

Schedules only compute the α that `SeedState.step_epoch` stores; the forward reads `state.alpha` and nothing else,
so α has a single source of truth.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from types import MappingProxyType

from torch import Tensor, nn

from esper.leyline import BLEND_IDS
from esper.leyline.errors import UserInputError

_SIGMOID_STEEPNESS = 12.0


def _logistic(z: float) -> float:
    return 1.0 / (1.0 + math.exp(-z))


_LOGISTIC_LO = _logistic(-_SIGMOID_STEEPNESS / 2)
_LOGISTIC_HI = _logistic(_SIGMOID_STEEPNESS / 2)


def _check_progress(x: float) -> None:
    if not 0.0 <= x <= 1.0:
        raise ValueError(f"Blend progress must lie in [0, 1], got {x}")


def linear(x: float) -> float:
    """α = x."""
    _check_progress(x)
    return float(x)


def sigmoid(x: float) -> float:
    """Logistic ramp rescaled so that f(0) = 0 and f(1) = 1 exactly (the ends are computed by the same expression)."""
    _check_progress(x)
    return (_logistic(_SIGMOID_STEEPNESS * (x - 0.5)) - _LOGISTIC_LO) / (_LOGISTIC_HI - _LOGISTIC_LO)


BLEND_SCHEDULES: Mapping[str, Callable[[float], float]] = MappingProxyType(
    {"linear": linear, "sigmoid": sigmoid, "gated": linear}
)


def schedule_alpha(blend_id: str, x: float) -> float:
    """α written by `blend_id`'s schedule at progress x = blending_steps_done / blending_steps_total."""
    schedule = BLEND_SCHEDULES.get(blend_id)
    if schedule is None:
        raise UserInputError(f"Unknown blend '{blend_id}'. Available: {list(BLEND_IDS)}")
    return schedule(x)


def _gate_width(channels: int) -> int:
    return max(1, channels // 4)


def gated_blend_param_count(channels: int) -> int:
    """C·r + 2r + 1 with r = max(1, C // 4)."""
    r = _gate_width(channels)
    return channels * r + 2 * r + 1


class GatedBlend(nn.Module):
    """Learned gate g(h) ∈ (0, 1); the slot mixes with w = α·g(h).

    cnn: one gate per sample from the globally pooled activation, shape (B, 1, 1, 1).
    transformer: one gate per position, shape (B, T, 1), never pooled over time so a causal LM stays causal.
    """

    def __init__(self, channels: int, topology: str) -> None:
        super().__init__()
        if topology not in ("cnn", "transformer"):
            raise UserInputError(f"Unknown topology '{topology}' for GatedBlend. Available: ['cnn', 'transformer']")
        self.topology = topology
        r = _gate_width(channels)
        self.fc1 = nn.Linear(channels, r)
        self.fc2 = nn.Linear(r, 1)

    def forward(self, h: Tensor) -> Tensor:
        features = h.mean(dim=(2, 3)) if self.topology == "cnn" else h
        gate = self.fc2(self.fc1(features).relu()).sigmoid()
        return gate[:, :, None, None] if self.topology == "cnn" else gate


__all__ = [
    "BLEND_IDS",
    "BLEND_SCHEDULES",
    "GatedBlend",
    "gated_blend_param_count",
    "linear",
    "schedule_alpha",
    "sigmoid",
]
