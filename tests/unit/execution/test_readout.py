"""Readout: many device values reach the host in one read, each exactly as a read of its own would give it."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from esper.execution.readout import Readout
from esper.execution.syncs import SyncCounter

DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.int64, torch.bool)


@st.composite
def tensors(draw: st.DrawFn) -> torch.Tensor:
    """A tensor of 0 to 9 elements (a scalar, a vector or a matrix) of one of the accumulators' dtypes."""
    shape = tuple(draw(st.lists(st.integers(0, 3), max_size=2)))
    n = math.prod(shape)
    values = draw(st.lists(st.floats(-1e4, 1e4, width=32), min_size=n, max_size=n))
    return torch.tensor(values, dtype=torch.float32).reshape(shape).to(draw(st.sampled_from(DTYPES)))


@settings(deadline=None)  # the first read warms up the dispatch mode
@given(st.lists(st.lists(tensors(), max_size=3), min_size=1, max_size=4))
def test_every_group_gets_the_values_its_own_reads_would_give(groups: list[list[torch.Tensor]]) -> None:
    readout = Readout()
    deferred = [readout.queue(group, list) for group in groups]
    with SyncCounter() as counter:
        readout.read()
    assert counter.total == (1 if any(t.numel() for group in groups for t in group) else 0)
    for group, values in zip(groups, deferred, strict=True):
        own = [float(v) for t in group for v in t.reshape(-1).tolist()]
        assert values.value == own  # bit for bit: float64 holds every value of these dtypes exactly


def test_build_functions_run_at_read_in_queue_order() -> None:
    readout = Readout()
    order: list[str] = []
    first = readout.queue([torch.tensor([1.0, 2.0])], lambda v: order.append("first") or sum(v))
    second = readout.queue([], lambda v: order.append("second") or len(v))
    with pytest.raises(RuntimeError, match="call read"):
        _ = first.value
    readout.read()
    assert (first.value, second.value, order) == (3.0, 0, ["first", "second"])


def test_a_readout_reads_what_was_queued_since_the_last_read() -> None:
    readout = Readout()
    readout.queue([torch.tensor(1.0)], list)
    readout.read()
    later = readout.queue([torch.tensor(2.0)], list)
    readout.read()
    assert later.value == [2.0]
