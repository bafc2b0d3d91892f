"""`esper.wrap` and `esper.slots`: injection points on any `nn.Module`, in place."""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from esper.api.paths import resolve_slot_paths
from esper.api.slotset import SlotSet
from esper.kasmina.blueprints import DEFAULT_REGISTRY
from esper.leyline.errors import UserInputError

__all__ = ["SLOTS_ATTRIBUTE", "SlotInfo", "slot_set_of", "slots", "wrap"]

SLOTS_ATTRIBUTE = "esper_slots"
"""The child module of a wrapped model that holds its slots (and so its seeds' parameters and state)."""
_CONTAINERS = (nn.Sequential, nn.ModuleList, nn.ModuleDict)


@dataclass(frozen=True)
class SlotInfo:
    """One slot: its canonical name, module path, the output it wraps (None until seen), and its seed."""

    name: str
    path: str
    shape: tuple[int, ...] | None
    dtype: torch.dtype | None
    device: torch.device | None
    topology: str | None
    blueprint: str | None
    stage: str | None
    alpha: float


def wrap(model: nn.Module, slots: list[str] | tuple[str, ...], blueprints: list[str] | tuple[str, ...] | None = None,
         *, example_input: Tensor | tuple[Tensor, ...] | None = None) -> nn.Module:
    """Give `model` a slot after each module `slots` names (a path, a dotted suffix or a regex; at most three, named
    early, mid, late in module order), in place, and return it. Without seeds the model computes exactly what it
    did. `blueprints` limits what may grow (default: every blueprint of the slots' topology, which follows from the
    output shape: (B, C, H, W) → cnn, (B, T, D) → transformer). Shapes come from `example_input`, run once in eval
    mode without gradients, or else from the first forward."""
    if isinstance(model, _CONTAINERS):
        raise UserInputError(f"esper.wrap cannot add its slots to a bare {type(model).__name__} (its forward would "
                             f"run them as a layer): wrap a module of your own that holds it, e.g. "
                             f"class Net(nn.Module) with self.body = your {type(model).__name__}")
    if isinstance(getattr(model, SLOTS_ATTRIBUTE, None), SlotSet):
        raise UserInputError(f"{type(model).__name__} is wrapped already (esper.slots(model) lists its slots)")
    if isinstance(blueprints, str):
        raise UserInputError(f"blueprints must be a list of names, got the string {blueprints!r}: write "
                             f"blueprints=[{blueprints!r}]")
    modules = dict(model.named_modules())
    targets = {path: modules[path] for path in resolve_slot_paths(model, slots)}
    slot_set = SlotSet(targets, blueprints, DEFAULT_REGISTRY)
    model.add_module(SLOTS_ATTRIBUTE, slot_set)
    for name, module in slot_set.targets.items():
        module.register_forward_hook(functools.partial(slot_set.on_output, name))
    model.register_forward_hook(slot_set.on_model_output)
    if example_input is not None:
        _run_example(model, example_input)
    return model


def _run_example(model: nn.Module, example: Tensor | tuple[Tensor, ...]) -> None:
    """One forward in eval mode without gradients, the random stream restored (no statistic or draw changes)."""
    inputs = example if isinstance(example, tuple) else (example,)
    modes = {m: m.training for m in model.modules()}
    model.eval()
    try:
        with torch.no_grad(), torch.random.fork_rng(devices=[x.device for x in inputs if x.device.type == "cuda"]):
            model(*inputs)
    finally:
        for module, training in modes.items():
            module.training = training
    if slot_set_of(model).missing():
        raise UserInputError(f"example_input did not run the slot module(s) {slot_set_of(model).missing()}: name "
                             f"modules the forward calls")


def slot_set_of(model: nn.Module) -> SlotSet:
    """The slots of a wrapped model, found on it or on the one module inside that was wrapped (a DDP or Lightning
    module holding it)."""
    own = getattr(model, SLOTS_ATTRIBUTE, None)
    if isinstance(own, SlotSet):
        return own
    found = [m for m in model.modules() if isinstance(m, SlotSet)]
    if not found:
        raise UserInputError(f"{type(model).__name__} is not wrapped: call esper.wrap(model, slots=[...]) first")
    if len(found) > 1:
        raise UserInputError(f"{type(model).__name__} holds {len(found)} wrapped models: pass the one to grow")
    return found[0]


def slots(model: nn.Module) -> list[SlotInfo]:
    """Every slot of a wrapped model: name, path, output shape, dtype and device (None before the first forward),
    topology, and its seed's blueprint, stage and α."""
    slot_set = slot_set_of(model)
    infos = []
    for name, path in slot_set.paths.items():
        activation = slot_set.activations.get(name)
        slot = slot_set.slot(name) if activation is not None else None
        state = None if slot is None else slot.state
        infos.append(SlotInfo(name=name, path=path, shape=None if activation is None else activation.shape,
                              dtype=None if activation is None else activation.dtype,
                              device=None if activation is None else activation.device,
                              topology=None if slot is None else slot.topology,
                              blueprint=None if state is None else state.blueprint_id,
                              stage=None if state is None else state.stage.name,
                              alpha=0.0 if state is None else state.alpha))
    return infos
