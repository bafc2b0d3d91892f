"""Seed telemetry collected by an optimizer hook: what esper's own train step measures, from the user's steps.

Before each optimizer step (every gradient exists, unscaled) the hook adds, on the device and without reading any
value on the host: the host's gradient norm, each TRAINING or BLENDING seed's gradient-norm ratio to the host (per
element, as the G2 gate reads it), and each seed's gradient statistics (those of the epoch's last step are kept, as
esper's own envs keep the last batch's). `read` turns an epoch of them into numbers with one host read.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from esper.api.slotset import SlotSet
from esper.env.gradients import GradientStats, SeedGradientCollector
from esper.leyline import SeedStage
from esper.leyline.constants import GRADIENT_EPSILON

__all__ = ["EpochTelemetry", "GradientTelemetry"]

_RATIO_STAGES = (SeedStage.TRAINING, SeedStage.BLENDING)


@dataclass(frozen=True)
class EpochTelemetry:
    """One epoch of optimizer steps: how many, the mean host gradient norm, per slot the mean seed/host gradient
    ratio and the last step's seed gradient statistics and parameter finiteness."""

    steps: int
    grad_norm_host: float
    ratios: dict[str, float]
    gradients: dict[str, tuple[GradientStats, bool]]


def _norm(params: Iterable[nn.Parameter]) -> tuple[Tensor | None, int]:
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        return None, 0
    return torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads, 2.0))), sum(g.numel() for g in grads)


class GradientTelemetry:
    """The hook's accumulators for one optimizer and one model's slots."""

    def __init__(self, optimizer: torch.optim.Optimizer, slot_set: SlotSet) -> None:
        self.slot_set = slot_set
        self.collector = SeedGradientCollector()
        self.handle = optimizer.register_step_pre_hook(self._on_step)
        self.reset()

    def reset(self) -> None:
        self.steps = 0
        self.host_norm: Tensor | None = None
        self.ratio_sum: dict[str, Tensor] = {}
        self.ratio_count: dict[str, Tensor] = {}
        self.last: dict[str, Tensor] = {}  # the last step's gradient statistics and finiteness flag per slot

    def _on_step(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        seeded = [s for s in self.slot_set.slots() if s.state is not None]
        seed_ids = {id(p) for s in seeded for p in s.seed_parameters()}
        host_norm, host_n = _norm(p for g in optimizer.param_groups for p in g["params"] if id(p) not in seed_ids)
        self.steps += 1
        if host_norm is not None:
            host_norm = host_norm.detach()
            self.host_norm = host_norm if self.host_norm is None else self.host_norm + host_norm
        for slot in seeded:
            params = slot.seed_parameters()
            stats, finite = self.collector.collect_async(params), slot.finite_parameters()
            flag = torch.ones(1) if finite is None else finite.float().reshape(1)  # no parameters: nothing infinite
            self.last[slot.slot_id] = torch.cat([stats.float(), flag.to(stats.device)])
            assert slot.state is not None
            if host_norm is None or slot.state.stage not in _RATIO_STAGES:
                continue
            seed_norm, seed_n = _norm(params)
            ratio, counted = torch.zeros((), device=host_norm.device), torch.ones((), device=host_norm.device)
            if seed_norm is not None:
                raw = (seed_norm / seed_n**0.5) / (host_norm / host_n**0.5 + GRADIENT_EPSILON)
                usable = (seed_norm >= GRADIENT_EPSILON) & (host_norm >= GRADIENT_EPSILON)
                counted = (torch.isfinite(seed_norm) & torch.isfinite(host_norm)).float()
                ratio = torch.where(usable & (counted > 0), raw, ratio)
            zero = torch.zeros((), device=ratio.device)
            self.ratio_sum[slot.slot_id] = self.ratio_sum.get(slot.slot_id, zero) + ratio.detach()
            self.ratio_count[slot.slot_id] = self.ratio_count.get(slot.slot_id, zero) + counted

    def read(self) -> EpochTelemetry:
        """The epoch's numbers (one host read), and a fresh epoch."""
        ratio_slots, last_slots = list(self.ratio_sum), list(self.last)
        parts = [torch.zeros(1) if self.host_norm is None else self.host_norm.reshape(1).cpu()]
        parts += [torch.stack([self.ratio_sum[s], self.ratio_count[s]]).cpu() for s in ratio_slots]
        parts += [self.last[s].cpu() for s in last_slots]
        values = torch.cat(parts).double().tolist()
        ratios = {s: values[1 + 2 * i] / values[2 + 2 * i] for i, s in enumerate(ratio_slots) if values[2 + 2 * i] > 0}
        base = 1 + 2 * len(ratio_slots)
        gradients = {s: (self.collector.summarize(values[base + 6 * i: base + 6 * i + 5]),
                         values[base + 6 * i + 5] > 0) for i, s in enumerate(last_slots)}
        telemetry = EpochTelemetry(self.steps, values[0] / self.steps if self.steps else 0.0, ratios, gradients)
        self.reset()
        return telemetry

    def state_dict(self) -> dict[str, Any]:
        """The epoch's accumulators so far (a checkpoint taken mid-epoch resumes them)."""
        return {"steps": self.steps, "host_norm": self.host_norm, "ratio_sum": dict(self.ratio_sum),
                "ratio_count": dict(self.ratio_count), "last": dict(self.last)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.steps = int(state["steps"])
        self.host_norm = state["host_norm"]
        self.ratio_sum, self.ratio_count = dict(state["ratio_sum"]), dict(state["ratio_count"])
        self.last = dict(state["last"])
