"""One host read for many device values: an epoch's measurements of every env, copied to the host at once.

On an accelerator each read of a device value makes the host wait for every kernel queued before it (see
`esper.execution.syncs`). Envs accumulate their epoch's sums on the device; each queues its tensors here with the
function that turns their values into its statistics, and `read` copies everything in one transfer per device,
then hands each function its values. Values travel as float64, which holds float32, float16, bfloat16 and integers
below 2**53 exactly: a statistic built from this read equals the one a read of its own tensors would give.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import torch

__all__ = ["Deferred", "Readout", "read_alone"]

T = TypeVar("T")
S = TypeVar("S")


class Deferred(Generic[T]):
    """A value built from device values: it exists once the `Readout` it was queued on is read."""

    def __init__(self) -> None:
        self._value: T | None = None
        self._ready = False

    def resolve(self, value: T) -> None:
        self._value, self._ready = value, True

    @property
    def value(self) -> T:
        if not self._ready:
            raise RuntimeError("The value is not read yet: call read() on the Readout it was queued on")
        return self._value  # type: ignore[return-value]


@dataclass
class _Queued:
    tensors: list[torch.Tensor]
    build: Callable[[list[float]], Any]
    result: Deferred[Any]


class Readout:
    """Device tensors queued for one host transfer per device, each group with the function that consumes it."""

    def __init__(self) -> None:
        self._queued: list[_Queued] = []

    def queue(self, tensors: Sequence[torch.Tensor], build: Callable[[list[float]], T]) -> Deferred[T]:
        """`build(values)` runs at `read`, on the tensors' elements flattened in order (an empty list for none)."""
        result: Deferred[T] = Deferred()
        self._queued.append(_Queued([t.detach() for t in tensors], build, result))
        return result

    def read(self) -> None:
        """Copy every queued value to the host (one transfer per device) and build the deferred values in the order
        they were queued."""
        queued, self._queued = self._queued, []
        flat = [t.reshape(-1) for q in queued for t in q.tensors if t.numel()]  # an empty tensor reads nothing
        values: dict[torch.device, list[float]] = {}
        for device in dict.fromkeys(t.device for t in flat):
            values[device] = torch.cat([t.to(torch.float64) for t in flat if t.device == device]).tolist()
        taken = dict.fromkeys(values, 0)
        for q in queued:
            own: list[float] = []
            for t in q.tensors:
                if not t.numel():
                    continue
                start, n = taken[t.device], t.numel()
                own += values[t.device][start:start + n]
                taken[t.device] = start + n
            q.result.resolve(q.build(own))


def read_alone(queue: Callable[[S, Readout], Deferred[T]], subject: S) -> T:
    """What `queue(subject, readout)` defers, read at once on a readout of its own: one host read."""
    readout = Readout()
    value = queue(subject, readout)
    readout.read()
    return value.value
