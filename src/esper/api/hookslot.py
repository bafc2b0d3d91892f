"""A slot behind a forward hook: kasmina's `SeedSlot` lifecycle, with the forward a model esper does not own needs.

esper's own hosts run their forward segment by segment, so a TRAINING seed can be trained on the loss of a second
forward with its output in place (the incubator). A forward hook sees one module's output and nothing after it, so
here a TRAINING seed learns from the gradient the model's own backward brings to the slot: the forward returns a
copy of the host's activation bit for bit, and the backward hands the slot's incoming gradient to the host unchanged
and, as well, to the seed's output. That is the gradient of the loss with the seed blended in at an infinitesimal
α, the start of the ramp it is about to blend in on; the host's outputs and gradients stay exactly the host's.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
from torch import Tensor

from esper.kasmina.blending import GatedBlend
from esper.kasmina.isolation import blend_lerp
from esper.kasmina.slot import EventCallback, SeedSlot
from esper.kasmina.state import LifecycleConfig, QualityGates, SeedState
from esper.leyline import GateResult, SeedStage

__all__ = ["HookSlot"]

_BLENDED = frozenset({SeedStage.BLENDING, SeedStage.PROBATIONARY, SeedStage.FOSSILIZED})


class _ShareGradient(torch.autograd.Function):
    """Forward: a copy of the host activation `h`. Backward: the gradient at the slot, to `h` and to the seed's
    output `s` alike (`s` never entered the forward, so nothing of it reaches the host)."""

    @staticmethod
    def forward(ctx: Any, h: Tensor, s: Tensor) -> Tensor:
        # A copy, not `h` itself: a module after the slot may work in place (ReLU(inplace=True)), which would
        # overwrite the seed's saved input, and `h` is that input.
        return h.clone()

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, Tensor]:
        return grad, grad


def _own_random_stream(device: torch.device) -> contextlib.AbstractContextManager[Any]:
    """The global random stream as it was after the block: a TRAINING seed that draws random numbers (a plugin's
    dropout) must not shift the host's draws. Under `torch.compile` the block runs as it is (no blueprint of esper's
    draws any)."""
    if torch.compiler.is_compiling():
        return contextlib.nullcontext()
    return torch.random.fork_rng(devices=[device] if device.type == "cuda" else [])


class HookSlot(SeedSlot):
    """A `SeedSlot` at a module path. α lives in the `blend_weight` buffer, kept equal to the lifecycle's α by every
    lifecycle method: a buffer, so that measuring a seed with α = 0, or the ramp moving α, changes a tensor's value
    and never a compiled graph."""

    blend_weight: Tensor

    def __init__(self, slot_id: str, channels: int, topology: str, *, path: str, **slot: Any) -> None:
        super().__init__(slot_id, channels, topology, **slot)
        self.path = path
        self.probing = False  # a probe: the TRAINING seed's output in place of the slot's
        self.register_buffer("blend_weight", torch.zeros(()), persistent=False)

    def forward(self, h: Tensor) -> Tensor:
        state, seed = self.state, self.seed
        if state is None or seed is None:
            return h
        if state.stage == SeedStage.TRAINING:
            if self.probing:
                return seed(h).to(h.dtype)
            if not torch.is_grad_enabled():
                return h
            with _own_random_stream(h.device):
                s = seed(h.detach()).to(h.dtype)
            return _ShareGradient.apply(h, s)
        if state.stage in _BLENDED:
            weight: Tensor = self.blend_weight if self.gate is None else self.blend_weight * self.gate(h)
            return blend_lerp(h, seed(h).to(h.dtype), weight)
        return h

    def bind(self, lifecycle: LifecycleConfig, on_event: EventCallback | None) -> None:
        """Grow under `lifecycle`'s thresholds, reporting events to `on_event` (a controller's)."""
        self.lifecycle, self.gates, self.on_event = lifecycle, QualityGates(lifecycle), on_event

    # ------------------------------------------------------------------ measurement

    @contextlib.contextmanager
    def ablated(self) -> Iterator[None]:
        """α = 0 inside the block: the model as if the seed were gone."""
        with torch.no_grad():
            self.blend_weight.zero_()
        try:
            yield
        finally:
            self._sync_weight()

    @contextlib.contextmanager
    def probed(self) -> Iterator[None]:
        """The TRAINING seed's output in place of the slot's inside the block."""
        self.probing = True
        try:
            yield
        finally:
            self.probing = False

    # ------------------------------------------------------------------ lifecycle, α kept in the buffer

    def _sync_weight(self) -> None:
        with torch.no_grad():
            self.blend_weight.fill_(self.alpha)

    def germinate(self, blueprint_id: str, seed_id: str, **kwargs: Any) -> SeedState:
        state = super().germinate(blueprint_id, seed_id, **kwargs)
        self._sync_weight()
        return state

    def step_epoch(self, epoch: int) -> list[Any]:
        changes = super().step_epoch(epoch)
        self._sync_weight()
        return changes

    def fossilize(self, epoch: int) -> GateResult:
        result = super().fossilize(epoch)
        self._sync_weight()
        return result

    def clear(self) -> None:
        super().clear()
        self._sync_weight()

    def restore(self, entry: dict[str, Any], *, device: torch.device, dtype: torch.dtype) -> None:
        """Hold the seed a manifest entry describes (`SlotSet.manifest`): its modules are kept when the slot already
        holds that seed (their parameters stay those an optimizer knows), else built anew; weights are not part of a
        manifest, the model's state dict loads them."""
        same = (self.state is not None and self.seed is not None and self.state.seed_id == entry["seed_id"]
                and self.state.blueprint_id == entry["blueprint_id"] and (self.gate is not None) == entry["gated"])
        if not same:
            with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
                seed = self.registry.create(self.topology, entry["blueprint_id"], self.channels)
                gate = GatedBlend(self.channels, self.topology) if entry["gated"] else None
            self.seed = seed.to(device=device, dtype=dtype)
            self.gate = None if gate is None else gate.to(device=device, dtype=dtype)
        self.state = SeedState.from_dict(entry["lifecycle"])
        self._sync_weight()
