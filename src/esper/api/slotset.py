"""The slots of one wrapped model: a child module of the model (so `parameters()`, `state_dict()`, `.to()` and DDP
see every seed), the forward hooks that hand each named module's output to its slot, and the manifest that lets any
`load_state_dict` find the seed modules before it loads their weights."""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from esper.api.hookslot import HookSlot
from esper.api.paths import topology_of
from esper.kasmina.blueprints import BlueprintRegistry
from esper.kasmina.slot import EventCallback
from esper.kasmina.state import LifecycleConfig
from esper.leyline import CANONICAL_SLOTS, NOOP_BLUEPRINT, ActionSpace
from esper.leyline.errors import UserInputError, did_you_mean

__all__ = ["MANIFEST_FORMAT", "MANIFEST_KEY", "Activation", "SlotSet"]

MANIFEST_FORMAT = "esper-slots-v1"
MANIFEST_KEY = "manifest"
"""The state-dict entry (under the slot set's prefix) that describes the seeds, present while a seed exists."""


@dataclass(frozen=True)
class Activation:
    """What a slot's module outputs, as first seen (an example input or the first forward)."""

    shape: tuple[int, ...]
    dtype: torch.dtype
    device: torch.device

    @property
    def topology(self) -> str:
        return topology_of(self.shape, "")

    @property
    def channels(self) -> int:
        return self.shape[1] if len(self.shape) == 4 else self.shape[-1]


class SlotSet(nn.Module):
    """One `HookSlot` per named module, created once the module's output shape is known."""

    def __init__(self, targets: dict[str, nn.Module], blueprints: Sequence[str] | None,
                 registry: BlueprintRegistry) -> None:
        """`targets`: the module at each slot path, in slot order."""
        super().__init__()
        self.paths: dict[str, str] = dict(zip(CANONICAL_SLOTS, targets))
        self.targets: dict[str, nn.Module] = dict(zip(CANONICAL_SLOTS, targets.values()))  # a dict: not children
        self.blueprints = None if blueprints is None else tuple(blueprints)
        self.registry = registry
        self.lifecycle = LifecycleConfig()
        self.on_event: EventCallback | None = None
        self.activations: dict[str, Activation] = {}
        self.output_width: int | None = None  # the model output's last dimension (classes, vocabulary)
        self.register_state_dict_post_hook(_add_manifest)
        self.register_load_state_dict_pre_hook(_restore_manifest)

    # ------------------------------------------------------------------ hooks

    def on_output(self, name: str, module: nn.Module, inputs: Any, out: Any) -> Tensor:
        """Forward hook of the module at `self.paths[name]`: the slot's output in place of the module's."""
        slot = self._modules.get(name)
        if slot is None:
            if not isinstance(out, Tensor):
                raise UserInputError(f"Slot {self.paths[name]!r} outputs {type(out).__name__}: a slot needs a module "
                                     f"that returns one tensor; name another module")
            slot = self._create(name, Activation(tuple(out.shape), out.dtype, out.device))
        return slot(out)

    def on_model_output(self, module: nn.Module, inputs: Any, out: Any) -> None:
        """Forward hook of the model: its output width (a uniform guess's loss is ln of it)."""
        if self.output_width is None and isinstance(out, Tensor) and out.dim() >= 2:
            self.output_width = int(out.shape[-1])

    # ------------------------------------------------------------------ slots

    def _create(self, name: str, activation: Activation) -> HookSlot:
        path = self.paths[name]
        topology = topology_of(activation.shape, path)
        others = {self.activations[n].topology for n in self.activations}
        if others and topology not in others:
            raise UserInputError(f"Slot {path!r} outputs {activation.shape} ({topology}) but the other slots are "
                                 f"{others.pop()}: a controller grows one topology, name slots of one kind")
        self.space_for(topology)  # the blueprints the model was wrapped with must exist for this topology
        slot = HookSlot(name, activation.channels, topology, path=path, lifecycle=self.lifecycle,
                        registry=self.registry, on_event=self.on_event).to(activation.device)
        self.activations[name] = activation
        self.add_module(name, slot)
        return slot

    def bind(self, lifecycle: LifecycleConfig, on_event: EventCallback | None) -> None:
        """The lifecycle thresholds and event sink a controller grows the seeds under, for every slot."""
        self.lifecycle, self.on_event = lifecycle, on_event
        for slot in self.slots():
            slot.bind(lifecycle, on_event)

    def slots(self) -> list[HookSlot]:
        """The slots whose shapes are known, in canonical order."""
        return [s for n in CANONICAL_SLOTS if isinstance(s := self._modules.get(n), HookSlot)]

    def slot(self, name: str) -> HookSlot:
        slot = self._modules.get(name)
        if not isinstance(slot, HookSlot):
            where = f"{name} ({self.paths[name]})" if name in self.paths else name
            raise UserInputError(f"Slot {where} has no known shape yet: run a forward first, or pass example_input= "
                                 f"to esper.wrap")
        return slot

    def missing(self) -> list[str]:
        """Paths of slots whose module has not run yet."""
        return [path for name, path in self.paths.items() if name not in self._modules]

    @property
    def topology(self) -> str:
        if self.missing():
            raise UserInputError(f"Slot module(s) {self.missing()} never ran in a forward, so their shapes are "
                                 f"unknown: pass example_input= to esper.wrap, or run one forward first")
        return self.slots()[0].topology

    def space_for(self, topology: str) -> ActionSpace:
        """The action space of the model: the registry's blueprints of its topology, or the ones it was wrapped
        with (in the registry's order, so that a policy's head indices keep their meaning)."""
        full = self.registry.action_space(topology)
        if self.blueprints is None:
            return full
        buildable = self.registry.names(topology)
        unknown = [b for b in self.blueprints if b not in buildable]
        if unknown:
            raise UserInputError(f"blueprints={list(self.blueprints)}: {unknown[0]!r}"
                                 f"{did_you_mean(unknown[0], buildable)} is not a {topology} blueprint (slots of "
                                 f"shape {'(B, C, H, W)' if topology == 'cnn' else '(B, T, D)'} take {list(buildable)}"
                                 f"; a plugin's blueprints need its module imported first)")
        head = tuple(b for b in full.head[1:] if b in self.blueprints)
        if not head:
            raise UserInputError(f"blueprints={list(self.blueprints)} holds none of the {topology} blueprints a policy "
                                 f"chooses from ({list(full.head[1:])}): add one")
        return ActionSpace(topology, (NOOP_BLUEPRINT, *head), tuple(b for b in full.others if b in self.blueprints))

    @property
    def action_space(self) -> ActionSpace:
        return self.space_for(self.topology)

    @property
    def random_guess_loss(self) -> float | None:
        return None if self.output_width is None or self.output_width < 2 else math.log(self.output_width)

    def device_dtype(self) -> tuple[torch.device, torch.dtype]:
        """Where and in what precision seeds are built: those of the first slot module with parameters (an
        activation's dtype may be autocast's), else the first activation's device in the default dtype."""
        for module in self.targets.values():
            param = next(module.parameters(), None)
            if param is not None:
                return param.device, param.dtype
        device = next(iter(self.activations.values())).device if self.activations else torch.device("cpu")
        return device, torch.get_default_dtype()

    def seed_parameters(self) -> Iterator[nn.Parameter]:
        for slot in self.slots():
            yield from slot.seed_parameters()

    # ------------------------------------------------------------------ manifest

    def manifest(self) -> dict[str, Any]:
        """The slots and their seeds in plain values (no weights): enough to rebuild every seed module."""
        slots = {name: {"path": self.paths[name], "shape": list(a.shape), "dtype": str(a.dtype).removeprefix("torch.")}
                 for name, a in self.activations.items()}
        seeds = {}
        for slot in self.slots():
            if slot.state is not None:
                spec = self.registry.get(slot.topology, slot.state.blueprint_id)
                seeds[slot.slot_id] = {"seed_id": slot.state.seed_id, "blueprint_id": slot.state.blueprint_id,
                                       "blueprint_module": spec.factory.__module__, "gated": slot.gate is not None,
                                       "lifecycle": slot.state.to_dict()}
        return {"format": MANIFEST_FORMAT, "slots": slots, "seeds": seeds}

    def restore(self, manifest: dict[str, Any]) -> None:
        """Make the slots hold exactly the manifest's seeds (building modules that are missing, keeping those that
        match), so that a `load_state_dict` of the weights finds every module it names."""
        if manifest.get("format") != MANIFEST_FORMAT:
            raise UserInputError(f"Not an esper slot manifest (format {manifest.get('format')!r}, expected "
                                 f"{MANIFEST_FORMAT!r}): load a state saved from a model esper.wrap grew")
        for name, recorded in manifest["slots"].items():
            if self.paths.get(name) != recorded["path"]:
                raise UserInputError(f"The saved model grew slot {name} at {recorded['path']!r}, this one wraps "
                                     f"{self.paths.get(name)!r}: wrap the same module paths as when it was saved")
            if name not in self._modules:
                dtype = getattr(torch, recorded["dtype"])
                self._create(name, Activation(tuple(recorded["shape"]), dtype, self.device_dtype()[0]))
        device, dtype = self.device_dtype()
        for slot in self.slots():
            entry = manifest["seeds"].get(slot.slot_id)
            if entry is None:
                slot.clear()
                continue
            if entry["blueprint_id"] not in self.registry.names(slot.topology):
                module = entry["blueprint_module"]
                raise UserInputError(f"The saved seed in slot {slot.slot_id} ({slot.path}) is blueprint "
                                     f"{entry['blueprint_id']!r} ({slot.topology}), which is not registered here: "
                                     f"import {module} before loading (on the command line: --plugin {module})")
            slot.restore(entry, device=device, dtype=dtype)


def _add_manifest(module: nn.Module, state_dict: dict[str, Any], prefix: str, local_metadata: Any) -> None:
    assert isinstance(module, SlotSet)
    manifest = module.manifest()
    if manifest["seeds"]:
        state_dict[prefix + MANIFEST_KEY] = manifest


def _restore_manifest(module: nn.Module, state_dict: dict[str, Any], prefix: str, *args: Any) -> None:
    assert isinstance(module, SlotSet)
    manifest = state_dict.pop(prefix + MANIFEST_KEY, None)
    if manifest is not None:
        module.restore(manifest)
