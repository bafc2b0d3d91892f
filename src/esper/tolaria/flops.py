"""FLOPs of an env's forward and backward passes, measured once per model state and pass.

The FLOPs of a pass depend only on the shapes it runs on: the input's shape and the model's structure, which only a
lifecycle change alters (a seed germinates, starts training, blends in, fossilizes). Running every batch under
`FlopCounterMode` would slow training several-fold, so the first pass of each kind an env runs in a state is run
under the counter, and every later pass with the same `PassKey` adds that count. An episode's total is then a
function of its sequence of states alone: an int that reruns reproduce exactly.

Counted: the ops `FlopCounterMode` knows (matrix products, convolutions, attention, forward and backward); the
optimizers' element-wise updates are not among them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator
from typing import Any, Literal, NamedTuple

import torch
from torch.utils.flop_counter import FlopCounterMode, sdpa_backward_flop_count, sdpa_flop_count

from esper.kasmina.model import MorphogeneticModel

_aten = torch.ops.aten

SlotStructure = tuple[str, str, bool, bool] | None  # stage, blueprint, gated, alpha > 0; None: empty
PassKind = Literal["train", "recalibrate", "validate"]


class PassKey(NamedTuple):
    """Everything that decides the FLOPs of one pass: its kind, every enabled slot's structure, the input shapes,
    and for validation the ablated and probed slots."""

    kind: PassKind
    slots: tuple[SlotStructure, ...]
    shapes: tuple[tuple[int, ...], ...]
    ablate: tuple[str, ...] = ()
    probe: tuple[str, ...] = ()


def _cpu_attention(query: Any, key: Any, value: Any, *_: Any, out_shape: Any = None, **__: Any) -> int:
    return int(sdpa_flop_count(query, key, value))


def _cpu_attention_backward(grad_out: Any, query: Any, key: Any, value: Any, *_: Any, out_shape: Any = None,
                            **__: Any) -> int:
    return int(sdpa_backward_flop_count(grad_out, query, key, value))


# PyTorch has no formula for the CPU flash-attention kernels and would count them as 0; the CUDA flash kernels'
# formulas make a transformer episode cost the same on either device.
_CPU_ATTENTION = {_aten._scaled_dot_product_flash_attention_for_cpu: _cpu_attention,
                  _aten._scaled_dot_product_flash_attention_for_cpu_backward: _cpu_attention_backward}


def flop_counter() -> FlopCounterMode:
    """A silent `FlopCounterMode` that also counts attention on CPU."""
    return FlopCounterMode(display=False, custom_mapping=_CPU_ATTENTION)


def model_structure(model: MorphogeneticModel) -> tuple[SlotStructure, ...]:
    """Per enabled slot, what decides which modules a pass runs: the seed's stage (isolated, probed or blended),
    its blueprint, whether a gate blends it, and whether its alpha is nonzero (only then does validation ablate it)."""
    return tuple(None if s.state is None else
                 (s.state.stage.name, s.state.blueprint_id, s.gate is not None, s.state.alpha > 0)
                 for s in model.slots())


def train_pass(model: MorphogeneticModel, x: torch.Tensor) -> PassKey:
    """One train step: forward and backward of the model, and the incubator's of each TRAINING seed."""
    return PassKey("train", model_structure(model), (tuple(x.shape),))


def recalibration_pass(model: MorphogeneticModel, inputs: Iterable[torch.Tensor]) -> PassKey:
    """The BatchNorm recalibration forwards over the epoch's last training batches."""
    return PassKey("recalibrate", model_structure(model), tuple(tuple(x.shape) for x in inputs))


def validation_pass(model: MorphogeneticModel, x: torch.Tensor, ablate: tuple[str, ...],
                    probe: tuple[str, ...]) -> PassKey:
    """One validation batch: the full forward plus one suffix forward per ablated or probed slot."""
    return PassKey("validate", model_structure(model), (tuple(x.shape),), tuple(ablate), tuple(probe))


class FlopMeter:
    """An env's running FLOP total and the measured FLOPs of one pass per `PassKey`."""

    def __init__(self) -> None:
        self.total = 0
        self.per_pass: dict[PassKey, int] = {}

    @contextlib.contextmanager
    def count(self, key: PassKey) -> Iterator[None]:
        """Add the FLOPs of the pass the block runs: measured under the counter when `key` is new, else cached."""
        flops = self.per_pass.get(key)
        if flops is None:
            with flop_counter() as counter:
                yield
            flops = self.per_pass[key] = counter.get_total_flops()
        else:
            yield
        self.total += flops
