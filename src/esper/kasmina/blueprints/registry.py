"""Blueprint catalog: what a seed can be, per topology, with exact parameter counts.

`register_blueprint` adds a blueprint to the default registry in the style of timm's `register_model`: the built-in
catalogs (`cnn.py`, `transformer.py`) call it, and so does a user's plugin module (`--plugin MODULE`). The action
space of a topology (its policy blueprint head, and every size that follows from it) is derived from what is
registered, so a new blueprint needs no other file changed. `BlueprintRegistry` stays a plain class, so tests can
build their own.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

import torch
from torch import nn

from esper.leyline.actions import NOOP_BLUEPRINT, ActionSpace
from esper.leyline.errors import UserInputError, did_you_mean

__all__ = ["DEFAULT_REGISTRY", "BlueprintRegistry", "BlueprintSpec", "check_blueprint", "register_blueprint"]


@dataclass(frozen=True)
class BlueprintSpec:
    """A seed architecture. `param_count` is a closed form so rent and features never instantiate modules;
    `in_head`: learned policies may choose it (it is part of the topology's blueprint head)."""

    name: str
    topology: str
    factory: Callable[[int], nn.Module]
    param_count: Callable[[int], int]
    description: str
    in_head: bool


class BlueprintRegistry:
    """Blueprints keyed by (topology, name), in registration order."""

    def __init__(self) -> None:
        self._specs: dict[tuple[str, str], BlueprintSpec] = {}

    def register(self, spec: BlueprintSpec) -> None:
        key = (spec.topology, spec.name)
        if key in self._specs:
            raise UserInputError(f"Blueprint '{spec.name}' is already registered for topology '{spec.topology}': "
                                 f"give the new one another name")
        if not spec.name or not spec.name.isidentifier():
            raise UserInputError(f"Blueprint name {spec.name!r} is not a plain identifier (letters, digits, _): "
                                 f"controller specs such as fixed:NAME@SLOT must be able to name it")
        self._specs[key] = spec

    def get(self, topology: str, name: str) -> BlueprintSpec:
        spec = self._specs.get((topology, name))
        if spec is None:
            available = sorted(n for t, n in self._specs if t == topology)
            raise UserInputError(f"Unknown blueprint '{name}'{did_you_mean(name, available)} for topology "
                                 f"'{topology}'. Available: {available} "
                                 f"(a plugin's blueprints need --plugin MODULE)")
        return spec

    def create(self, topology: str, name: str, channels: int) -> nn.Module:
        return self.get(topology, name).factory(channels)

    def topologies(self) -> tuple[str, ...]:
        return tuple(sorted({t for t, _ in self._specs}))

    def list_for_topology(self, topology: str) -> list[BlueprintSpec]:
        """Specs of a topology, smallest first (by parameter count at 64 channels, then name)."""
        specs = self._registered(topology)
        return sorted(specs, key=lambda s: (s.param_count(64), s.name))

    def names(self, topology: str) -> tuple[str, ...]:
        """Blueprint names of a topology, in `list_for_topology` order."""
        return tuple(s.name for s in self.list_for_topology(topology))

    def action_space(self, topology: str) -> ActionSpace:
        """The topology's action space: its head is noop, then the in-head blueprints in registration order (so a
        plugin's blueprint extends the head and leaves every earlier index where it was)."""
        specs = self._registered(topology)
        head = tuple(s.name for s in specs if s.in_head and s.name != NOOP_BLUEPRINT)
        others = tuple(s.name for s in specs if not s.in_head and s.name != NOOP_BLUEPRINT)
        return ActionSpace(topology, (NOOP_BLUEPRINT, *head), others)

    def _registered(self, topology: str) -> list[BlueprintSpec]:
        specs = [s for (t, _), s in self._specs.items() if t == topology]
        if not specs:
            raise UserInputError(f"Unknown topology '{topology}'. Available: {list(self.topologies())}")
        return specs


_PROBE_WIDTH = 16
_PROBE_INPUTS = {"cnn": (2, _PROBE_WIDTH, 4, 4), "transformer": (2, 3, _PROBE_WIDTH)}
"""A small input of each topology's activation shape, (B, C, H, W) and (B, T, D), to try a new blueprint on."""


def check_blueprint(spec: BlueprintSpec) -> None:
    """Build the blueprint once at a small width (leaving every random generator as it was) and refuse it when its
    parameter count is not `param_count`'s or it changes its input's shape: either would corrupt every parameter
    cost and feature computed from it, or fail deep inside a run."""
    with torch.random.fork_rng(devices=[]):
        module = spec.factory(_PROBE_WIDTH)
        built = sum(p.numel() for p in module.parameters())
        if built != spec.param_count(_PROBE_WIDTH):
            raise UserInputError(f"Blueprint '{spec.name}': param_count({_PROBE_WIDTH}) is "
                                 f"{spec.param_count(_PROBE_WIDTH)} but the module has {built} parameters; make "
                                 f"param_count the module's exact parameter count")
        shape = _PROBE_INPUTS.get(spec.topology)
        if shape is not None:
            with torch.no_grad():
                out = module(torch.randn(shape))
            if tuple(out.shape) != shape:
                raise UserInputError(f"Blueprint '{spec.name}' turns a {spec.topology} activation of shape {shape} "
                                     f"into {tuple(out.shape)}; a seed must keep its input's shape")


DEFAULT_REGISTRY = BlueprintRegistry()
"""The registry every model, env and command builds seeds from; `register_blueprint` adds to it."""

Factory = TypeVar("Factory", bound=Callable[[int], nn.Module])


def register_blueprint(name: str, *, topology: str, param_count: Callable[[int], int], description: str,
                       in_head: bool = True) -> Callable[[Factory], Factory]:
    """Decorator: register `factory(channels) -> nn.Module` (a class or a function) as blueprint `name` of
    `topology` in the default registry.

    The module must preserve its input's shape ((B, C, H, W) for `cnn`, (B, T, D) for `transformer`) and
    `param_count(channels)` must equal its parameter count (the contract tests check both for every registered
    blueprint). With `in_head` (the default) learned policies may choose it, which extends the topology's action
    space; `fixed:`, `grow:` and the scripted rules can build every registered blueprint.
    """

    def decorate(factory: Factory) -> Factory:
        spec = BlueprintSpec(name=name, topology=topology, factory=factory, param_count=param_count,
                             description=description, in_head=in_head)
        check_blueprint(spec)
        DEFAULT_REGISTRY.register(spec)
        return factory

    return decorate
