"""The teacher-residual policy: its prior, its KL, its initial policy (the teacher), and its gentle start."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from esper.data.tasks import get_task_spec
from esper.env.masks import HEAD_KEYS
from esper.leyline import LifecycleCommand, LifecycleOp
from esper.leyline.errors import UserInputError
from esper.simic.ppo.agent import PPOAgent
from esper.simic.ppo.buffer import PolicyStep, RolloutBuffer
from esper.simic.ppo.config import TrainingConfig
from esper.simic.ppo.controller import follows_teacher
from esper.simic.ppo.network import FactoredActorCritic
from esper.simic.ppo.teacher import UNSET, check_teacher_spec, kl_to_prior, log_prior, teacher_rows
from esper.tamiyo import TamiyoDecision

CNN = get_task_spec("synthetic").action_space
SIZES = {"op": 4, "slot": 3, "blueprint": CNN.num_blueprints, "blend": 3}
D = 12


def _all_legal(n: int) -> dict[str, torch.Tensor]:
    return {h: torch.ones(n, SIZES[h], dtype=torch.bool) for h in HEAD_KEYS}


def _germinations(n: int) -> torch.Tensor:
    """Teachers that germinate blueprint 1 with blend 0 in slot `i % 3`."""
    return torch.tensor([[int(LifecycleOp.GERMINATE), i % 3, 1, 0] for i in range(n)])


# ----------------------------------------------------------------------------------------------------- the prior


@settings(max_examples=50, deadline=None)
@given(epsilon=st.floats(0.01, 0.9), legal=st.lists(st.booleans(), min_size=4, max_size=4), target=st.integers(0, 3))
def test_prior_is_the_smoothed_teacher_over_the_legal_actions(epsilon: float, legal: list[bool], target: int) -> None:
    mask = torch.tensor([legal])
    mask[0, target] = True  # the teacher's choice is legal
    teacher = torch.tensor([[target, UNSET, UNSET, UNSET]])
    prior = log_prior("op", teacher, {}, mask, epsilon)
    probs = torch.softmax(prior.masked_fill(~mask, -1e9), dim=-1)[0]
    n = int(mask.sum())
    expected = [((1 - epsilon) + epsilon / n) if a == target else (epsilon / n if mask[0, a] else 0.0)
                for a in range(4)]
    assert probs.tolist() == pytest.approx(expected, abs=1e-6)


def test_a_head_follows_the_teacher_only_after_its_choices_on_the_heads_before() -> None:
    teacher = _germinations(2)
    sampled = {"op": torch.tensor([int(LifecycleOp.GERMINATE), int(LifecycleOp.WAIT)]),
               "slot": torch.tensor([1, 0])}  # row 0 took the teacher's op but another slot; row 1 another op
    mask = torch.ones(2, SIZES["slot"], dtype=torch.bool)
    slot_prior = log_prior("slot", teacher, sampled, mask, 0.1)
    assert slot_prior[0].max() > slot_prior[0].min() and torch.equal(slot_prior[1], torch.zeros(3))
    blueprint_prior = log_prior("blueprint", teacher, sampled, torch.ones(2, SIZES["blueprint"], dtype=torch.bool),
                                0.1)
    assert torch.equal(blueprint_prior, torch.zeros_like(blueprint_prior))  # neither row is on the teacher's slot


def test_a_choice_the_mask_forbids_gives_no_prior() -> None:
    mask = torch.tensor([[True, True, False, True]])
    prior = log_prior("op", torch.tensor([[2, UNSET, UNSET, UNSET]]), {}, mask, 0.1)
    assert torch.equal(prior, torch.zeros(1, 4))


@settings(max_examples=50, deadline=None)
@given(seed=st.integers(0, 10_000), epsilon=st.sampled_from([0.0, 0.05, 0.3]))
def test_kl_to_prior_matches_its_definition_and_stays_finite(seed: int, epsilon: float) -> None:
    generator = torch.Generator().manual_seed(seed)
    logits = torch.randn(5, 4, generator=generator)
    mask = torch.rand(5, 4, generator=generator) > 0.3
    mask[:, 0] = True
    prior = log_prior("op", torch.zeros(5, 4, dtype=torch.long), {}, mask, epsilon)
    kl = kl_to_prior(logits, prior, mask)
    assert torch.isfinite(kl).all() and (kl > -1e-5).all()
    if epsilon > 0:
        p = torch.softmax((prior + logits).masked_fill(~mask, -1e9), -1)
        q = torch.softmax(prior.masked_fill(~mask, -1e9), -1)
        direct = torch.where(mask, p * (p.clamp_min(1e-30).log() - q.clamp_min(1e-30).log()), 0.0).sum(-1)
        assert torch.allclose(kl, direct, atol=1e-5)
    assert torch.allclose(kl_to_prior(torch.zeros_like(logits), prior, mask), torch.zeros(5), atol=1e-6)


def test_teacher_rows_mark_the_heads_a_teacher_did_not_choose() -> None:
    wait = TamiyoDecision.from_command(LifecycleCommand(LifecycleOp.WAIT), space=CNN, reason="r", confidence=1.0)
    cull = TamiyoDecision.from_command(LifecycleCommand(LifecycleOp.CULL, "mid"), space=CNN, reason="r", confidence=1)
    grow = TamiyoDecision.from_command(LifecycleCommand(LifecycleOp.GERMINATE, "late", "norm", "linear"), space=CNN,
                                       reason="r", confidence=1.0)
    outside = TamiyoDecision.from_command(LifecycleCommand(LifecycleOp.GERMINATE, "early", "conv_heavy", "linear"),
                                          space=CNN, reason="r", confidence=1.0)
    rows = teacher_rows([wait, cull, grow, outside]).tolist()
    assert rows[0] == [int(LifecycleOp.WAIT), UNSET, UNSET, UNSET]
    assert rows[1] == [int(LifecycleOp.CULL), 1, UNSET, UNSET]
    assert rows[2][:2] == [int(LifecycleOp.GERMINATE), 2] and rows[2][2] == CNN.head.index("norm")
    assert rows[3] == [int(LifecycleOp.GERMINATE), 0, UNSET, UNSET]  # conv_heavy is outside the policy's head


@pytest.mark.parametrize("spec", ["heuristic", "grow:norm@early", "behavior:baseline", "none"])
def test_teachers_are_controllers_that_need_no_training(spec: str) -> None:
    assert check_teacher_spec(spec) == spec


@pytest.mark.parametrize("spec", ["ppo:runs/x", "fixed:norm@early", "static", "random", "heuristik", "heuristic:tuned",
                                  "heuristic:no/such/record.json"])
def test_other_teachers_are_refused(spec: str) -> None:
    with pytest.raises(UserInputError, match="teacher"):
        check_teacher_spec(spec)


# --------------------------------------------------------------------------------------------- the initial policy


def _network(epsilon: float) -> FactoredActorCritic:
    torch.manual_seed(0)
    return FactoredActorCritic(D, num_blueprints=CNN.num_blueprints, hidden_dim=16, teacher_epsilon=epsilon)


@pytest.mark.parametrize("epsilon", [0.0, 0.1])
def test_the_initial_residual_policy_is_the_smoothed_teacher(epsilon: float) -> None:
    network, n = _network(epsilon), 6
    teacher = _germinations(n)
    actions = {"op": teacher[:, 0], "slot": teacher[:, 1], "blueprint": teacher[:, 2], "blend": teacher[:, 3]}
    evaluation = network.evaluate_heads(torch.randn(n, D), actions, _all_legal(n), teacher)
    expected = sum(math.log((1 - epsilon) + epsilon / size) for size in SIZES.values())
    assert torch.allclose(evaluation.log_probs, torch.full((n,), expected), atol=1e-6)
    assert torch.allclose(evaluation.teacher_kl, torch.zeros(n), atol=1e-6)
    chosen, _, _, _ = network.get_action_batch(torch.randn(n, D), _all_legal(n), deterministic=True, teacher=teacher)
    assert torch.equal(torch.stack([chosen[h] for h in HEAD_KEYS], 1), teacher)


def test_a_planted_residual_init_is_not_the_teacher() -> None:
    network, n = _network(0.1), 6
    with torch.no_grad():
        network.heads["op"][-1].bias[int(LifecycleOp.WAIT)] += 0.5  # type: ignore[index]
    teacher = _germinations(n)
    actions = {"op": teacher[:, 0], "slot": teacher[:, 1], "blueprint": teacher[:, 2], "blend": teacher[:, 3]}
    evaluation = network.evaluate_heads(torch.randn(n, D), actions, _all_legal(n), teacher)
    expected = sum(math.log(0.9 + 0.1 / size) for size in SIZES.values())
    assert not torch.allclose(evaluation.log_probs, torch.full((n,), expected), atol=1e-6)


@pytest.mark.parametrize("head", HEAD_KEYS)
def test_only_a_residual_network_with_every_head_still_zero_decides_as_its_teacher(head: str) -> None:
    network = _network(0.1)
    assert network.residual_is_zero()
    assert not FactoredActorCritic(D, num_blueprints=CNN.num_blueprints, hidden_dim=16).residual_is_zero()
    with torch.no_grad():
        network.heads[head][-1].weight[0, 0] = 1e-6  # type: ignore[index]
    assert not network.residual_is_zero()
    with torch.no_grad():
        network.heads[head][-1].weight[0, 0] = 0.0  # type: ignore[index]
        network.heads[head][-1].bias[-1] = -1e-6  # type: ignore[index]
    assert not network.residual_is_zero()


@pytest.mark.parametrize("epsilon", [0.0, 0.3, 0.9])
def test_greedy_overrides_count_the_states_whose_mode_leaves_the_teacher(epsilon: float) -> None:
    network, n = _network(epsilon), 6
    teacher, op_mask = _germinations(n), _all_legal(n)["op"]
    assert network.greedy_op_overrides(torch.randn(n, D), op_mask, teacher) == 0.0
    margin = math.log((1 - epsilon + epsilon / 4) / (epsilon / 4)) if epsilon else 1e9
    with torch.no_grad():
        network.heads["op"][-1].bias[int(LifecycleOp.WAIT)] += min(margin + 1.0, 50.0)  # type: ignore[index]
    expected = 1.0 if epsilon else 0.0  # with ε = 0 no finite residual leaves the teacher
    assert network.greedy_op_overrides(torch.randn(n, D), op_mask, teacher) == expected


def test_a_decision_follows_its_teacher_on_the_heads_the_teacher_chose() -> None:
    teacher = torch.tensor([[int(LifecycleOp.WAIT), UNSET, UNSET, UNSET], [int(LifecycleOp.GERMINATE), 2, 1, 0]])
    def actions(rows: list[list[int]]) -> dict[str, torch.Tensor]:
        return {head: torch.tensor([row[i] for row in rows]) for i, head in enumerate(HEAD_KEYS)}
    same = actions([[int(LifecycleOp.WAIT), 0, 0, 0], [int(LifecycleOp.GERMINATE), 2, 1, 0]])
    assert follows_teacher(same, teacher).tolist() == [True, True]
    other = actions([[int(LifecycleOp.GERMINATE), 1, 1, 0], [int(LifecycleOp.GERMINATE), 2, 1, 1]])
    assert follows_teacher(other, teacher).tolist() == [False, False]


def test_with_epsilon_zero_sampling_never_leaves_the_teacher() -> None:
    network, n = _network(0.0), 64
    teacher = _germinations(n)
    generator = torch.Generator().manual_seed(3)
    chosen, log_probs, _, _ = network.get_action_batch(torch.randn(n, D), _all_legal(n), generator=generator,
                                                       teacher=teacher)
    assert torch.equal(torch.stack([chosen[h] for h in HEAD_KEYS], 1), teacher)
    assert torch.equal(log_probs, torch.zeros(n))


def test_a_residual_network_needs_teachers_and_only_it_takes_them() -> None:
    with pytest.raises(ValueError, match="residual"):
        _network(0.1).get_action_batch(torch.randn(2, D), _all_legal(2))
    plain = FactoredActorCritic(D, num_blueprints=CNN.num_blueprints, hidden_dim=16)
    with pytest.raises(ValueError, match="residual"):
        plain.get_action_batch(torch.randn(2, D), _all_legal(2), teacher=_germinations(2))


# ------------------------------------------------------------------------------------------------ the gentle start


def _agent(**overrides: object) -> PPOAgent:
    fields: dict[str, object] = {"teacher": "heuristic", "n_envs": 4, "n_episodes": 8, "minibatch_size": 8,
                                 "device": "cpu", **overrides}
    config = TrainingConfig.preset("quick").with_overrides(**fields)
    torch.manual_seed(0)
    return PPOAgent(config.ppo, seed=config.seed, state_dim=D, space=CNN)


def _rollout(agent: PPOAgent, steps: int = 5) -> tuple[RolloutBuffer, torch.Tensor, torch.Tensor]:
    envs = agent.config.n_envs
    buffer = RolloutBuffer(steps, envs, D, CNN.num_blueprints, residual=True)
    generator = torch.Generator().manual_seed(1)
    teacher = _germinations(envs)
    for t in range(steps):
        states = torch.randn(envs, D, generator=generator)
        actions, log_probs, values, used = agent.act(states, _all_legal(envs), teacher=teacher)
        buffer.add(t, PolicyStep(states, states, actions, log_probs, values, used, [], teacher))
        buffer.credit(t, list(range(envs)), torch.randn(envs, generator=generator).tolist(), [t == steps - 1] * envs)
    returns, advantages = buffer.advantages("gae", 1.0, 0.95, 1)
    return buffer, returns, advantages


def test_the_critic_warm_up_changes_no_actor_parameter() -> None:
    agent = _agent()
    buffer, returns, advantages = _rollout(agent)
    actor = [p.detach().clone() for p in agent.network.actor_parameters()]
    critic = [p.detach().clone() for p in agent.network.critic_parameters()]
    metrics = agent.update(buffer, returns, advantages, critic_only=True)
    assert metrics["critic_warmup"] == 1.0 and agent.train_steps == 0 and metrics["greedy_op_overrides"] == 0.0
    assert all(torch.equal(a, p) for a, p in zip(actor, agent.network.actor_parameters(), strict=True))
    assert not all(torch.equal(c, p) for c, p in zip(critic, agent.network.critic_parameters(), strict=True))
    assert all(p not in agent.optimizer.state for p in agent.network.actor_parameters())
    agent.update(buffer, returns, advantages)  # an actor update does move the actor
    assert not all(torch.equal(a, p) for a, p in zip(actor, agent.network.actor_parameters(), strict=True))


def test_the_actor_learning_rate_warms_up_and_the_kl_weight_anneals() -> None:
    agent = _agent(actor_warmup_updates=4, teacher_kl_start=0.2, teacher_kl_end=0.02, n_episodes=24)  # 6 updates
    buffer, returns, advantages = _rollout(agent)
    lrs, coefs = [], []
    for _ in range(7):
        coefs.append(agent.update(buffer, returns, advantages)["teacher_kl_coef"])
        lrs.append([group["lr"] for group in agent.optimizer.param_groups])
    lr = agent.config.lr
    assert [actor for actor, _ in lrs] == pytest.approx([lr * f for f in (0.25, 0.5, 0.75, 1.0, 1.0, 1.0, 1.0)])
    assert all(critic == lr for _, critic in lrs)  # the critic's rate never warms up
    assert coefs == pytest.approx([0.2 - 0.18 * k / 5 for k in range(6)] + [0.02])  # linear, then held at the end


def test_the_teacher_kl_pulls_the_policy_back_to_its_teacher() -> None:
    """With only the KL in the loss, updates from a moved policy bring its KL to the teacher down."""
    agent = _agent(teacher_kl_start=1.0, teacher_kl_end=1.0, actor_warmup_updates=0, entropy_coef=0.0,
                   entropy_coef_min=0.0)
    buffer, returns, _ = _rollout(agent)
    with torch.no_grad():
        agent.network.heads["op"][-1].bias.copy_(torch.tensor([2.0, -1.0, 0.5, 0.0]))  # type: ignore[index]
    first = agent.update(buffer, returns, torch.zeros_like(returns))
    later = [agent.update(buffer, returns, torch.zeros_like(returns))["teacher_kl"] for _ in range(10)]
    assert later[-1] < first["teacher_kl"]


# --------------------------------------------------------------------------------------------------- the config


def test_residual_fields_need_a_teacher() -> None:
    with pytest.raises(UserInputError, match="residual policy"):
        TrainingConfig.preset("quick").with_overrides(teacher_epsilon=0.2)
    assert TrainingConfig.preset("quick").ppo.residual_epsilon() is None
    assert TrainingConfig.preset("quick").with_overrides(teacher="heuristic").ppo.residual_epsilon() == 0.1


@pytest.mark.parametrize(("overrides", "match"), [
    ({"initial_op_bias": {"CULL": -2.0}}, "initial_op_bias"),
    ({"init_from": "iql:runs/iql"}, "init_from"),
    ({"advantage": "group"}, "group advantage"),
])
def test_a_residual_policy_starts_as_its_teacher_only(overrides: dict[str, object], match: str) -> None:
    with pytest.raises(UserInputError, match=match):
        TrainingConfig.preset("quick").with_overrides(teacher="heuristic", **overrides)


def test_warm_up_episodes_come_on_top_of_the_actor_s() -> None:
    ppo = TrainingConfig.preset("quick").with_overrides(teacher="heuristic", critic_warmup_batches=2).ppo
    assert ppo.total_episodes() == ppo.n_episodes + 2 * ppo.n_envs
    assert TrainingConfig.preset("quick").ppo.total_episodes() == TrainingConfig.preset("quick").ppo.n_episodes
