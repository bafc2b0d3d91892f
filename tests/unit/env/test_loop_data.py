"""The epoch loop's data contract: envs on one device share each batch, gathered once per epoch."""

from __future__ import annotations

import pytest
import torch

from esper.data.batches import AugmentDraw, DeviceDataset
from esper.data.tasks import DataCache, DataOptions, get_task_spec
from esper.env import EnvSpec, EpochData, Lockstep, MorphoEnv, make_reward_fn, run_epoch
from esper.tamiyo.policy import StaticPolicy


def test_each_shared_batch_is_gathered_once_per_device_per_epoch(monkeypatch: pytest.MonkeyPatch) -> None:
    """Several envs on one device share every batch: the epoch loop gathers it once, not once per env.

    Counted at the dataset gather itself (wrapped), independently of the iterator's own bookkeeping.
    """
    gathers: list[tuple[int, tuple[int, ...]]] = []
    original = DeviceDataset.batch

    def counting_batch(self: DeviceDataset, indices: torch.Tensor, draw: AugmentDraw | None = None
                       ) -> tuple[torch.Tensor, torch.Tensor]:
        gathers.append((id(self), tuple(indices.tolist())))
        return original(self, indices, draw)

    monkeypatch.setattr(DeviceDataset, "batch", counting_batch)
    task, device = get_task_spec("synthetic"), torch.device("cpu")
    data = EpochData.build(task, DataCache(DataOptions()), [device, device, device], batch_size=16, seed=0,
                           max_train_samples=48, max_val_samples=24)
    envs = [MorphoEnv(EnvSpec(task=task, slots=("mid",), max_epochs=2, env_seed=i, device=device), "static")
            for i in range(3)]
    lockstep = Lockstep(envs, data, make_reward_fn("contribution", task, 0.99))
    train_set, val_set = data.train.datasets["cpu"], data.val.datasets["cpu"]
    for _ in range(2):
        gathers.clear()
        counted = data.train.materializations["cpu"] + data.val.materializations["cpu"]
        run_epoch(lockstep, [StaticPolicy()] * 3)
        train = [idx for ds, idx in gathers if ds == id(train_set)]
        val = [idx for ds, idx in gathers if ds == id(val_set)]
        assert len(gathers) == len(train) + len(val)  # nothing else was gathered
        assert len(train) == len(data.train) == 3 and len(val) == len(data.val) == 1
        assert sorted(i for idx in train for i in idx) == list(range(48))  # each sample once: no batch twice
        assert val == [tuple(range(24))]
        # The iterator's own counter (reported as `batch_loads`) agrees with the real gathers.
        assert data.train.materializations["cpu"] + data.val.materializations["cpu"] - counted == len(gathers)
