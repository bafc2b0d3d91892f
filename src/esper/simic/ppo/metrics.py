"""PPO health metrics, aggregated in one place: minibatches into one update, updates into one rollout batch.

Metric names are a contract with `history.jsonl`, TensorBoard, the anomaly detector and `esper report`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from esper.env.masks import HEAD_KEYS

__all__ = ["UpdateStats", "merge_updates"]

_MEAN_METRICS: tuple[str, ...] = (
    "policy_loss",
    "value_loss",
    "entropy",
    "approx_kl",
    "clip_fraction",
    "ratio_mean",
    "ratio_std",
    "grad_norm",
)


class UpdateStats:
    """Minibatch statistics of one update, with one host transfer per minibatch."""

    def __init__(self) -> None:
        self.sums = dict.fromkeys(_MEAN_METRICS, 0.0)
        self.head_sums = dict.fromkeys(HEAD_KEYS, 0.0)
        self.head_counts = dict.fromkeys(HEAD_KEYS, 0.0)
        self.ratio_max, self.ratio_min = -math.inf, math.inf
        self.n_updates = 0

    @torch.no_grad()
    def add(self, *, policy_loss: torch.Tensor, value_loss: torch.Tensor, entropy: torch.Tensor,
            approx_kl: torch.Tensor, clip_fraction: torch.Tensor, ratio: torch.Tensor, grad_norm: torch.Tensor,
            head_entropies: Mapping[str, torch.Tensor], relevant: Mapping[str, torch.Tensor]
            ) -> tuple[float, float, float]:
        """Record one minibatch; returns its (approx_kl, ratio max, ratio min) for early stop and diagnostics."""
        r = ratio.detach()
        means = (policy_loss, value_loss, entropy, approx_kl, clip_fraction, r.mean(), r.std(correction=0), grad_norm)
        head_sums = [torch.where(relevant[h], head_entropies[h].detach(), 0.0).sum() for h in HEAD_KEYS]
        head_counts = [relevant[h].sum().float() for h in HEAD_KEYS]
        row = torch.stack([*(m.detach().float() for m in means), r.max(), r.min(), *head_sums, *head_counts]).tolist()
        k, h = len(_MEAN_METRICS), len(HEAD_KEYS)
        for name, value in zip(_MEAN_METRICS, row[:k]):
            self.sums[name] += value
        batch_max, batch_min = row[k], row[k + 1]
        self.ratio_max, self.ratio_min = max(self.ratio_max, batch_max), min(self.ratio_min, batch_min)
        for i, head in enumerate(HEAD_KEYS):
            self.head_sums[head] += row[k + 2 + i]
            self.head_counts[head] += row[k + 2 + h + i]
        self.n_updates += 1
        return row[_MEAN_METRICS.index("approx_kl")], batch_max, batch_min

    def metrics(self) -> dict[str, Any]:
        out: dict[str, Any] = {name: total / self.n_updates for name, total in self.sums.items()}
        for head in HEAD_KEYS:  # mean over the steps where the head was relevant (0.0 if it never was)
            out[f"entropy_{head}"] = self.head_sums[head] / self.head_counts[head] if self.head_counts[head] else 0.0
        out.update(ratio_max=self.ratio_max, ratio_min=self.ratio_min, n_minibatch_updates=self.n_updates)
        return out


def merge_updates(runs: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The metrics of several update calls on one rollout batch: extremes for ratios, sums for counts, else means."""
    merged: dict[str, Any] = {}
    for key in runs[0]:
        values = [r[key] for r in runs if key in r]
        if key == "ratio_max":
            merged[key] = max(values)
        elif key == "ratio_min":
            merged[key] = min(values)
        elif key == "n_minibatch_updates":
            merged[key] = sum(values)
        elif key == "ratio_diagnostic":
            merged[key] = values[0]
        else:
            merged[key] = sum(values) / len(values)
    for r in runs:
        if "ratio_diagnostic" in r and "ratio_diagnostic" not in merged:
            merged["ratio_diagnostic"] = r["ratio_diagnostic"]
        if r.get("early_stopped"):
            merged.update(early_stopped=1.0, early_stop_epoch=r["early_stop_epoch"])
    merged["updates_run"] = len(runs)
    return merged
