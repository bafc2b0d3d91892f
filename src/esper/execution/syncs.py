"""Counting the host reads an accelerator would wait for, on any device, CPU included.

Reading a device tensor's value on the host (`.item()`, `float(t)`, `bool(t)`, `int(t)`, `.tolist()`, `.cpu()`,
`.numpy()`) makes the host wait until every kernel queued before it has run, and so do the ops whose output size
depends on the data (`nonzero`, boolean-mask indexing, `masked_select`, `unique`, ...): the host needs the size before
it can allocate. Each such wait leaves a GPU idle while the host catches up, and several envs time-slicing one GPU
multiply the idle time. On a CPU nothing waits, so nothing shows; `SyncCounter` counts the same calls there, so a
test on any machine can hold the number of synchronizations an epoch would make on a GPU.

Two interception layers, because CPU tensors skip the dispatcher where a GPU tensor would not: `.tolist()`,
`.numpy()`, `.cpu()` and `.to("cpu")` of a CPU tensor never reach an aten op, so they are caught as Python calls
(`TorchFunctionMode`); everything C++ reads on the host goes through an aten op (`item`, `float`, `bool` and `int`
become `aten._local_scalar_dense`), caught by a `TorchDispatchMode`. A call counted at the Python layer is not
counted again by the aten ops it runs. Copies to an env's device (`.to(device)`) are not reads: on a GPU they go
the other way.

Optimizer step counters are host tensors on every device (`torch.optim` keeps `step` on the CPU unless
`capturable`), so the reads `torch.optim` makes of them are not synchronizations and are not counted.
"""

from __future__ import annotations

import contextlib
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from types import FrameType, TracebackType
from typing import Any

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

__all__ = ["SyncCounter"]

_aten = torch.ops.aten

# Aten ops that always read device memory on the host: a scalar's value, or an output size the data decides.
_READING_OPS = frozenset({
    _aten._local_scalar_dense.default,
    _aten.nonzero.default,
    _aten.masked_select.default,
    _aten.equal.default,
    _aten._unique2.default,
    _aten.unique_consecutive.default,
    _aten.unique_dim.default,
    _aten.repeat_interleave.Tensor,
})

# Tensor methods that copy to the host whatever the tensor's device (on CPU they never reach an aten op).
_HOST_COPIES: frozenset[Callable[..., Any]] = frozenset({
    torch.Tensor.tolist, torch.Tensor.numpy, torch.Tensor.cpu, torch.Tensor.__array__,
})


def _is_host_read(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """Whether an aten call reads device memory on the host."""
    if func in _READING_OPS:
        return True
    if func is _aten.index.Tensor:  # boolean-mask indexing: the mask's true count sizes the output
        return any(i is not None and i.dtype in (torch.bool, torch.uint8) for i in args[1])
    if func is _aten._to_copy.default:  # a copy to the host of a tensor that is not there
        target = kwargs.get("device")
        return target is not None and torch.device(target).type == "cpu" and args[0].device.type != "cpu"
    return False


def _to_host(args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """Whether a `Tensor.to(...)` call names the host: the device written as the string "cpu".

    On a CPU run an env's device is the CPU too, so `.to(device)` cannot say which way a copy would go on a GPU; code
    moving data to an env's device passes a `torch.device`, code copying to the host names "cpu".
    """
    target = kwargs.get("device")
    if len(args) > 1 and isinstance(args[1], str):
        target = args[1]
    return isinstance(target, str) and torch.device(target).type == "cpu"


def _call_site() -> str | None:
    """`module:line` of the innermost caller outside torch and this module, or None when `torch.optim` made the read
    (its step counters live on the host)."""
    site = None
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        module = frame.f_globals.get("__name__", "")
        if module.startswith("torch.optim"):
            return None
        if site is None and module != __name__ and not module.startswith("torch"):
            site = f"{module}:{frame.f_lineno}"
        frame = frame.f_back
    return site or "?"


class _DispatchCounter(TorchDispatchMode):
    def __init__(self, owner: SyncCounter) -> None:
        super().__init__()
        self.owner = owner

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple[Any, ...] = (),
                           kwargs: dict[str, Any] | None = None) -> Any:
        kwargs = kwargs or {}
        if not self.owner.inside_host_copy and _is_host_read(func, args, kwargs):
            self.owner.record(func.overloadpacket.__name__)
        return func(*args, **kwargs)


class _FunctionCounter(TorchFunctionMode):
    def __init__(self, owner: SyncCounter) -> None:
        super().__init__()
        self.owner = owner

    def __torch_function__(self, func: Any, types: Any, args: tuple[Any, ...] = (),
                           kwargs: dict[str, Any] | None = None) -> Any:
        kwargs = kwargs or {}
        owner = self.owner
        copies = func in _HOST_COPIES or (func is torch.Tensor.to and _to_host(args, kwargs))
        if not copies or owner.inside_host_copy:
            return func(*args, **kwargs)
        owner.record(func.__name__)
        owner.inside_host_copy = True
        try:
            return func(*args, **kwargs)
        finally:
            owner.inside_host_copy = False


class SyncCounter:
    """Counts host-device synchronizations while active, by phase and by the call that made them.

        with SyncCounter() as syncs:
            with syncs.phase("train"):
                ...
        syncs.by_phase()  # {"train": 3, ...}

    Reads outside any `phase` count under `"other"`; phases nest, the innermost names the read.
    """

    def __init__(self) -> None:
        self.counts: Counter[tuple[str, str, str]] = Counter()  # (phase, call, call site) -> reads
        self.inside_host_copy = False
        self._phases = ["other"]
        self._modes = (_FunctionCounter(self), _DispatchCounter(self))
        self._stack = contextlib.ExitStack()

    def __enter__(self) -> SyncCounter:
        for mode in self._modes:
            self._stack.enter_context(mode)
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._stack.close()

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Attribute the block's reads to `name`."""
        self._phases.append(name)
        try:
            yield
        finally:
            self._phases.pop()

    @property
    def current_phase(self) -> str:
        return self._phases[-1]

    def record(self, call: str) -> None:
        """Count one read by `call` in the current phase, at its call site (reads by `torch.optim` are not counted)."""
        site = _call_site()
        if site is not None:
            self.counts[(self._phases[-1], call, site)] += 1

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def by_phase(self) -> dict[str, int]:
        totals: Counter[str] = Counter()
        for (phase, _, _), n in self.counts.items():
            totals[phase] += n
        return dict(totals)
