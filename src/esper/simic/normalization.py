"""Running observation and reward normalizers.

The PPO trainer normalizes a whole rollout batch with frozen statistics and updates `RunningMeanStd` exactly once
per batch, so every transition of a batch (and its PPO update) sees the same input scaling.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from esper.leyline.constants import OBS_CLIP, OBS_EPSILON, REWARD_CLIP, REWARD_EPSILON
from esper.leyline.errors import UserInputError

__all__ = ["CONSTANT_FEATURE_VAR", "RewardNormalizer", "RunningMeanStd", "standardize"]

CONSTANT_FEATURE_VAR = 1e-8
"""Below this variance a feature is treated as constant (features are scaled to about unit range)."""


def standardize(x: torch.Tensor, mean: torch.Tensor, var: torch.Tensor, epsilon: float, clip: float) -> torch.Tensor:
    """(x − mean) / sqrt(var + ε), clipped to ±clip, in x's dtype. A feature whose variance is below
    `CONSTANT_FEATURE_VAR` maps to 0: the policy never saw it change, so a change at deployment is not information it
    can use, and must not arrive as a ±clip outlier. PPO's running statistics and IQL's fixed ones both scale here."""
    z = (x - mean) / torch.sqrt(var + epsilon)
    return torch.where(var < CONSTANT_FEATURE_VAR, torch.zeros_like(z), z).clamp(-clip, clip)


class RunningMeanStd:
    """Per-feature mean/variance by Welford's parallel merge (exact and independent of the batches' order).

    Statistics are kept in float64 so that hundreds of merged batches do not drift; `normalize` returns the input's
    dtype, and the statistics follow the input's device.
    """

    def __init__(
        self,
        shape: tuple[int, ...] | int,
        epsilon: float = OBS_EPSILON,
        device: str | torch.device = "cpu",
    ) -> None:
        self.shape: tuple[int, ...] = (shape,) if isinstance(shape, int) else tuple(shape)
        self.epsilon = epsilon
        self.mean = torch.zeros(self.shape, dtype=torch.float64, device=device)
        self.var = torch.ones(self.shape, dtype=torch.float64, device=device)
        self.count = epsilon
        self.update_count = 0

    def _follow(self, device: torch.device) -> None:
        if self.mean.device != device:
            self.mean = self.mean.to(device)
            self.var = self.var.to(device)

    @torch.no_grad()
    def update(self, x: torch.Tensor) -> None:
        """Merge a batch whose rows are samples (a single sample of `shape` is accepted too)."""
        if tuple(x.shape) == self.shape:
            x = x.unsqueeze(0)
        if tuple(x.shape[1:]) != self.shape or x.shape[0] == 0:
            raise ValueError(f"Expected a non-empty batch of shape [N, {self.shape}], got {tuple(x.shape)}")
        self._follow(x.device)
        x = x.to(torch.float64)
        n = x.shape[0]
        batch_mean = x.mean(dim=0)
        batch_var = x.var(dim=0, correction=0)
        delta = batch_mean - self.mean
        total = self.count + n
        m2 = self.var * self.count + batch_var * n + delta.square() * (self.count * n / total)
        self.mean = self.mean + delta * (n / total)
        self.var = m2 / total
        self.count = total
        self.update_count += 1

    @torch.no_grad()
    def normalize(self, x: torch.Tensor, clip: float = OBS_CLIP) -> torch.Tensor:
        """Standardize and clip (in float64, returned in x's dtype); see `standardize`."""
        self._follow(x.device)
        return standardize(x.to(torch.float64), self.mean, self.var, self.epsilon, clip).to(x.dtype)

    def state_dict(self) -> dict[str, Any]:
        return {
            "shape": list(self.shape),
            "mean": self.mean.detach().cpu().clone(),
            "var": self.var.detach().cpu().clone(),
            "count": float(self.count),
            "update_count": int(self.update_count),
            "epsilon": float(self.epsilon),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if tuple(state["shape"]) != self.shape:
            raise UserInputError(f"RunningMeanStd shape mismatch: checkpoint {tuple(state['shape'])}, "
                                 f"mine {self.shape}")
        device = self.mean.device
        self.mean = state["mean"].to(device=device, dtype=torch.float64).clone()
        self.var = state["var"].to(device=device, dtype=torch.float64).clone()
        self.count = float(state["count"])
        self.update_count = int(state["update_count"])
        self.epsilon = float(state["epsilon"])


class RewardNormalizer:
    """Scale rewards by their running standard deviation (no mean subtraction: the sign of a reward is its meaning)."""

    def __init__(self, clip: float = REWARD_CLIP, epsilon: float = REWARD_EPSILON) -> None:
        self.clip = clip
        self.epsilon = epsilon
        self.count = 0
        self.mean = 0.0
        self.m2 = 0.0

    @property
    def std(self) -> float:
        """Sample standard deviation of the rewards seen (0.0 before two rewards)."""
        return math.sqrt(self.m2 / (self.count - 1)) if self.count >= 2 else 0.0

    def update_and_normalize(self, reward: float) -> float:
        r = float(reward)
        if not math.isfinite(r):
            raise ValueError(f"Non-finite reward {reward!r} would poison the running statistics")
        self.count += 1
        delta = r - self.mean
        self.mean += delta / self.count
        self.m2 += delta * (r - self.mean)
        if self.count >= 2:
            r = r / max(self.epsilon, self.std)
        return max(-self.clip, min(self.clip, r))

    def state_dict(self) -> dict[str, Any]:
        return {
            "clip": float(self.clip),
            "epsilon": float(self.epsilon),
            "count": int(self.count),
            "mean": float(self.mean),
            "m2": float(self.m2),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.clip = float(state["clip"])
        self.epsilon = float(state["epsilon"])
        self.count = int(state["count"])
        self.mean = float(state["mean"])
        self.m2 = float(state["m2"])
