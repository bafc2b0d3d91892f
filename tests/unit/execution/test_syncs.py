"""SyncCounter counts every host read a GPU would wait for, once, on CPU tensors, and nothing else."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch

from esper.execution.syncs import SyncCounter

VECTOR = torch.tensor([1.0, 2.0, 3.0])
SCALAR = torch.tensor(3.0)
MASK = torch.tensor([True, False, True])

READS: dict[str, Callable[[], Any]] = {
    "item": lambda: SCALAR.item(),
    "float": lambda: float(SCALAR),
    "int": lambda: int(SCALAR),
    "bool": lambda: bool(SCALAR > 1),
    "format": lambda: f"{SCALAR:.2f}",
    "comparison in Python": lambda: max(SCALAR, 2.0),
    "tolist": lambda: VECTOR.tolist(),
    "numpy": lambda: VECTOR.numpy(),
    "np.asarray": lambda: np.asarray(VECTOR),
    "cpu": lambda: VECTOR.cpu(),
    "to('cpu')": lambda: VECTOR.to("cpu"),
    "to(device='cpu', copy=True)": lambda: VECTOR.to(device="cpu", copy=True),
    "nonzero": lambda: MASK.nonzero(),
    "where(mask)": lambda: torch.where(MASK),
    "boolean indexing": lambda: VECTOR[MASK],
    "masked_select": lambda: VECTOR.masked_select(MASK),
    "unique": lambda: torch.unique(VECTOR),
    "equal": lambda: torch.equal(VECTOR, VECTOR),
}

NOT_READS: dict[str, Callable[[], Any]] = {
    "arithmetic": lambda: (VECTOR * 2 + SCALAR).sum(),
    "comparison on the device": lambda: VECTOR > SCALAR,
    "where with three arguments": lambda: torch.where(MASK, VECTOR, 0.0),
    "integer indexing": lambda: VECTOR[torch.tensor([0, 2])],
    "masked_fill": lambda: VECTOR.masked_fill(MASK, 0.0),
    "to(device) of an env": lambda: VECTOR.to(torch.device("cpu")),
    "to(dtype)": lambda: VECTOR.to(torch.float64),
    "clone": lambda: VECTOR.detach().clone(),
    "shape": lambda: VECTOR.shape[0] + VECTOR.numel(),
}


@pytest.mark.parametrize("read", READS.values(), ids=READS.keys())
def test_each_host_read_counts_once(read: Callable[[], Any]) -> None:
    with SyncCounter() as counter:
        read()
    assert counter.total == 1, counter.counts


@pytest.mark.parametrize("work", NOT_READS.values(), ids=NOT_READS.keys())
def test_device_work_and_copies_to_a_device_count_nothing(work: Callable[[], Any]) -> None:
    with SyncCounter() as counter:
        work()
    assert counter.total == 0, counter.counts


def test_optimizer_step_counters_are_host_tensors_and_not_counted() -> None:
    """Adam reads its `step` with .item() every step; torch keeps that tensor on the host on every device."""
    param = torch.nn.Parameter(torch.ones(3))
    optimizer = torch.optim.Adam([param])
    with SyncCounter() as counter:
        for _ in range(3):
            param.grad = torch.ones(3)
            optimizer.step()
        float(param.detach().sum())  # a read of the model's own values still counts
    assert counter.total == 1


def test_reads_are_attributed_to_the_innermost_phase_and_call_site() -> None:
    with SyncCounter() as counter:
        SCALAR.item()
        with counter.phase("train"):
            VECTOR.tolist()
            with counter.phase("telemetry"):
                float(SCALAR)
                float(SCALAR)
            assert counter.current_phase == "train"
    assert counter.by_phase() == {"other": 1, "train": 1, "telemetry": 2}
    assert {(phase, call) for phase, call, _ in counter.counts} == {
        ("other", "_local_scalar_dense"), ("train", "tolist"), ("telemetry", "_local_scalar_dense")}
    assert all(site.startswith(f"{__name__}:") for _, _, site in counter.counts)


def test_nothing_is_counted_outside_the_block() -> None:
    counter = SyncCounter()
    with counter:
        SCALAR.item()
    SCALAR.item()
    VECTOR.tolist()
    assert counter.total == 1
