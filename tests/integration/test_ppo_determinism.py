"""A PPO run is a function of its config: the global RNG state of the calling process does not leak in."""

from __future__ import annotations

from pathlib import Path

import torch

from esper.simic.ppo.config import TrainingConfig
from esper.simic.ppo.train import PPORun, train_ppo
from esper.storage.rundir import RunDirectory

CONFIG = TrainingConfig.preset("quick").with_overrides(
    n_episodes=4, max_epochs=2, max_train_samples=128, max_val_samples=64, device="cpu", param_cost=1.0)


def _networks(run: Path, process_seed: int) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """The policy's weights before and after training."""
    torch.manual_seed(process_seed)
    train_ppo(CONFIG, PPORun(RunDirectory(run)))
    init, final = (torch.load(run / "checkpoints" / f"{kind}.pt", weights_only=True)["agent"]["network"]
                   for kind in ("init", "final"))
    return init, final


def test_same_config_same_policy_whatever_the_process_rng(tmp_path: Path) -> None:
    init, a = _networks(tmp_path / "a", 1)
    _, b = _networks(tmp_path / "b", 2)
    assert a.keys() == b.keys()
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert not all(torch.equal(init[k], a[k]) for k in a)  # training changed the policy: the runs are not vacuous
