"""IQL end to end on the toy problem: it recovers the best action where cloning the data does not; exact resume;
the checkpoint format; divergence and incompatibility are errors."""

from __future__ import annotations

import dataclasses
import math
import random
from pathlib import Path

import pytest
import torch

from esper.datagen import TransitionDataset
from esper.simic.iql import EPOCH_METRICS, IQL_FORMAT, IQLConfig, IQLLearner, IQLPolicy, load_iql_checkpoint, train_iql
from esper.storage.checkpoint import CheckpointFormatError
from unit.offline_toy import START, encode, mask, toy_dataset

TOY = IQLConfig(epochs=2, steps_per_epoch=75, batch_size=64, hidden_sizes=[32, 32], lr=3e-3, polyak=0.05,
                gamma=1.0, device="cpu", seed=0, agreement_samples=200)


@pytest.fixture(scope="module")
def data() -> TransitionDataset:
    return toy_dataset(300)


def _start_choices(learner: IQLLearner) -> list[int]:
    states = torch.stack([encode(s, 0) for s in START])
    valid = torch.stack([mask(START[s][0]) for s in START])
    return IQLPolicy.from_learner(learner).action_probs(states, valid).argmax(1).tolist()


def test_iql_recovers_the_best_action_and_cloning_picks_the_lure(data: TransitionDataset) -> None:
    best = [START[s][1] for s in START]
    lure = [START[s][2] for s in START]
    assert _start_choices(train_iql(TOY, data)) == best
    assert _start_choices(train_iql(TOY.with_overrides(beta=0.0), data)) == lure


def test_epoch_metrics_are_reported_and_finite(data: TransitionDataset) -> None:
    seen: list[dict[str, float]] = []
    train_iql(TOY.with_overrides(steps_per_epoch=20), data, on_epoch=lambda _, m: seen.append(m))
    assert [m["epoch"] for m in seen] == [1.0, 2.0] and seen[-1]["steps"] == 40.0
    for m in seen:
        assert set(EPOCH_METRICS) <= set(m) and all(math.isfinite(v) for v in m.values())
        assert 0.0 <= m["agreement"] <= 1.0 and 0.0 <= m["frac_weight_clipped"] <= 1.0


def test_should_stop_ends_at_an_epoch_boundary(data: TransitionDataset) -> None:
    learner = train_iql(TOY.with_overrides(steps_per_epoch=5, epochs=10), data, should_stop=lambda: True)
    assert learner.epochs_completed == 1 and learner.steps_completed == 5


def test_construction_leaves_global_rng_alone_and_depends_only_on_the_seed(data: TransitionDataset) -> None:
    before = torch.get_rng_state()
    a, b = IQLLearner.for_dataset(TOY, data), IQLLearner.for_dataset(TOY, data)
    assert torch.equal(torch.get_rng_state(), before)
    assert all(torch.equal(x, y) for x, y in zip(a.policy.parameters(), b.policy.parameters(), strict=True))


def test_resume_from_a_checkpoint_is_exact(data: TransitionDataset, tmp_path: Path) -> None:
    cfg = TOY.with_overrides(steps_per_epoch=15)
    straight = train_iql(cfg, data)
    half = train_iql(cfg.with_overrides(epochs=1), data)
    half.save(tmp_path / "latest.pt")
    random.seed(0)
    torch.manual_seed(123)  # a resumed process starts with other global RNG state
    resumed = IQLLearner.from_checkpoint(load_iql_checkpoint(tmp_path / "latest.pt"), config=cfg, device="cpu")
    resumed = train_iql(cfg, data, learner=resumed)
    assert resumed.epochs_completed == 2 and resumed.steps_completed == straight.steps_completed
    for name, net in straight.networks().items():
        for p, q in zip(net.parameters(), resumed.networks()[name].parameters(), strict=True):
            assert torch.equal(p, q), name


def test_checkpoint_is_a_plain_weights_only_dict(data: TransitionDataset, tmp_path: Path) -> None:
    learner = train_iql(TOY.with_overrides(epochs=1, steps_per_epoch=3), data)
    learner.save(tmp_path / "final.pt")
    payload = torch.load(tmp_path / "final.pt", weights_only=True)
    assert payload["format"] == IQL_FORMAT and payload["feature_schema"] == "esper-obs-v1"
    assert (payload["state_dim"], payload["action_dim"]) == (80, 43)
    assert {"q1", "q2", "v", "policy", "q1_target", "q2_target", "optimizers", "obs_mean", "obs_var", "config",
            "generator", "topology", "slots"} <= set(payload)
    assert set(payload["optimizers"]) == {"q", "v", "policy"}
    assert IQLConfig.from_dict(payload["config"]) == learner.config
    (tmp_path / "run" / "checkpoints").mkdir(parents=True)
    learner.save(tmp_path / "run" / "checkpoints" / "final.pt")
    assert load_iql_checkpoint(tmp_path / "run")["steps_completed"] == 3


def test_non_finite_checkpoint_is_rejected(data: TransitionDataset, tmp_path: Path) -> None:
    learner = IQLLearner.for_dataset(TOY, data)
    payload = learner.checkpoint()
    payload["policy"]["0.weight"][0, 0] = float("nan")
    torch.save(payload, tmp_path / "bad.pt")
    with pytest.raises(CheckpointFormatError, match="non-finite"):
        load_iql_checkpoint(tmp_path / "bad.pt")


def test_divergence_stops_training_with_an_error(data: TransitionDataset) -> None:
    huge = dataclasses.replace(data, rewards=torch.full_like(data.rewards, 3e38))
    with pytest.raises(FloatingPointError, match="diverged"):
        train_iql(TOY.with_overrides(epochs=1, steps_per_epoch=2), huge)


def test_resume_refuses_changed_hyperparameters_or_data(data: TransitionDataset) -> None:
    learner = IQLLearner.for_dataset(TOY, data)
    with pytest.raises(ValueError, match=r"\['beta'\]"):
        train_iql(TOY.with_overrides(beta=1.0), data, learner=learner)
    with pytest.raises(ValueError, match=r"\['beta'\]"):
        IQLLearner.from_checkpoint(learner.checkpoint(), config=TOY.with_overrides(beta=1.0))
    other = dataclasses.replace(data, slots=("early", "mid"))
    with pytest.raises(ValueError, match="slots"):
        train_iql(TOY, other, learner=learner)
