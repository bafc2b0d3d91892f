"""Calibration of the `synthetic` task: learnable by the small host, with headroom for capacity."""

from __future__ import annotations

import statistics

import pytest
import torch

from esper.data.tasks import DataCache, DataOptions, get_task_spec
from esper.env import EpochData
from esper.kasmina.hosts import CNNHost
from esper.kasmina.model import MorphogeneticModel
from esper.leyline.seeding import derive_seed
from esper.tolaria import TrainState, train_epoch, validate


def _mean_accuracy_epochs_6_to_10(channels: tuple[int, ...], data_seed: int) -> float:
    task = get_task_spec("synthetic")
    device = torch.device("cpu")
    data = EpochData.build(task, DataCache(DataOptions()), [device], batch_size=128, seed=data_seed)
    torch.manual_seed(data_seed)
    model = MorphogeneticModel(CNNHost(channels=channels), slots=["early", "mid", "late"], lifecycle=task.lifecycle)
    ts = TrainState(model, task.host_optimizer, task.seed_optimizer, "classification", device)
    accuracies = []
    for epoch in range(1, 11):
        data.train.set_seed(derive_seed(data_seed, epoch))
        train_epoch(ts, (b["cpu"] for b in data.train))
        accuracies.append(validate(ts, [b["cpu"] for b in data.val], ablate=()).val_accuracy)
    return statistics.fmean(accuracies[5:])


@pytest.mark.slow
def test_base_host_learns_and_a_wider_host_does_better() -> None:
    small = [_mean_accuracy_epochs_6_to_10((8, 16, 32), s) for s in (0, 1)]
    wide = [_mean_accuracy_epochs_6_to_10((32, 64, 128), s) for s in (0, 1)]
    assert all(55.0 <= a <= 92.0 for a in small), small
    assert statistics.fmean(wide) > statistics.fmean(small), (small, wide)
