"""Every config is a `StrictConfig` whose numbers are strict and bounded by field constraints.

No config keeps a hand-written table of ranges: each int or float field (also inside lists, tuples and dicts) refuses
a bool and values far outside any sensible range, from its own type and constraints; the base config refuses unknown
keys and non-finite floats for all of them.
"""

from __future__ import annotations

import importlib
import pkgutil
import types
from typing import Annotated, Any, Union, get_args, get_origin

import pytest
from pydantic import ConfigDict, TypeAdapter, ValidationError
from pydantic.fields import FieldInfo

import esper
from esper.api import GrowthConfig
from esper.data.optim import OptimizerSpec
from esper.data.task_spec import DataOptions
from esper.datagen.configs import ENVIRONMENT_PRESETS, POLICY_PRESETS, BehaviorPolicyConfig, EnvironmentConfig
from esper.datagen.generate import GenerateOptions
from esper.env.contribution import ContributionRewardConfig
from esper.env.gym import GymEnvConfig
from esper.env.reward_setting import RewardSetting
from esper.env.rewards import GapRewardConfig, LossRewardConfig, SparseRewardConfig
from esper.env.setting import EpisodeScale, EpisodeSetting
from esper.evaluation.ope import OPEConfig
from esper.evaluation.selection_record import CandidateRow, CostRecord, SelectionRecord, TeacherRecord
from esper.execution.workers import WorkerOptions
from esper.kasmina.state import LifecycleConfig
from esper.leyline.sectioned_config import SectionedConfig
from esper.leyline.strict_config import StrictConfig
from esper.simic.iql.config import IQLConfig
from esper.simic.ppo.config import TrainingConfig
from esper.simic.ppo.distill import DistillConfig
from esper.simic.ppo.ppo_config import PPOConfig
from esper.tamiyo.heuristic import HeuristicPolicyConfig
from esper.tamiyo.heuristic_record import HeuristicRecord, ObjectiveRecord, TunedSetting, TuningSummary

_SETTING = TunedSetting(task="synthetic", max_epochs=25, max_train_samples=None, max_val_samples=512, batch_size=64,
                        lr_schedule="constant", augment="crop,flip")
_TUNING = TuningSummary(objective=ObjectiveRecord(name="val_gap_to_static"), budget_env_epochs=600, trials=3,
                        best_trial=1, best_score=1.5, default_score=0.5, seeds=5, seed=42, seed_stream="selection",
                        sampler="TPE", cost_env_epochs=500, cost_gflops=12.5, command="esper tune heuristic",
                        esper_commit="unknown", esper_version="0.1.0")
_COST = CostRecord(env_epochs=150, gflops=3.5)
_TEACHER = TeacherRecord(label="heuristic", scores={"heuristic": 0.4, "best-rule": -0.2}, cost=_COST)
VALID: dict[type[StrictConfig], StrictConfig] = {
    TrainingConfig: TrainingConfig(),
    SectionedConfig: SectionedConfig(),
    PPOConfig: PPOConfig(),
    EpisodeScale: EpisodeScale(),
    EpisodeSetting: EpisodeSetting(),
    RewardSetting: RewardSetting(),
    IQLConfig: IQLConfig(),
    OPEConfig: OPEConfig(),
    EnvironmentConfig: ENVIRONMENT_PRESETS["baseline"],
    BehaviorPolicyConfig: POLICY_PRESETS["baseline"],
    GenerateOptions: GenerateOptions(task="synthetic", param_cost=1.0),
    GymEnvConfig: GymEnvConfig(),
    GapRewardConfig: GapRewardConfig(cost=1.0),
    ContributionRewardConfig: ContributionRewardConfig(),
    LossRewardConfig: LossRewardConfig.for_task("classification", 2.3, 0.3, 0.1),
    SparseRewardConfig: SparseRewardConfig(),
    HeuristicPolicyConfig: HeuristicPolicyConfig(max_concurrent_seeds=2),
    DistillConfig: DistillConfig(),
    OptimizerSpec: OptimizerSpec(name="sgd", lr=0.01),
    WorkerOptions: WorkerOptions(),
    LifecycleConfig: LifecycleConfig(),
    GrowthConfig: GrowthConfig(max_seeds=2, random_guess_loss=2.3),
    DataOptions: DataOptions(),
    TunedSetting: _SETTING,
    ObjectiveRecord: ObjectiveRecord(name="charged_gap", charge="compute", cost=1.5),
    TuningSummary: _TUNING,
    HeuristicRecord: HeuristicRecord(thresholds={"stall_training_epochs": 7}, setting=_SETTING, tuning=_TUNING),
    CostRecord: _COST,
    CandidateRow: CandidateRow(candidate="fixed:norm@early", round=1, val_accuracy=81.5, val_std=1.2, params=4e4),
    TeacherRecord: _TEACHER,
    SelectionRecord: SelectionRecord(preset="synthetic", selection_seeds=5, setting={"max_epochs": 30},
                                     charge="compute", cost=1.04, chosen={"best-fixed": "fixed:norm@early"},
                                     selection_cost=_COST, candidates=[], teacher=_TEACHER, command="esper study",
                                     esper_commit="unknown", esper_version="0.1.0"),
}
CONFIG_NAMES = ("Config", "Options", "OptimizerSpec")
"""How esper names a configuration object: a set of settings a user or a task chooses."""
HUGE = 10**30


def _all_subclasses(cls: type) -> set[type]:
    return {s for sub in cls.__subclasses__() for s in (sub, *_all_subclasses(sub))}


def _esper_modules() -> list[types.ModuleType]:
    return [importlib.import_module(m.name) for m in pkgutil.walk_packages(esper.__path__, "esper.")
            if not m.name.endswith("__main__")]


def test_every_strict_config_is_checked_here() -> None:
    """A new StrictConfig anywhere in esper joins VALID (and so every check below)."""
    _esper_modules()
    assert {c for c in _all_subclasses(StrictConfig) if c.__module__.startswith("esper.")} == set(VALID)


def test_every_config_is_a_strict_config() -> None:
    """No config keeps its own checks (a dataclass with `__post_init__` bounds): each one named like a config is a
    StrictConfig, so it refuses unknown keys and checks its fields the same way as every other."""
    configs = {obj for module in _esper_modules() for name, obj in vars(module).items()
               if isinstance(obj, type) and obj.__module__ == module.__name__ and name.endswith(CONFIG_NAMES)}
    assert {c for c in VALID if c.__name__.endswith(CONFIG_NAMES)} <= configs  # the walk finds every config
    assert sorted(c.__qualname__ for c in configs if not issubclass(c, StrictConfig)) == []


def _leaves(annotation: Any) -> list[tuple[type, Any]]:
    """(int or float, how to wrap a leaf value into a value of `annotation`) for each numeric leaf."""
    origin = get_origin(annotation)
    if origin is Annotated:
        return _leaves(get_args(annotation)[0])
    if origin in (Union, types.UnionType):
        return [leaf for arg in get_args(annotation) for leaf in _leaves(arg)]
    if origin in (list, tuple):
        return [(t, lambda v, w=wrap: [w(v)]) for t, wrap in _leaves(get_args(annotation)[0])]
    if origin is dict:
        return [(t, lambda v, w=wrap: {"key": w(v)}) for t, wrap in _leaves(get_args(annotation)[1])]
    if annotation in (int, float):
        return [(annotation, lambda v: v)]
    return []


def _adapter(field: FieldInfo) -> TypeAdapter[Any]:
    full = Annotated[(field.annotation, *field.metadata)] if field.metadata else field.annotation
    return TypeAdapter(full, config=ConfigDict(allow_inf_nan=False))


NUMERIC = [(cls, name) for cls in VALID for name, field in cls.model_fields.items() if _leaves(field.annotation)]


def test_the_numeric_fields_are_found() -> None:
    names = {f"{cls.__name__}.{name}" for cls, name in NUMERIC}
    assert {"PPOConfig.lr", "PPOConfig.initial_op_bias", "RewardSetting.param_cost", "EpisodeSetting.max_epochs",
            "IQLConfig.hidden_sizes", "OPEConfig.fqe_hidden_sizes", "EnvironmentConfig.learning_rate"} <= names


@pytest.mark.parametrize(("cls", "name"), NUMERIC, ids=[f"{c.__name__}.{n}" for c, n in NUMERIC])
def test_numbers_are_strict_and_bounded(cls: type[StrictConfig], name: str) -> None:
    field = cls.model_fields[name]
    adapter = _adapter(field)
    adapter.validate_python(getattr(VALID[cls], name))  # the valid value passes the same check
    for kind, wrap in _leaves(field.annotation):
        for bad in (True, HUGE if kind is int else float(HUGE), -HUGE if kind is int else -float(HUGE)):
            with pytest.raises(ValidationError):
                adapter.validate_python(wrap(bad))


@pytest.mark.parametrize("cls", list(VALID), ids=[c.__name__ for c in VALID])
def test_unknown_keys_and_non_finite_floats_are_refused(cls: type[StrictConfig]) -> None:
    assert cls.model_config.get("extra") == "forbid" and cls.model_config.get("allow_inf_nan") is False
    with pytest.raises(ValueError, match=r"Unknown .* keys: \['no_such_field'\]. Valid keys: "):
        cls.from_dict({"no_such_field": 1}, base=VALID[cls])
    assert cls.from_dict({}, base=VALID[cls]) == VALID[cls]
