"""A host with blueprint modules built in from the start: the network the `fixed:` baseline trains.

Growth has to beat simply building the right module in at epoch 0. Here each module is an ordinary layer after its
segment (no lifecycle, no isolation, no alpha schedule), combined with the host activation by the very op a fully
blended seed's slot applies, so the only difference from a grown seed is when the module joined the network.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import cast

import torch
from torch import Tensor, nn

from esper.kasmina.blueprints import DEFAULT_REGISTRY, BlueprintRegistry
from esper.kasmina.hosts import HostProtocol
from esper.kasmina.isolation import blend_lerp
from esper.leyline import CANONICAL_SLOTS
from esper.leyline.errors import UserInputError
from esper.leyline.seeding import derive_seed

__all__ = ["FixedModulesHost", "build_fixed_host"]

# A fully blended seed's alpha. Its slot still computes h + 1·(s − h), which is not always s in floating point, so
# the same op keeps a fixed module bit-identical to a grown seed holding the same weights.
_FULLY_BLENDED = 1.0


class FixedModulesHost(nn.Module):
    """`host` with `modules[segment]` applied to the activation at each named segment.

    The activation at a segment includes its module, so `MorphogeneticModel`'s slots (and the counterfactuals that
    restart from a cached activation) see the network as it is. The modules are plain submodules: host parameters,
    trained by the host optimizer and counted in the host's parameter count.
    """

    def __init__(self, host: nn.Module, modules: Mapping[str, nn.Module]) -> None:
        super().__init__()
        _segment_channels(host, modules)
        self.inner = host
        self.fixed = nn.ModuleDict({s: modules[s] for s in CANONICAL_SLOTS if s in modules})

    @property
    def _host(self) -> HostProtocol:
        return cast(HostProtocol, self.inner)

    @property
    def topology(self) -> str:
        return self._host.topology

    @property
    def segment_channels(self) -> Mapping[str, int]:
        return self._host.segment_channels

    def _position(self, segment: str) -> int:
        if segment not in CANONICAL_SLOTS:
            raise ValueError(f"Unknown segment '{segment}'. Available: {list(CANONICAL_SLOTS)}")
        return CANONICAL_SLOTS.index(segment)

    def _run(self, h: Tensor, from_segment: str | None, stops: Sequence[str]) -> Tensor:
        """From `from_segment`'s activation (None: the input) through each stop, applying its module if it has one."""
        for segment in stops:
            h = self._host.forward_to_segment(segment, h, from_segment=from_segment)
            if segment in self.fixed:
                h = blend_lerp(h, self.fixed[segment](h), _FULLY_BLENDED)
            from_segment = segment
        return h

    def forward(self, x: Tensor) -> Tensor:
        stops = list(self.fixed)
        if not stops:
            return self._host.forward(x)
        return self._host.forward_from_segment(stops[-1], self._run(x, None, stops))

    def forward_to_segment(self, segment: str, x: Tensor, from_segment: str | None = None) -> Tensor:
        start = 0 if from_segment is None else self._position(from_segment) + 1
        end = self._position(segment) + 1
        if start > end:
            raise ValueError(f"from_segment '{from_segment}' lies after segment '{segment}'")
        stops = [s for s in CANONICAL_SLOTS[start:end] if s in self.fixed or s == segment]
        return self._run(x, from_segment, stops)

    def forward_from_segment(self, segment: str, h: Tensor) -> Tensor:
        stops = [s for s in CANONICAL_SLOTS[self._position(segment) + 1:] if s in self.fixed]
        return self._host.forward_from_segment(stops[-1] if stops else segment, self._run(h, segment, stops))


def build_fixed_host(host: nn.Module, fixed_modules: Sequence[tuple[str, str]], *, seed: int,
                     registry: BlueprintRegistry | None = None) -> FixedModulesHost:
    """`host` with a `blueprint` module built in after each `(segment, blueprint)`, sized to that segment.

    Each module is initialized from a stream of its own derived from (seed, segment), as a germinated seed is: the
    host's initialization and the caller's RNG stay untouched (the host is bit-identical to a static one and dropout
    draws the same numbers), and a module's weights do not depend on which other modules are built in. Modules are
    created on the CPU like a fresh host; move the result with `.to()`.
    """
    segments = [segment for segment, _ in fixed_modules]
    if len(set(segments)) != len(segments):
        raise UserInputError(f"A segment holds one fixed module, got {list(fixed_modules)}")
    channels = _segment_channels(host, segments)
    registry = registry if registry is not None else DEFAULT_REGISTRY
    modules: dict[str, nn.Module] = {}
    for segment, blueprint in fixed_modules:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(derive_seed(seed, "fixed", segment))
            modules[segment] = registry.create(cast(HostProtocol, host).topology, blueprint, channels[segment])
    return FixedModulesHost(host, modules)


def _segment_channels(host: nn.Module, segments: Iterable[str]) -> Mapping[str, int]:
    """The host's channels per segment, once it is known to be a segmented host offering every one of `segments`."""
    if not isinstance(host, HostProtocol):
        raise TypeError(f"{type(host).__name__} does not implement HostProtocol (segmented forward)")
    channels = host.segment_channels
    unknown = sorted(set(segments) - set(channels))
    if unknown:
        raise UserInputError(f"Unknown segment(s) {unknown} for fixed modules. Available: {list(channels)}")
    return channels
