"""What each seed is worth, measured with the user's own evaluation.

A TRAINING seed's probe is the score with its output in place of its slot's, minus the model's; a blended seed's
counterfactual contribution is the model's score minus the score with its α set to 0. Both come from one call of
`evaluate()` per measured seed plus one for the model itself, all under the same conditions: no gradients, the
random stream left as it was, and every BatchNorm layer normalizing with the statistics of the batch at hand. Running
estimates describe the model as it is; a counterfactual shifts the activations, and judged through the old estimates
removing a blended seed looks like losing tens of points on small CNNs, a normalization artefact rather than the
seed's worth (esper's own hosts measure the same way).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from esper.api.slotset import SlotSet
from esper.leyline import SeedStage
from esper.leyline.errors import UserInputError

__all__ = ["Contributions", "Evaluate", "measure_contributions", "score"]

Evaluate = Callable[[], float]
"""The user's validation: the model's accuracy in percent (0–100) on held-out data."""


@dataclass(frozen=True)
class Contributions:
    """Per slot, in percentage points: the counterfactual of each blended seed and the probe of each TRAINING one."""

    counterfactual: dict[str, float] = field(default_factory=dict)
    probe: dict[str, float] = field(default_factory=dict)


def score(evaluate: Evaluate) -> float:
    """`evaluate()` as a float, refusing what cannot be an accuracy in percent."""
    value = float(evaluate())
    if not (math.isfinite(value) and 0.0 <= value <= 100.0):
        raise UserInputError(f"evaluate() returned {value}; it must return the validation accuracy in percent "
                             f"(0–100): multiply a fraction by 100")
    return value


@contextlib.contextmanager
def batch_statistics(model: nn.Module) -> Iterator[None]:
    """Every BatchNorm layer of `model` normalizes with its batch's statistics and leaves its running estimates alone
    inside the block, whatever train/eval switch the evaluation makes (each layer is switched just for its call)."""
    norms = [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    saved: dict[nn.Module, tuple[bool, bool]] = {}

    def before(module: nn.modules.batchnorm._BatchNorm, _: Any) -> None:
        saved[module] = (module.training, module.track_running_stats)
        module.training, module.track_running_stats = True, False

    def after(module: nn.modules.batchnorm._BatchNorm, _: Any, __: Any) -> None:
        module.training, module.track_running_stats = saved.pop(module)

    handles = [h for m in norms for h in (m.register_forward_pre_hook(before), m.register_forward_hook(after))]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


@contextlib.contextmanager
def _measuring(model: nn.Module) -> Iterator[None]:
    """No gradients, batch statistics, and the model's modes and the random stream as they were afterwards."""
    modes = {m: m.training for m in model.modules()}
    devices = [p.device for p in model.parameters() if p.device.type == "cuda"][:1]
    try:
        with torch.no_grad(), torch.random.fork_rng(devices=devices), batch_statistics(model):
            yield
    finally:
        for module, training in modes.items():
            module.training = training


def measure_contributions(model: nn.Module, slot_set: SlotSet, evaluate: Evaluate) -> Contributions:
    """Probe every TRAINING seed and ablate every seed with α > 0 (nothing to measure: no evaluation at all)."""
    probed = [s for s in slot_set.slots() if s.state is not None and s.state.stage == SeedStage.TRAINING]
    ablated = [s for s in slot_set.slots() if s.state is not None and s.state.alpha > 0]
    if not probed and not ablated:
        return Contributions()
    with _measuring(model):
        reference = score(evaluate)
        counterfactual = {}
        for slot in ablated:
            with slot.ablated():
                counterfactual[slot.slot_id] = reference - score(evaluate)
        probe = {}
        for slot in probed:
            with slot.probed():
                probe[slot.slot_id] = score(evaluate) - reference
    return Contributions(counterfactual, probe)
