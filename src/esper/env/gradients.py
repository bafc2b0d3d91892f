"""Lightweight per-seed gradient statistics for seed telemetry and health.

Runs on every occupied slot after the last training batch of each epoch, so it is on the hot path: per-tensor norms
come from one fused `torch._foreach_norm` call and all reductions stay on the device. An env queues the vector
`collect_async` returns on the epoch's `Readout` and turns the values into statistics with `summarize`; `materialize`
reads one vector on its own.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TypedDict

import torch

from esper.leyline.constants import GRAD_EXPLODING_THRESHOLD, GRAD_VANISHING_THRESHOLD

__all__ = ["GradientStats", "SeedGradientCollector", "collect_seed_gradients"]

# Layout of the device vector returned by `collect_async`.
_COUNT, _TOTAL_NORM, _VANISHING, _EXPLODING, _NONFINITE = range(5)
_N_FIELDS = 5


class GradientStats(TypedDict):
    gradient_norm: float
    gradient_health: float
    has_vanishing: bool
    has_exploding: bool
    has_nonfinite: bool


class SeedGradientCollector:
    """Stateless gradient-norm summary of a parameter set: mean-scaled total norm, health score, flags.

    A tensor whose norm is NaN/inf counts as exploding (it lowers health) and sets `has_nonfinite`, which Kasmina uses
    to mark the seed unhealthy; its `gradient_norm` is then non-finite too, which is the honest value.
    """

    def __init__(
        self,
        vanishing_threshold: float = GRAD_VANISHING_THRESHOLD,
        exploding_threshold: float = GRAD_EXPLODING_THRESHOLD,
    ) -> None:
        if not 0.0 <= vanishing_threshold < exploding_threshold:
            raise ValueError(
                f"Need 0 <= vanishing_threshold < exploding_threshold, got {vanishing_threshold}, {exploding_threshold}"
            )
        self.vanishing_threshold = vanishing_threshold
        self.exploding_threshold = exploding_threshold

    def collect_async(self, parameters: Iterable[torch.Tensor]) -> torch.Tensor:
        """Device vector (count, √Σnorm², vanishing, exploding, non-finite) without a host sync.

        √Σnorm² is stored instead of Σnorm² because `vector_norm` rescales internally and cannot overflow float32.
        """
        grads = [p.grad for p in parameters if p.grad is not None]
        if not grads:
            return torch.zeros(_N_FIELDS)
        norms = torch.stack(torch._foreach_norm(grads, 2.0, dtype=torch.float32))
        nonfinite = ~torch.isfinite(norms)
        return torch.stack(
            [
                torch.full((), float(len(grads)), device=norms.device),
                torch.linalg.vector_norm(norms),
                (norms < self.vanishing_threshold).sum().float(),
                ((norms > self.exploding_threshold) | nonfinite).sum().float(),
                nonfinite.sum().float(),
            ]
        )

    def materialize(self, stats: torch.Tensor) -> GradientStats:
        """Python values from `collect_async` output (one host transfer)."""
        if stats.shape != (_N_FIELDS,):
            raise ValueError(f"Expected a ({_N_FIELDS},) stats vector from collect_async, got {tuple(stats.shape)}")
        return self.summarize(stats.tolist())

    def summarize(self, values: Sequence[float]) -> GradientStats:
        """The statistics of the values of one `collect_async` vector, read on the host."""
        if len(values) != _N_FIELDS:
            raise ValueError(f"Expected the {_N_FIELDS} values of a collect_async vector, got {len(values)}")
        n = int(values[_COUNT])
        if n == 0:
            return GradientStats(
                gradient_norm=0.0, gradient_health=1.0, has_vanishing=False, has_exploding=False, has_nonfinite=False
            )
        n_vanishing, n_exploding = values[_VANISHING], values[_EXPLODING]
        health = 1.0 - 0.5 * n_vanishing / n - 0.8 * n_exploding / n
        return GradientStats(
            gradient_norm=values[_TOTAL_NORM] / n,
            gradient_health=max(0.0, min(1.0, health)),
            has_vanishing=n_vanishing > 0,
            has_exploding=n_exploding > 0,
            has_nonfinite=values[_NONFINITE] > 0,
        )

    def collect(self, parameters: Iterable[torch.Tensor]) -> GradientStats:
        """Call after backward (and unscaling), before the optimizer step."""
        return self.materialize(self.collect_async(parameters))


def collect_seed_gradients(
    parameters: Iterable[torch.Tensor],
    vanishing_threshold: float = GRAD_VANISHING_THRESHOLD,
    exploding_threshold: float = GRAD_EXPLODING_THRESHOLD,
) -> GradientStats:
    return SeedGradientCollector(vanishing_threshold, exploding_threshold).collect(parameters)
