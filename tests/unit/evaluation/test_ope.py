"""Off-policy evaluation: PDWIS against its definition, CI containment of the behaviour policy's own return,
correct ranking of two target policies, and clear errors for unusable target policies."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from esper.data.tasks import get_task_spec
from esper.datagen import TransitionDataset
from esper.env.features import obs_dim
from esper.evaluation.ope import (
    OPEConfig,
    TargetPolicy,
    behavior_returns,
    episode_returns,
    evaluate_offline,
    fqe,
    pdwis,
)
from esper.simic.iql import IQLConfig, IQLPolicy, train_iql
from unit.offline_toy import VALUE, behavior_probs, episodes_subset, fixed_policy, toy_dataset

CNN = get_task_spec("synthetic").action_space
NUM_JOINT_ACTIONS, OBS_DIM = CNN.num_joint_actions, obs_dim(CNN)  # 43 and 80 with the built-in blueprints

CONFIG = OPEConfig(gamma=1.0, n_bootstrap=300, fqe_bootstrap=10, fqe_iterations=3, fqe_steps_per_iteration=150,
                   fqe_batch_size=128, fqe_lr=3e-3, fqe_hidden_sizes=(32, 32), device="cpu")


@pytest.fixture(scope="module")
def noisy() -> TransitionDataset:
    return toy_dataset(150, seed=0, reward_noise=0.5)


def test_behavior_policy_value_lies_in_both_intervals(noisy: TransitionDataset) -> None:
    empirical = behavior_returns(noisy, CONFIG)[0]
    assert empirical.return_ci[0] < empirical.mean_return < empirical.return_ci[1]
    result = evaluate_offline(noisy, behavior_probs, CONFIG)
    wis, fitted = result.pdwis, result.fqe
    assert wis.value == pytest.approx(empirical.mean_return, abs=1e-6)  # weights are all 1 on its own data
    assert wis.details["ess"] == pytest.approx(150.0)
    for estimate in (wis, fitted):
        assert estimate.ci_low <= empirical.mean_return <= estimate.ci_high, estimate
        assert estimate.ci_low <= estimate.value <= estimate.ci_high
    assert result.to_dict()["behavior"][0]["policy"] == "all"


def test_both_estimators_rank_best_above_lure(noisy: TransitionDataset) -> None:
    best, lure = fixed_policy("best"), fixed_policy("lure")
    for estimator in (pdwis, fqe):
        high, low = estimator(noisy, best, CONFIG), estimator(noisy, lure, CONFIG)
        assert high.value > low.value and high.ci_low > low.ci_high, (high, low)
        assert high.value == pytest.approx(VALUE["best"], abs=0.25)
        assert low.value == pytest.approx(VALUE["lure"], abs=0.25)


def test_iql_policy_is_evaluated_above_the_behaviour() -> None:
    data = toy_dataset(300)
    learner = train_iql(IQLConfig(epochs=1, steps_per_epoch=150, batch_size=64, hidden_sizes=[32, 32], lr=3e-3,
                                  polyak=0.05, gamma=1.0, device="cpu", seed=0), data)
    estimate = pdwis(data, IQLPolicy.from_learner(learner).action_probs, CONFIG)
    assert estimate.value == pytest.approx(VALUE["best"], abs=1e-5)
    assert estimate.value > VALUE["behavior"]
    assert 0 < estimate.details["matched_episodes"] < 300


def _naive_pdwis(data: TransitionDataset, target_probs: torch.Tensor, gamma: float) -> float:
    """The definition, looped: Σ_t γ^t Σ_i w_it r_it / Σ_i w_it, ended episodes keeping their last weight."""
    episodes: dict[int, list[tuple[int, int]]] = {}
    for row, (e, t) in enumerate(zip(data.episode_ids.tolist(), data.step_indices.tolist(), strict=True)):
        episodes.setdefault(e, []).append((t, row))
    horizon = max(len(v) for v in episodes.values())
    weights: dict[int, list[float]] = {e: [] for e in episodes}
    for e, steps in episodes.items():
        w = 1.0
        for _, row in sorted(steps):
            w *= float(target_probs[row, data.actions[row]]) / float(data.behavior_logp[row].double().exp())
            weights[e].append(w)
    total = 0.0
    for t in range(horizon):
        num = den = 0.0
        for e, steps in episodes.items():
            w = weights[e][min(t, len(steps) - 1)]
            r = float(data.rewards[sorted(steps)[t][1]]) if t < len(steps) else 0.0
            num, den = num + w * r, den + w
        total += gamma**t * num / den
    return total


def _random_problem(lengths: list[int], seed: int) -> tuple[TransitionDataset, torch.Tensor, TargetPolicy]:
    """Episodes of the given lengths over 4 always-valid actions, a random behaviour and a random target policy."""
    g = torch.Generator().manual_seed(seed)
    n, k = sum(lengths), 4
    eps = torch.repeat_interleave(torch.arange(len(lengths)), torch.tensor(lengths))
    steps = torch.cat([torch.arange(m) for m in lengths])
    dones = torch.zeros(n, dtype=torch.bool)
    dones[torch.cumsum(torch.tensor(lengths), 0) - 1] = True
    states = torch.randn(n + len(lengths), OBS_DIM, generator=g)
    slot = torch.arange(n) + eps
    valid = torch.zeros(n, NUM_JOINT_ACTIONS, dtype=torch.bool)
    valid[:, :k] = True
    behaviour = torch.softmax(torch.randn(n, k, generator=g), 1)
    actions = torch.multinomial(behaviour, 1, generator=g).squeeze(1)
    data = TransitionDataset(states=states[slot], actions=actions, rewards=torch.randn(n, generator=g),
                             next_states=states[slot + 1], dones=dones, valid=valid, next_valid=valid.clone(),
                             behavior_logp=behaviour.gather(1, actions.unsqueeze(1)).squeeze(1).log(),
                             episode_ids=eps, step_indices=steps)
    target = torch.zeros(n + len(lengths), NUM_JOINT_ACTIONS)
    target[:, :k] = torch.softmax(torch.randn(n + len(lengths), k, generator=g), 1)
    lookup = {tuple(s.tolist()): p for s, p in zip(states, target, strict=True)}

    def policy(s: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return torch.stack([lookup[tuple(row.tolist())] for row in s]) if len(s) else torch.zeros(0, v.shape[1])

    return data, target[slot], policy


@settings(max_examples=15, deadline=None)
@given(lengths=st.lists(st.integers(1, 4), min_size=1, max_size=5), seed=st.integers(0, 10_000),
       gamma=st.sampled_from([1.0, 0.9]))
def test_pdwis_matches_its_definition(lengths: list[int], seed: int, gamma: float) -> None:
    data, target, policy = _random_problem(lengths, seed)
    config = OPEConfig(gamma=gamma, n_bootstrap=10)
    assert pdwis(data, policy, config).value == pytest.approx(_naive_pdwis(data, target, gamma), rel=1e-6, abs=1e-9)


def test_fqe_handles_one_step_episodes() -> None:
    """A bandit: every row is terminal, so the target policy is never asked about a next state."""
    data, _, policy = _random_problem([1] * 40, seed=3)
    estimate = fqe(data, policy, CONFIG.model_copy(update={"fqe_iterations": 1, "fqe_steps_per_iteration": 20}))
    assert all(map(math.isfinite, (estimate.value, estimate.ci_low, estimate.ci_high)))
    assert estimate.n_episodes == 40 and estimate.method == "fqe"


def test_bootstrap_is_seeded(noisy: TransitionDataset) -> None:
    a, b = pdwis(noisy, behavior_probs, CONFIG), pdwis(noisy, behavior_probs, CONFIG)
    assert (a.ci_low, a.ci_high) == (b.ci_low, b.ci_high)
    c = pdwis(noisy, behavior_probs, CONFIG.model_copy(update={"seed": 1}))
    assert (c.ci_low, c.ci_high) != (a.ci_low, a.ci_high)


def test_returns_per_episode_and_per_behaviour_policy() -> None:
    data = toy_dataset(6)
    labelled = dataclasses.replace(data, behavior_policies={i: "odd" if i % 2 else "even" for i in range(6)})
    ids, plain, discounted = episode_returns(labelled, gamma=0.5)
    first = labelled.rewards[labelled.episode_ids == 0]
    assert ids.tolist() == list(range(6))
    assert plain[0].item() == pytest.approx(float(first.sum()))
    assert discounted[0].item() == pytest.approx(float(first[0] + 0.5 * first[1]))
    summaries = {s.policy: s for s in behavior_returns(labelled, OPEConfig(gamma=0.5, n_bootstrap=20))}
    assert set(summaries) == {"all", "even", "odd"} and summaries["odd"].n_episodes == 3
    assert summaries["all"].mean_return == pytest.approx(float(plain.mean()))
    assert summaries["all"].mean_discounted_return == pytest.approx(float(discounted.mean()))


def test_unusable_target_policies_raise_clear_errors(noisy: TransitionDataset) -> None:
    def uniform_over_all(s: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return torch.full((len(s), NUM_JOINT_ACTIONS), 1.0 / NUM_JOINT_ACTIONS)

    with pytest.raises(ValueError, match="invalid actions"):
        pdwis(noisy, uniform_over_all, CONFIG)
    with pytest.raises(ValueError, match="shape"):
        pdwis(noisy, lambda s, v: torch.ones(len(s), 3), CONFIG)
    with pytest.raises(ValueError, match="sum to 1"):
        pdwis(noisy, lambda s, v: v.float(), CONFIG)
    lure_only = episodes_subset(noisy, torch.tensor(
        [e for e, a, lure in zip(noisy.episode_ids.tolist(), noisy.actions.tolist(), _lures(noisy), strict=True)
         if a == lure]))
    unsupported = pdwis(lure_only, fixed_policy("best"), CONFIG)  # no logged episode ever took the best action
    assert math.isnan(unsupported.value) and unsupported.details["matched_episodes"] == 0.0


def _lures(data: TransitionDataset) -> list[int]:
    """The lure action of each row's state (-1 at follow-up states)."""
    lure = fixed_policy("lure")(data.states, data.valid).argmax(1)
    return torch.where(data.step_indices == 0, lure, -1).tolist()


def test_config_is_strict() -> None:
    with pytest.raises(ValueError, match="gamma"):
        OPEConfig.from_dict({"gamma": 0.0})
    with pytest.raises(ValueError, match=r"Unknown OPE config keys: \['gama'\]. Valid keys: gamma, confidence"):
        OPEConfig.from_dict({"gama": 0.9})
    with pytest.raises(ValueError, match="n_bootstrap: Input should be a valid integer, got true"):
        OPEConfig.from_dict({"n_bootstrap": True})
    with pytest.raises(ValueError, match="confidence"):
        OPEConfig.from_dict({"confidence": float("nan")})
