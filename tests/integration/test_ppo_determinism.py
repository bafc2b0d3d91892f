"""A PPO run is a function of its config: the global RNG state of the calling process does not leak in."""

from __future__ import annotations

from pathlib import Path

import torch

from esper.runtime.rundir import RunDirectory
from esper.simic.ppo.config import TrainingConfig
from esper.simic.ppo.train import PPORun, train_ppo

CONFIG = TrainingConfig.preset("quick").with_overrides(
    n_episodes=4, max_epochs=2, max_train_samples=128, max_val_samples=64, device="cpu", param_cost=1.0)


def _final_network(run: Path, process_seed: int) -> dict[str, torch.Tensor]:
    torch.manual_seed(process_seed)
    train_ppo(CONFIG, PPORun(RunDirectory(run)))
    final = torch.load(run / "checkpoints" / "final.pt", weights_only=True)
    network: dict[str, torch.Tensor] = final["agent"]["network"]
    return network


def test_same_config_same_policy_whatever_the_process_rng(tmp_path: Path) -> None:
    a = _final_network(tmp_path / "a", 1)
    b = _final_network(tmp_path / "b", 2)
    assert a.keys() == b.keys()
    assert all(torch.equal(a[k], b[k]) for k in a)
