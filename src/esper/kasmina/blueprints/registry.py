"""Blueprint catalog: what a seed can be, per topology, with exact parameter counts.

The registry is a plain instance so tests and experiments can build their own; the package keeps one default.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from torch import nn

from esper.leyline.errors import UserInputError


@dataclass(frozen=True)
class BlueprintSpec:
    """A seed architecture. `param_count` is a closed form so rent and features never instantiate modules."""

    name: str
    topology: str
    factory: Callable[[int], nn.Module]
    param_count: Callable[[int], int]
    description: str
    in_head: bool


class BlueprintRegistry:
    """Blueprints keyed by (topology, name)."""

    def __init__(self) -> None:
        self._specs: dict[tuple[str, str], BlueprintSpec] = {}

    def register(self, spec: BlueprintSpec) -> None:
        key = (spec.topology, spec.name)
        if key in self._specs:
            raise UserInputError(f"Blueprint '{spec.name}' is already registered for topology '{spec.topology}'")
        self._specs[key] = spec

    def get(self, topology: str, name: str) -> BlueprintSpec:
        spec = self._specs.get((topology, name))
        if spec is None:
            available = sorted(n for t, n in self._specs if t == topology)
            raise UserInputError(f"Unknown blueprint '{name}' for topology '{topology}'. Available: {available}")
        return spec

    def create(self, topology: str, name: str, channels: int) -> nn.Module:
        return self.get(topology, name).factory(channels)

    def topologies(self) -> tuple[str, ...]:
        return tuple(sorted({t for t, _ in self._specs}))

    def list_for_topology(self, topology: str) -> list[BlueprintSpec]:
        """Specs of a topology, smallest first (by parameter count at 64 channels, then name)."""
        specs = [s for (t, _), s in self._specs.items() if t == topology]
        if not specs:
            raise UserInputError(f"Unknown topology '{topology}'. Available: {list(self.topologies())}")
        return sorted(specs, key=lambda s: (s.param_count(64), s.name))

    def names(self, topology: str) -> tuple[str, ...]:
        """Blueprint names of a topology, in `list_for_topology` order."""
        return tuple(s.name for s in self.list_for_topology(topology))
