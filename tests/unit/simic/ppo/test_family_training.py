"""PPO across a task family: each env group trains on the training type its own data seed draws, charged that
type's λ_p; no draw ever yields a held-out type, and a planted leak stops the training; the config says what a family
run is, and a policy trained across a family runs on any of its types and on no other task."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from esper.data import families
from esper.data.families import Family, HeldOutLeak, InstanceType, family_task, register_family, training_type
from esper.data.tasks import get_task_spec
from esper.env.rewards import GapRewardConfig
from esper.leyline import CANONICAL_SLOTS, UserInputError
from esper.leyline.seeding import MAX_BASE_SEED
from esper.simic.ppo.checkpoint import PPOLearnerState
from esper.simic.ppo.config import TrainingConfig, family_fields
from esper.simic.ppo.controller import PPOPolicy
from esper.simic.ppo.settings import TrainingSettings, group_data_seeds
from esper.simic.ppo.train import PPORun, train_ppo
from esper.storage.rundir import RunDirectory
from esper.tamiyo import ControllerContext, SettingChangeError

FAMILY = register_family(Family("ppo-probe", 1, "synthetic", (
    InstanceType("a", "synthetic", 64), InstanceType("b", "synthetic", 96, width=0.5),
    InstanceType("c", "synthetic", 64, corruption=("gaussian_noise", 1)),
    InstanceType("held", "synthetic", 64, corruption=("fog", 2)),
), held_out=("held",)))
COSTS = {"a": 0.5, "b": 2.0, "c": 0.25}
_PRESET = TrainingConfig.preset("synthetic")
CONFIG = _PRESET.with_overrides(
    **family_fields(FAMILY, _PRESET.reward, {"reward.type_param_costs": COSTS}), max_epochs=2, max_val_samples=16,
    batch_size=16, n_episodes=4, n_envs=4, device="cpu")  # the given λ_p replace the preset's "auto"
TRAINING_TASKS = {family_task(FAMILY, t): t.name for t in FAMILY.training}


@settings(max_examples=50, deadline=None)
@given(seed=st.integers(0, MAX_BASE_SEED), batch=st.integers(0, 10_000), groups=st.integers(1, 16))
def test_every_group_trains_on_a_training_type_its_data_seed_draws_at_that_types_cap_and_lambda(
        seed: int, batch: int, groups: int) -> None:
    chosen = TrainingSettings.of(CONFIG)
    for data_seed in group_data_seeds(seed, batch, groups):
        recipe = chosen.of_group(data_seed)
        assert recipe is not None and recipe.setting.task in TRAINING_TASKS  # never a held-out type's task
        itype = FAMILY.type(TRAINING_TASKS[recipe.setting.task])
        assert itype == training_type(FAMILY, data_seed)
        assert recipe.setting.max_train_samples == itype.max_train_samples
        assert isinstance(recipe.reward, GapRewardConfig) and recipe.reward.cost == COSTS[itype.name]


def test_a_batchs_groups_draw_their_types_apart_and_a_task_run_keeps_one_data_seed() -> None:
    drawn = {TrainingSettings.of(CONFIG).of_group(s).setting.task for b in range(4) for s in group_data_seeds(7, b, 4)}
    assert len(drawn) > 1  # 16 groups over three types
    task_run = TrainingSettings.of(TrainingConfig.preset("synthetic").with_overrides(compute_cost=1.0))
    assert task_run.data_seeds(7, 0, 3, 11) == [11, 11, 11] and task_run.of_group(11) is None


def test_a_held_out_type_planted_into_the_draw_stops_the_training(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    held = FAMILY.held_out_types[0]
    monkeypatch.setattr(families, "_pick", lambda types, seed, key: held)
    with pytest.raises(HeldOutLeak, match="drew held-out type 'held'"):
        train_ppo(CONFIG, PPORun(RunDirectory(tmp_path / "run")))
    assert not (tmp_path / "run" / "episodes.jsonl").exists()  # not one episode trained


@pytest.mark.parametrize(("changes", "message"), [
    ({"task": "synthetic"}, "its task is family:ppo-probe-v1/a"),
    ({"max_train_samples": 64}, "max_train_samples null"),
    ({"param_cost": 1.0, "type_param_costs": None}, "its own λ_p"),
    ({"type_param_costs": {"a": 1.0}}, "exactly the training types"),
    ({"type_param_costs": {**COSTS, "held": 1.0}}, "exactly the training types"),
    ({"param_cost": "auto"}, "measures type_param_costs"),
    ({"reward_family": "loss"}, "only applies to reward_family 'gap'"),
    ({"family": None}, "only applies to a family run"),
    ({"family": "nope-v1"}, "Unknown family"),
])
def test_a_family_run_config_is_checked(changes: dict[str, object], message: str) -> None:
    with pytest.raises(UserInputError, match=message):
        CONFIG.with_overrides(**changes)
    assert CONFIG.reward.charged_param_cost("b") == 2.0
    assert CONFIG.with_overrides(param_cost="auto", type_param_costs=None).family == FAMILY.key


def _context(task: str) -> ControllerContext:
    return ControllerContext(space=get_task_spec(task).action_space, slots=tuple(CANONICAL_SLOTS), max_epochs=2,
                             setting={"task": task, "max_epochs": 2, "max_train_samples": 64, "max_val_samples": 16,
                                      "batch_size": 16, "lr_schedule": CONFIG.episode.lr_schedule})


def test_a_family_policy_runs_on_any_type_of_its_family_and_on_no_other_task(tmp_path: Path) -> None:
    path = tmp_path / "policy.pt"
    PPOLearnerState.new(CONFIG, torch.device("cpu")).save(path)
    for itype in FAMILY.types:  # its held-out types above all: that is where it is measured
        PPOPolicy.from_checkpoint(path, context=_context(family_task(FAMILY, itype)))
    with pytest.raises(SettingChangeError, match="trained across family ppo-probe-v1"):
        PPOPolicy.from_checkpoint(path, context=_context("synthetic"))
