"""Multi-GPU smoke: 2 envs on cuda:0 and cuda:1.

Runs `train_ppo` with the quick preset on `synthetic` (n_episodes 2, max_epochs 2, tiny caps; fixture
`quick_ppo_run` in conftest.py) and checks that each device received an env and that env's model: the
TRAINING_STARTED mapping, the EPOCH_COMPLETED devices, and the parameters and streams of the envs actually built
(captured by wrapping `run_episodes`); and that the history is non-empty and finite. Skips without two GPUs.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch

from esper.leyline import TelemetryEventType
from esper.storage.rundir import read_jsonl

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs at least two CUDA GPUs"),
]


def _finite(value: Any) -> bool:
    return isinstance(value, int | float) and math.isfinite(value)  # logs write non-finite floats as strings


def test_two_gpus_each_get_an_env_and_its_model(quick_ppo_run: Any) -> None:
    devices = ["cuda:0", "cuda:1"]
    run = quick_ppo_run(devices)

    [started] = run.sink.of(TelemetryEventType.TRAINING_STARTED)
    assert {int(k): v for k, v in started.data["env_devices"].items()} == {0: "cuda:0", 1: "cuda:1"}
    assert started.data["envs_per_device"] == {"cuda:0": 1, "cuda:1": 1}

    assert sorted(b["env_id"] for b in run.built) == [0, 1]
    for b in run.built:
        expected = devices[b["env_id"]]
        assert b["spec_device"] == expected
        assert b["param_devices"] == {expected}, b  # host and every seed live on the env's device
        assert isinstance(b["stream"], torch.cuda.Stream) and b["stream"].device == torch.device(expected)
    epoch_devices = {e.env_id: e.data["device"] for e in run.sink.of(TelemetryEventType.EPOCH_COMPLETED)}
    assert epoch_devices == {0: "cuda:0", 1: "cuda:1"}

    result = run.result
    assert result.batches_completed == 1 and result.episodes_completed == 2
    assert result.history, "history must not be empty"
    history_numbers = [x for row in result.history for x in _numbers(row.to_dict())]
    assert history_numbers and all(math.isfinite(x) for x in history_numbers)
    assert result.history[0].skipped_update is None
    rows = read_jsonl(run.path / "history.jsonl")
    assert len(rows) == 1 and len(rows[0]["env_accuracies"]) == 2
    steps = read_jsonl(run.path / "steps.jsonl")
    assert sorted({r["env"] for r in steps}) == [0, 1]
    assert all(_finite(r["val_loss"]) and _finite(r["reward"]) for r in steps)
    assert (run.path / "checkpoints" / "final.pt").exists()


def _numbers(value: Any) -> list[float]:
    if isinstance(value, bool):
        return []
    if isinstance(value, int | float):
        return [float(value)]
    if isinstance(value, dict):
        return [x for v in value.values() for x in _numbers(v)]
    if isinstance(value, list | tuple):
        return [x for v in value for x in _numbers(v)]
    return []
