"""The generation matrix: sizes, order, episode ids, paired seeds, twins and the matrix hash."""

from __future__ import annotations

import math

import pytest

from esper.data.tasks import get_task_spec
from esper.datagen.configs import POLICY_PRESETS
from esper.datagen.plans import (
    EpisodeTask,
    GenerationPlan,
    TwinPlan,
    create_generation_matrix,
    matrix_hash,
    paired_seed,
)
from esper.leyline.seeding import SeedStream, derive_seed


def test_matrix_sizes() -> None:
    assert len(create_generation_matrix(["baseline", "fast-lr"], ["baseline", "aggressive"], 5)) == 20
    assert len(create_generation_matrix(episodes_per_combo=1)) == 143
    assert len(create_generation_matrix()) == 13 * 11 * 10 == 1430
    assert len(create_generation_matrix(["baseline"], ["baseline"], 1, epsilon_values=[0.0, 0.1, 0.2])) == 3


def test_matrix_order_and_epsilon_lists() -> None:
    plans = create_generation_matrix(["baseline", "wide"], ["baseline", "random"], 2, epsilon_values=[0.0, 0.1])
    ids = [p.episode_id for p in plans]
    assert ids == [
        "baseline_baseline_0000", "baseline_baseline_0001", "baseline_baseline-eps0.1_0000",
        "baseline_baseline-eps0.1_0001", "baseline_random-eps1.0_0000", "baseline_random-eps1.0_0001",
        "wide_baseline_0000", "wide_baseline_0001", "wide_baseline-eps0.1_0000", "wide_baseline-eps0.1_0001",
        "wide_random-eps1.0_0000", "wide_random-eps1.0_0001",
    ]
    assert len(set(ids)) == len(ids)
    default = create_generation_matrix(["baseline"], list(POLICY_PRESETS), 1)
    assert {p.policy_config_id: p.epsilon for p in default} == {
        p: (1.0 if p == "random" else 0.0) for p in POLICY_PRESETS}


def test_paired_seeds() -> None:
    plans = create_generation_matrix(episodes_per_combo=3, epsilon_values=[0.0, 0.2], base_seed=7)
    by_pair: dict[tuple[str, int], set[int]] = {}
    for p in plans:
        by_pair.setdefault((p.env_config_id, p.episode_idx), set()).add(p.seed)
    assert all(len(seeds) == 1 for seeds in by_pair.values())  # shared across policies and ε variants
    assert len({next(iter(s)) for s in by_pair.values()}) == len(by_pair)  # distinct across pairs
    assert paired_seed("resnet18", 2, 7) == derive_seed(7, SeedStream.DATAGEN, "resnet18", 2)
    assert paired_seed("resnet18", 2, 7) != paired_seed("resnet18", 2, 8)
    # A subset of the matrix keeps the full matrix's seeds.
    subset = create_generation_matrix(["resnet18"], ["aggressive"], 3, base_seed=7)
    assert [p.seed for p in subset] == [paired_seed("resnet18", i, 7) for i in range(3)]


def test_plan_ids_configs_and_dict() -> None:
    plan = GenerationPlan("baseline", "aggressive", 0.1, 0)
    assert plan.episode_id == "baseline_aggressive-eps0.1_0000"
    assert plan.random_seed == paired_seed("baseline", 0)  # filled in from the default base seed
    assert plan.get_policy_config().policy_id == "aggressive-eps0.1" and plan.get_policy_config().epsilon == 0.1
    plan = GenerationPlan("resnet34", "random", 1.0, 5, random_seed=99)
    assert plan.episode_id == "resnet34_random-eps1.0_0005"
    assert plan.get_env_config().architecture == "ResNet-34"
    assert plan.to_dict() == {"episode_id": "resnet34_random-eps1.0_0005", "env_config_id": "resnet34",
                              "policy_config_id": "random", "epsilon": 1.0, "episode_idx": 5, "random_seed": 99}
    assert plan.twin == TwinPlan("resnet34", 99) and plan.twin.twin_id == "resnet34_seed99"
    assert GenerationPlan("baseline", "baseline", 0.0, 3).episode_id == "baseline_baseline_0003"


def test_plan_policies_are_seeded_per_episode() -> None:
    a, b = GenerationPlan("baseline", "random", 1.0, 0), GenerationPlan("baseline", "random", 1.0, 1)
    space = get_task_spec("synthetic").action_space
    assert a.create_policy(space).name == "behavior:random-eps1.0"
    assert a.create_policy(space)._rng.random() == a.create_policy(space)._rng.random()
    assert a.create_policy(space)._rng.random() != b.create_policy(space)._rng.random()


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"env_config_id": "nope"}, "Unknown environment preset 'nope'"),
        ({"policy_config_id": "nope"}, "Unknown behaviour policy preset 'nope'"),
        ({"epsilon": 1.5}, r"epsilon must be in \[0, 1\]"),
        ({"policy_config_id": "random", "epsilon": 0.1}, "runs with ε = 1.0"),
        ({"episode_idx": -1}, "episode_idx must be >= 0"),
    ],
)
def test_plan_validation(kwargs: dict[str, object], match: str) -> None:
    base: dict[str, object] = {"env_config_id": "baseline", "policy_config_id": "baseline", "epsilon": 0.0,
                               "episode_idx": 0}
    with pytest.raises(ValueError, match=match):
        GenerationPlan(**{**base, **kwargs})  # type: ignore[arg-type]


def test_matrix_validation() -> None:
    with pytest.raises(ValueError, match="episodes_per_combo"):
        create_generation_matrix(episodes_per_combo=0)
    with pytest.raises(ValueError, match="Duplicate environment ids"):
        create_generation_matrix(["baseline", "baseline"])
    with pytest.raises(ValueError, match="Unknown environment preset"):
        create_generation_matrix(["nope"])


def test_matrix_hash_covers_plans_and_settings() -> None:
    plans = create_generation_matrix(["baseline"], ["baseline"], 2)
    h = matrix_hash(plans, {"task": "cifar10", "max_epochs": 25})
    assert h == matrix_hash(list(plans), {"max_epochs": 25, "task": "cifar10"})
    assert h != matrix_hash(plans, {"task": "cifar10", "max_epochs": 10})
    assert h != matrix_hash(plans[:1], {"task": "cifar10", "max_epochs": 25})
    assert h != matrix_hash(create_generation_matrix(["baseline"], ["baseline"], 2, base_seed=1),
                            {"task": "cifar10", "max_epochs": 25})


def test_twin_curves_round_trip_and_task() -> None:
    plan = TwinPlan("baseline", 42)
    twin = plan.curves({"twin_id": plan.twin_id, "val_accuracy_curve": [1, None], "val_loss_curve": [2.0, 1.5]})
    assert twin.env_seed == 42 and twin.accuracy_curve[0] == 1.0 and math.isnan(twin.accuracy_curve[1])
    assert plan.twin_block(twin)["val_loss_curve"] == [2.0, 1.5] and plan.twin_block(twin)["twin_id"] == plan.twin_id
    task = EpisodeTask(GenerationPlan("baseline", "baseline", 0.0, 0), twin)
    assert task.twin is twin
