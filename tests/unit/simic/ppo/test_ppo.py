"""PPOAgent: construction from a PPOConfig alone, update mechanics, metrics, schedule, state and a toy problem."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
import torch

from esper.data.tasks import get_task_spec
from esper.env import masks
from esper.env.masks import compute_batch_masks
from esper.leyline import ActionSpace, ActionValidity, MaskSeedInfo, SeedStage
from esper.leyline import compute_action_validity as leyline_validity
from esper.leyline.constants import DEFAULT_GAMMA
from esper.simic.ppo.agent import PPOAgent
from esper.simic.ppo.buffer import PolicyStep, RolloutBuffer
from esper.simic.ppo.network import FactoredActorCritic
from esper.simic.ppo.ppo_config import PPOConfig

CNN = get_task_spec("synthetic").action_space


def compute_action_validity(states: dict[str, MaskSeedInfo | None], **kwargs: int) -> ActionValidity:
    return leyline_validity(states, space=CNN, **kwargs)

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


def act_one(agent: PPOAgent, state: torch.Tensor, masks: dict[str, torch.Tensor]
            ) -> tuple[dict[str, int], float, float, dict[str, torch.Tensor]]:
    actions, log_probs, values, used = agent.act(state.reshape(1, -1), {k: v.unsqueeze(0) for k, v in masks.items()})
    return ({k: int(v[0]) for k, v in actions.items()}, float(log_probs[0]), float(values[0]),
            {k: v[0] for k, v in used.items()})


def fill(agent: PPOAgent, n: int = 20, masks: dict[str, torch.Tensor] | None = None, logp_shift: float = 0.0
         ) -> RolloutBuffer:
    """One env's episode of `n` steps, acted on by the agent (rewards 0, 1, 2, 3, 4, 0, ...)."""
    masks = masks or open_masks()
    buffer = RolloutBuffer(n, 1, D, CNN.num_blueprints)
    for t in range(n):
        state = torch.randn(1, D)
        actions, log_probs, values, used = agent.act(state, {k: v.unsqueeze(0) for k, v in masks.items()})
        buffer.add(t, PolicyStep(state, state, actions, log_probs + logp_shift, values, used, []))
        buffer.credit(t, [0], [float(t % 5)], [t == n - 1])
    return buffer


def update(agent: PPOAgent, buffer: RolloutBuffer) -> dict[str, Any]:
    c = agent.config
    return agent.update(buffer, *buffer.advantages(c.advantage, DEFAULT_GAMMA, c.gae_lambda, c.group_size))


def small_agent(state_dim: int = D, seed: int = 42, **fields: object) -> PPOAgent:
    """An agent from a PPOConfig; n_envs = ppo_updates_per_batch = 1, so anneal episodes count update calls."""
    defaults: dict[str, object] = {"hidden_dim": 32, "n_epochs": 2, "minibatch_size": 8, "n_envs": 1, "group_size": 1,
                                   "n_episodes": 1}
    defaults.update(fields)
    return PPOAgent(PPOConfig.from_dict(defaults), seed=seed, state_dim=state_dim, space=CNN)


# --- construction and acting -------------------------------------------------------------------------------------
def test_an_agent_is_built_from_a_ppo_config_alone() -> None:
    """PPOAgent receives the policy's PPOConfig and the run's seed, never the run's whole TrainingConfig: its
    episode setting, reward and placement are none of its business."""
    config = PPOConfig(hidden_dim=16, lr=1e-3)
    agent = PPOAgent(config, seed=5, state_dim=D, space=CNN)
    assert agent.config is config and agent.seed == 5 and agent.optimizer.param_groups[0]["lr"] == 1e-3
    residual = PPOAgent(config.with_overrides(teacher="heuristic"), seed=5, state_dim=D, space=CNN)
    assert residual.network.residual and len(residual.optimizer.param_groups) == 2


def test_construction_follows_the_config() -> None:
    agent = small_agent(lr=1e-3, hidden_dim=48)
    assert isinstance(agent.network, FactoredActorCritic)
    group = agent.optimizer.param_groups[0]
    assert isinstance(agent.optimizer, torch.optim.Adam) and group["eps"] == 1e-5 and group["lr"] == 1e-3
    assert agent.network.trunk[0].out_features == 48
    with pytest.raises(ValueError, match="entropy_coef_min"):
        small_agent(entropy_coef=0.01, entropy_coef_min=0.05)
    with pytest.raises(ValueError, match="target_kl"):
        small_agent(target_kl=0.0)
    with pytest.raises(ValueError, match="blueprint head must be 'noop'"):
        PPOAgent(PPOConfig(), seed=0, state_dim=D, space=ActionSpace("cnn", ("conv_light",)))


def test_act_returns_batched_actions_within_the_masks() -> None:
    agent = small_agent()
    action, _, _, used = act_one(agent, torch.randn(D), open_masks([True, True, False, False]))
    assert set(action) == {"slot", "blueprint", "blend", "op"}
    assert action["op"] in (0, 1) and used["op"].shape == (4,)


def test_action_sampling_is_seeded() -> None:
    masks = compute_batch_masks([compute_action_validity({"early": None, "mid": None, "late": None})] * 32)
    states = torch.randn(32, D)
    a = small_agent(seed=3).act(states, masks)[0]
    b = small_agent(seed=3).act(states, masks)[0]
    assert all(torch.equal(a[k], b[k]) for k in a)


# --- update ------------------------------------------------------------------------------------------------------
def test_update_reports_exactly_the_contract_metrics() -> None:
    agent = small_agent(target_kl=None)
    metrics = update(agent, fill(agent, 20))
    assert set(metrics) >= METRICS and set(metrics) - METRICS <= OPTIONAL
    assert metrics["n_minibatch_updates"] == 2 * 3  # n_epochs × ceil(20 / 8)
    assert agent.train_steps == 1
    assert all(isinstance(metrics[k], float) for k in METRICS - {"n_minibatch_updates"})
    assert 0.0 <= metrics["entropy_op"] <= 1.0 and metrics["ratio_min"] <= metrics["ratio_mean"] <= metrics["ratio_max"]


def test_first_minibatch_sees_ratio_one_and_the_value_loss_formula() -> None:
    agent = small_agent(n_epochs=1, minibatch_size=64, target_kl=None)
    buffer = fill(agent, 20)
    returns, advantages = buffer.advantages("gae", DEFAULT_GAMMA, agent.config.gae_lambda, 1)
    values = buffer.values[:, 0]
    metrics = agent.update(buffer, returns, advantages)
    assert metrics["ratio_mean"] == pytest.approx(1.0, abs=1e-5) and metrics["ratio_std"] < 1e-5
    assert metrics["approx_kl"] == pytest.approx(0.0, abs=1e-6) and metrics["clip_fraction"] == 0.0
    assert metrics["policy_loss"] == pytest.approx(0.0, abs=1e-5)  # −mean of normalized advantages
    assert metrics["value_loss"] == pytest.approx(0.5 * ((values - returns) ** 2).mean().item(), rel=1e-4)
    ev = 1 - advantages.var(correction=0) / returns.var(correction=0)
    assert metrics["explained_variance"] == pytest.approx(ev.item(), rel=1e-5)


def test_target_kl_stops_early_inside_the_loop() -> None:
    agent = small_agent(hidden_dim=64, n_epochs=100, target_kl=0.001, minibatch_size=64)
    metrics = update(agent, fill(agent, 20))
    assert metrics["early_stopped"] == 1.0
    assert 1 <= metrics["early_stop_epoch"] < 100
    assert metrics["n_minibatch_updates"] == metrics["early_stop_epoch"]  # one minibatch per epoch here


def test_no_early_stop_without_target_kl() -> None:
    agent = small_agent(n_epochs=3, target_kl=None)
    metrics = update(agent, fill(agent, 10))
    assert "early_stopped" not in metrics and metrics["n_minibatch_updates"] == 3 * 2


def test_per_head_entropy_counts_only_relevant_steps() -> None:
    agent = small_agent()
    metrics = update(agent, fill(agent, 12, masks=open_masks([True, False, False, False])))  # only WAIT is valid
    assert metrics["entropy"] == pytest.approx(0.0, abs=1e-6)
    assert metrics["entropy_op"] == pytest.approx(0.0, abs=1e-6)
    assert metrics["entropy_slot"] == metrics["entropy_blueprint"] == metrics["entropy_blend"] == 0.0
    agent = small_agent()
    metrics = update(agent, fill(agent, 40, masks=open_masks([False, True, False, False])))  # GERMINATE: all heads
    assert metrics["entropy_op"] == pytest.approx(0.0, abs=1e-6)
    for head in ("slot", "blueprint", "blend"):
        assert metrics[f"entropy_{head}"] > 0.9  # near-uniform at init


def test_ratio_explosion_attaches_a_diagnostic() -> None:
    agent = small_agent(n_epochs=1)
    metrics = update(agent, fill(agent, 16, logp_shift=-3.0))  # stored log-probs too low → ratio ≈ e³ ≈ 20
    assert metrics["ratio_max"] > 5.0
    diag = metrics["ratio_diagnostic"]
    assert diag["n_exploded"] > 0 and len(diag["worst_indices"]) > 0
    agent = small_agent(n_epochs=1)
    assert "ratio_diagnostic" not in update(agent, fill(agent, 16))


def test_entropy_coefficient_schedule() -> None:
    constant = small_agent(entropy_coef=0.05)
    assert update(constant, fill(constant, 8))["entropy_coef"] == 0.05 and constant.entropy_coef() == 0.05
    agent = small_agent(entropy_coef=0.05, entropy_coef_min=0.01, entropy_anneal_episodes=4, n_epochs=1)
    used = []
    for _ in range(6):
        used.append(update(agent, fill(agent, 8))["entropy_coef"])
    assert used == pytest.approx([0.05, 0.04, 0.03, 0.02, 0.01, 0.01])


def test_updates_are_reproducible_for_a_seed() -> None:
    agents = []
    for _ in range(2):
        torch.manual_seed(0)  # network init uses the global RNG (the trainer seeds it per batch)
        agent = small_agent(seed=7)
        update(agent, fill(agent, 20))
        agents.append(agent)
    for p, q in zip(agents[0].network.parameters(), agents[1].network.parameters()):
        assert torch.equal(p, q)


# --- state -----------------------------------------------------------------------------------------------------
def test_state_dict_round_trip_restores_weights_optimizer_and_generators() -> None:
    agent = small_agent(seed=11, entropy_anneal_episodes=5)
    update(agent, fill(agent, 12))
    state = agent.state_dict()
    loaded = small_agent(seed=99, entropy_anneal_episodes=5)
    loaded.load_state_dict(state)
    assert loaded.train_steps == 1 and loaded.entropy_coef() == agent.entropy_coef()
    for p, q in zip(agent.network.parameters(), loaded.network.parameters()):
        assert torch.equal(p, q)
    masks = compute_batch_masks([compute_action_validity({"early": None, "mid": None})] * 16)
    states = torch.randn(16, D)
    a, b = agent.act(states, masks)[0], loaded.act(states, masks)[0]
    assert all(torch.equal(a[k], b[k]) for k in a)  # action generator state restored
    assert torch.equal(agent.minibatch_generator.get_state(), loaded.minibatch_generator.get_state())
    # Optimizer state restored: one more identical update gives identical parameters.
    for x in (agent, loaded):
        torch.manual_seed(1)
        update(x, fill(x, 12))
    for p, q in zip(agent.network.parameters(), loaded.network.parameters()):
        assert torch.equal(p, q)


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
    agent = small_agent(4, lr=3e-3, hidden_dim=64, n_epochs=4, minibatch_size=64, entropy_coef=0.01, seed=seed)
    contexts_gen = torch.Generator().manual_seed(seed)
    eye = torch.eye(4)
    mean_rewards = []
    for _ in range(30):
        contexts = torch.randint(0, 4, (64,), generator=contexts_gen).tolist()
        states = eye[contexts]
        actions, log_probs, values, used = agent.act(states, compute_batch_masks(
            [TOY_VALIDITY[c] for c in contexts]))
        rewards = []
        for i, c in enumerate(contexts):
            action = {k: int(v[i]) for k, v in actions.items()}
            factored = CNN.action(action["slot"], action["blueprint"], action["blend"], action["op"])
            assert TOY_VALIDITY[c].is_valid(factored), f"masked action sampled: {action} in context {c}"
            rewards.append(toy_reward(c, action))
        buffer = RolloutBuffer(1, 64, 4, CNN.num_blueprints)  # 64 one-step episodes
        buffer.add(0, PolicyStep(states, states, actions, log_probs, values, used, []))
        buffer.credit(0, list(range(64)), rewards, [True] * 64)
        update(agent, buffer)
        mean_rewards.append(sum(rewards) / len(rewards))
    greedy, *_ = agent.act(eye, compute_batch_masks(TOY_VALIDITY), deterministic=True)
    assert [toy_reward(c, {k: int(v[c]) for k, v in greedy.items()}) for c in range(4)] == [1.0] * 4
    assert mean_rewards[0] < 0.6 < 0.9 < sum(mean_rewards[-5:]) / 5
    assert time.perf_counter() - start < 15.0


def test_masks_for_single_env_use_compute_action_masks() -> None:
    single = masks.compute_action_masks({"early": None, "mid": None, "late": None}, total_seeds=0, max_seeds=3,
                                        space=CNN)
    action, *_ = act_one(small_agent(), torch.randn(D), single)
    assert action["op"] in (0, 1) and (action["op"] == 1 or action["slot"] == 0)
