"""A probe family and planted episodes for the family pre-check and held-out tests."""

from __future__ import annotations

from collections.abc import Callable

from esper.data.families import Family, InstanceType, register_family
from esper.env import EpisodeResult
from esper.simic.ppo.config import TrainingConfig

FAMILY = register_family(Family("precheck-probe", 1, "synthetic", (
    InstanceType("a", "synthetic", 512), InstanceType("b", "synthetic", 512, width=0.5),
    InstanceType("held", "synthetic", 512, corruption=("fog", 2)),
), held_out=("held",)))
CONFIG = TrainingConfig.preset("synthetic").with_overrides(device="cpu", compute_cost=None)
Accuracy = Callable[[str, str], float]
"""(type name, controller spec) → planted final validation accuracy (test is 1 pp below it)."""


def episode(controller: str, index: int, val: float, gflops: float = 1.0) -> EpisodeResult:
    return EpisodeResult(controller=controller, env_id=0, episode=index, batch=0, env_seed=index, host_width=1.0,
                         host_params=1000, final_accuracy=val, final_loss=1.0, twin_final_accuracy=None,
                         twin_final_loss=None, best_accuracy=val, seeds_created=0, seeds_fossilized=0, seeds_culled=0,
                         params_added=0, action_counts={"WAIT": 1, "GERMINATE": 0, "FOSSILIZE": 0, "CULL": 0},
                         accuracy_curve=[val], total_reward=0.0, rollbacks=0, final_test_accuracy=val - 1.0,
                         final_test_loss=1.0, train_flops=int(gflops * 1e9))
