"""PPOAgent (§6.7, §6.8): API, update mechanics, metrics, schedule, persistence and a toy learning problem."""

from __future__ import annotations

import inspect
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from esper.env.masks import compute_action_masks, compute_batch_masks
from esper.leyline import FactoredAction, MaskSeedInfo, SeedStage, compute_action_validity
from esper.runtime.checkpoint import CheckpointFormatError
from esper.simic.ppo.agent import PPOAgent
from esper.simic.ppo.network import FactoredActorCritic

D = 50
METRICS = {
    "policy_loss", "value_loss", "entropy", "entropy_op", "entropy_slot", "entropy_blueprint", "entropy_blend",
    "approx_kl", "clip_fraction", "ratio_mean", "ratio_std", "ratio_max", "ratio_min", "explained_variance",
    "grad_norm", "entropy_coef", "n_minibatch_updates",
}
OPTIONAL = {"early_stopped", "early_stop_epoch", "ratio_diagnostic"}


@pytest.fixture(autouse=True)
def _one_thread() -> Iterator[None]:
    """Tiny networks: intra-op threads only add contention on a shared 2-core machine."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


def open_masks(op: list[bool] | None = None) -> dict[str, torch.Tensor]:
    return {
        "slot": torch.ones(3, dtype=torch.bool),
        "blueprint": torch.ones(5, dtype=torch.bool),
        "blend": torch.ones(3, dtype=torch.bool),
        "op": torch.tensor(op or [True] * 4),
    }


def fill(agent: PPOAgent, n: int = 20, masks: dict[str, torch.Tensor] | None = None, logp_shift: float = 0.0) -> None:
    masks = masks or open_masks()
    for i in range(n):
        state = torch.randn(D)
        action, log_prob, value, _ = agent.get_action(state, masks)
        agent.store_factored_transition(state, action, log_prob + logp_shift, value, float(i % 5), i == n - 1, masks)


def small_agent(**kwargs: object) -> PPOAgent:
    defaults: dict[str, object] = {"hidden_dim": 32, "n_epochs": 2, "batch_size": 8}
    defaults.update(kwargs)
    return PPOAgent(D, **defaults)  # type: ignore[arg-type]


# --- construction and acting -------------------------------------------------------------------------------------
def test_construction() -> None:
    agent = small_agent(lr=1e-3)
    assert isinstance(agent.network, FactoredActorCritic)
    group = agent.optimizer.param_groups[0]
    assert isinstance(agent.optimizer, torch.optim.Adam) and group["eps"] == 1e-5 and group["lr"] == 1e-3
    params = inspect.signature(PPOAgent).parameters
    assert "factored" not in params and "compile_network" not in params
    with pytest.raises(ValueError, match="entropy_coef_min"):
        small_agent(entropy_coef=0.01, entropy_coef_min=0.05)
    with pytest.raises(ValueError, match="target_kl"):
        small_agent(target_kl=0.0)


def test_get_action_returns_python_values_for_batched_and_unbatched_masks() -> None:
    agent = small_agent()
    batched = {k: v.unsqueeze(0) for k, v in open_masks([True, True, False, False]).items()}
    for masks in (batched, open_masks([True, True, False, False])):
        action, log_prob, value, used = agent.get_action(torch.randn(1, D), masks)
        assert set(action) == {"slot", "blueprint", "blend", "op"}
        assert all(isinstance(v, int) for v in action.values())
        assert isinstance(log_prob, float) and isinstance(value, float)
        assert action["op"] in (0, 1) and used["op"].shape == (4,)


def test_action_sampling_is_seeded() -> None:
    masks = compute_batch_masks([compute_action_validity({"early": None, "mid": None, "late": None})] * 32)
    states = torch.randn(32, D)
    a = PPOAgent(D, hidden_dim=32, seed=3).get_action_batch(states, masks)[0]
    b = PPOAgent(D, hidden_dim=32, seed=3).get_action_batch(states, masks)[0]
    assert all(torch.equal(a[k], b[k]) for k in a)


# --- update ------------------------------------------------------------------------------------------------------
def test_update_on_empty_buffer_returns_empty_dict() -> None:
    assert small_agent().update_factored() == {}


def test_update_reports_exactly_the_contract_metrics() -> None:
    agent = small_agent(target_kl=None)
    fill(agent, 20)
    metrics = agent.update_factored()
    assert set(metrics) >= METRICS and set(metrics) - METRICS <= OPTIONAL
    assert metrics["n_minibatch_updates"] == 2 * 3  # n_epochs × ceil(20 / 8)
    assert len(agent.buffer) == 0 and agent.train_steps == 1
    assert all(isinstance(metrics[k], float) for k in METRICS - {"n_minibatch_updates"})
    assert 0.0 <= metrics["entropy_op"] <= 1.0 and metrics["ratio_min"] <= metrics["ratio_mean"] <= metrics["ratio_max"]


def test_first_minibatch_sees_ratio_one_and_the_value_loss_formula() -> None:
    agent = small_agent(n_epochs=1, batch_size=64, target_kl=None)
    fill(agent, 20)
    returns, advantages = agent.buffer.compute_returns_and_advantages(0.0, agent.gamma, agent.gae_lambda)
    values = torch.tensor([t.value for t in agent.buffer.steps])
    metrics = agent.update_factored()
    assert metrics["ratio_mean"] == pytest.approx(1.0, abs=1e-5) and metrics["ratio_std"] < 1e-5
    assert metrics["approx_kl"] == pytest.approx(0.0, abs=1e-6) and metrics["clip_fraction"] == 0.0
    assert metrics["policy_loss"] == pytest.approx(0.0, abs=1e-5)  # −mean of normalized advantages
    assert metrics["value_loss"] == pytest.approx(0.5 * ((values - returns) ** 2).mean().item(), rel=1e-4)
    ev = 1 - advantages.var(correction=0) / returns.var(correction=0)
    assert metrics["explained_variance"] == pytest.approx(ev.item(), rel=1e-5)


def test_target_kl_stops_early_inside_the_loop() -> None:
    agent = small_agent(hidden_dim=64, n_epochs=100, target_kl=0.001, batch_size=64)
    fill(agent, 20)
    metrics = agent.update_factored()
    assert metrics["early_stopped"] == 1.0
    assert 1 <= metrics["early_stop_epoch"] < 100
    assert metrics["n_minibatch_updates"] == metrics["early_stop_epoch"]  # one minibatch per epoch here


def test_no_early_stop_without_target_kl() -> None:
    agent = small_agent(n_epochs=3, target_kl=None)
    fill(agent, 10)
    metrics = agent.update_factored()
    assert "early_stopped" not in metrics and metrics["n_minibatch_updates"] == 3 * 2


def test_per_head_entropy_counts_only_relevant_steps() -> None:
    agent = small_agent()
    fill(agent, 12, masks=open_masks([True, False, False, False]))  # only WAIT is valid
    metrics = agent.update_factored()
    assert metrics["entropy"] == pytest.approx(0.0, abs=1e-6)
    assert metrics["entropy_op"] == pytest.approx(0.0, abs=1e-6)
    assert metrics["entropy_slot"] == metrics["entropy_blueprint"] == metrics["entropy_blend"] == 0.0
    agent = small_agent()
    fill(agent, 40, masks=open_masks([False, True, False, False]))  # only GERMINATE: all heads relevant
    metrics = agent.update_factored()
    assert metrics["entropy_op"] == pytest.approx(0.0, abs=1e-6)
    for head in ("slot", "blueprint", "blend"):
        assert metrics[f"entropy_{head}"] > 0.9  # near-uniform at init


def test_ratio_explosion_attaches_a_diagnostic() -> None:
    agent = small_agent(n_epochs=1)
    fill(agent, 16, logp_shift=-3.0)  # stored log-probs too low → ratio ≈ e³ ≈ 20
    metrics = agent.update_factored()
    assert metrics["ratio_max"] > 5.0
    diag = metrics["ratio_diagnostic"]
    assert diag["n_exploded"] > 0 and len(diag["worst_indices"]) > 0
    agent = small_agent(n_epochs=1)
    fill(agent, 16)
    assert "ratio_diagnostic" not in agent.update_factored()


def test_clear_buffer_false_keeps_transitions() -> None:
    agent = small_agent()
    fill(agent, 10)
    agent.update_factored(clear_buffer=False)
    assert len(agent.buffer) == 10 and agent.train_steps == 1
    agent.update_factored()
    assert len(agent.buffer) == 0 and agent.train_steps == 2


def test_entropy_coefficient_schedule() -> None:
    constant = small_agent(entropy_coef=0.05)
    fill(constant, 8)
    assert constant.update_factored()["entropy_coef"] == 0.05 and constant.get_entropy_coef() == 0.05
    agent = small_agent(entropy_coef=0.05, entropy_coef_min=0.01, entropy_anneal_steps=4, n_epochs=1)
    used = []
    for _ in range(6):
        fill(agent, 8)
        used.append(agent.update_factored()["entropy_coef"])
    assert used == pytest.approx([0.05, 0.04, 0.03, 0.02, 0.01, 0.01])


def test_updates_are_reproducible_for_a_seed() -> None:
    agents = []
    for _ in range(2):
        torch.manual_seed(0)  # network init uses the global RNG (the trainer seeds it per batch)
        agent = small_agent(seed=7)
        fill(agent, 20)
        agent.update_factored()
        agents.append(agent)
    for p, q in zip(agents[0].network.parameters(), agents[1].network.parameters()):
        assert torch.equal(p, q)


# --- persistence -------------------------------------------------------------------------------------------------
def test_save_and_load_round_trip(tmp_path: Path) -> None:
    agent = small_agent(seed=11, entropy_anneal_steps=5)
    fill(agent, 12)
    agent.update_factored()
    path = tmp_path / "agent.pt"
    agent.save(path)
    assert not (tmp_path / "agent.pt.tmp").exists()
    raw = torch.load(path, weights_only=True)
    assert raw["format"] == "esper-ppo-agent-v1" and raw["train_steps"] == 1
    loaded = PPOAgent.load(path)
    assert loaded.hparams() == agent.hparams() and loaded.train_steps == 1
    assert loaded.get_entropy_coef() == agent.get_entropy_coef()
    for p, q in zip(agent.network.parameters(), loaded.network.parameters()):
        assert torch.equal(p, q)
    masks = compute_batch_masks([compute_action_validity({"early": None, "mid": None})] * 16)
    states = torch.randn(16, D)
    a, b = agent.get_action_batch(states, masks)[0], loaded.get_action_batch(states, masks)[0]
    assert all(torch.equal(a[k], b[k]) for k in a)  # action generator state restored
    assert torch.equal(agent.minibatch_generator.get_state(), loaded.minibatch_generator.get_state())
    # Optimizer state restored: one more identical update gives identical parameters.
    for x in (agent, loaded):
        torch.manual_seed(1)
        fill(x, 12)
        x.update_factored()
    for p, q in zip(agent.network.parameters(), loaded.network.parameters()):
        assert torch.equal(p, q)


def test_load_rejects_other_formats(tmp_path: Path) -> None:
    path = tmp_path / "other.pt"
    torch.save({"format": "esper-model-v1"}, path)
    with pytest.raises(CheckpointFormatError, match="esper-ppo-agent-v1"):
        PPOAgent.load(path)


# --- toy learning problem ------------------------------------------------------------------------------------------
# Four contexts (one-hot observations), each a lifecycle state with its own masks and one rewarded factored action.
TOY_CONTEXTS = [
    ({"early": MaskSeedInfo(SeedStage.FOSSILIZED, 9), "mid": None, "late": None}, {"op": 0}),
    ({"early": None, "mid": None, "late": None}, {"op": 1, "slot": 1, "blueprint": 2, "blend": 1}),
    ({"early": None, "mid": MaskSeedInfo(SeedStage.TRAINING, 4), "late": MaskSeedInfo(SeedStage.TRAINING, 2)},
     {"op": 2, "slot": 2}),
    ({"early": MaskSeedInfo(SeedStage.PROBATIONARY, 8), "mid": MaskSeedInfo(SeedStage.BLENDING, 3), "late": None},
     {"op": 3, "slot": 0}),
]
TOY_VALIDITY = [compute_action_validity(s, total_seeds=sum(v is not None for v in s.values())) for s, _ in TOY_CONTEXTS]
TOY_SUB_HEADS = {0: (), 1: ("slot", "blueprint", "blend"), 2: ("slot",), 3: ("slot",)}


def toy_reward(context: int, action: dict[str, int]) -> float:
    """1 for the exact target; partial credit for the right op with some right sub-heads; 0 for a wrong op."""
    target = TOY_CONTEXTS[context][1]
    if action["op"] != target["op"]:
        return 0.0
    heads = TOY_SUB_HEADS[target["op"]]
    return (1 + sum(action[h] == target[h] for h in heads)) / (1 + len(heads))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_ppo_learns_a_masked_factored_bandit(seed: int) -> None:
    start = time.perf_counter()
    agent = PPOAgent(4, lr=3e-3, hidden_dim=64, n_epochs=4, batch_size=64, entropy_coef=0.01, seed=seed)
    contexts_gen = torch.Generator().manual_seed(seed)
    eye = torch.eye(4)
    mean_rewards = []
    for _ in range(30):
        contexts = torch.randint(0, 4, (64,), generator=contexts_gen).tolist()
        states = eye[contexts]
        actions, log_probs, values, used = agent.get_action_batch(states, compute_batch_masks(
            [TOY_VALIDITY[c] for c in contexts]))
        rewards = []
        for i, c in enumerate(contexts):
            action = {k: int(v[i]) for k, v in actions.items()}
            factored = FactoredAction.from_indices(action["slot"], action["blueprint"], action["blend"], action["op"])
            assert TOY_VALIDITY[c].is_valid(factored), f"masked action sampled: {action} in context {c}"
            rewards.append(toy_reward(c, action))
            agent.store_factored_transition(states[i], action, log_probs[i], values[i], rewards[-1], True,
                                            {k: m[i] for k, m in used.items()}, env_id=i)
        agent.update_factored()
        mean_rewards.append(sum(rewards) / len(rewards))
    greedy, *_ = agent.get_action_batch(eye, compute_batch_masks(TOY_VALIDITY), deterministic=True)
    assert [toy_reward(c, {k: int(v[c]) for k, v in greedy.items()}) for c in range(4)] == [1.0] * 4
    assert mean_rewards[0] < 0.6 < 0.9 < sum(mean_rewards[-5:]) / 5
    assert time.perf_counter() - start < 15.0


def test_masks_for_single_env_use_compute_action_masks() -> None:
    masks = compute_action_masks({"early": None, "mid": None, "late": None}, total_seeds=0, max_seeds=3)
    action, *_ = small_agent().get_action(torch.randn(D), masks)
    assert action["op"] in (0, 1) and (action["op"] == 1 or action["slot"] == 0)
