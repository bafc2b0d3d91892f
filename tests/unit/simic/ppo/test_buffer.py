"""RolloutBuffer: [steps, envs] storage, per-env GAE, group advantages, env-major order and minibatches."""

from __future__ import annotations

import pytest
import torch

from esper.simic.ppo.buffer import PolicyStep, RolloutBuffer, env_major, gae, group_advantages

HEAD_SIZES = {"op": 4, "slot": 3, "blueprint": 5, "blend": 3}
D = 4


def step(envs: int, t: int, *, values: list[float] | None = None) -> PolicyStep:
    """Step t of `envs` envs, every number telling where it belongs (env e at step t: state and log-prob e·10 + t)."""
    tag = torch.tensor([e * 10.0 + t for e in range(envs)])
    masks = {h: torch.arange(n).expand(envs, n) != (t + torch.arange(envs)).unsqueeze(1) % n
             for h, n in HEAD_SIZES.items()}
    return PolicyStep(raw=tag.unsqueeze(1).expand(envs, D) + 0.5, states=tag.unsqueeze(1).expand(envs, D),
                      actions={h: (t + torch.arange(envs)) % n for h, n in HEAD_SIZES.items()}, log_probs=-tag,
                      values=torch.tensor(values) if values is not None else tag / 100, masks=masks, decisions=[])


def filled(steps: int, envs: int) -> RolloutBuffer:
    buffer = RolloutBuffer(steps, envs, D, HEAD_SIZES["blueprint"])
    for t in range(steps):
        buffer.add(t, step(envs, t))
        buffer.credit(t, list(range(envs)), [float(t)] * envs, [t == steps - 1] * envs)
    return buffer


def test_a_step_lands_in_its_row_with_the_masks_as_sampled() -> None:
    buffer = filled(3, 2)
    assert buffer.states.shape == (3, 2, D) and buffer.rewards.dtype == torch.float64
    assert buffer.states[2, 1, 0] == 12.0 and buffer.raw[2, 1, 0] == 12.5 and buffer.log_probs[1, 1] == -11.0
    assert buffer.actions["blueprint"][2, 1] == 3 and buffer.masks["blueprint"][2, 1].tolist() == [
        True, True, True, False, True]
    assert buffer.rewards[:, 0].tolist() == [0.0, 1.0, 2.0] and buffer.dones[:, 1].tolist() == [False, False, True]


def test_credit_takes_rewards_in_any_env_order_but_one_per_env() -> None:
    buffer = RolloutBuffer(1, 3, D, 5)
    buffer.credit(0, [2, 0, 1], [2.0, 0.0, 1.0], [True, False, False])
    assert buffer.rewards[0].tolist() == [0.0, 1.0, 2.0] and buffer.dones[0].tolist() == [False, False, True]
    with pytest.raises(ValueError, match="one for each of 3"):
        buffer.credit(0, [0, 1], [0.0, 1.0], [False, False])


def test_gae_matches_a_hand_computation() -> None:
    rewards, values = [1.0, 0.0, 2.0], [0.5, 0.2, 0.1]
    gamma, lam = 0.9, 0.8
    returns, adv = gae(torch.tensor(rewards, dtype=torch.float64).unsqueeze(1),
                       torch.tensor(values, dtype=torch.float64).unsqueeze(1), torch.zeros(3, 1, dtype=torch.bool),
                       gamma, lam)
    d2 = 2.0 - 0.1  # the step after the last is worth 0
    d1 = 0.0 + gamma * 0.1 - 0.2
    d0 = 1.0 + gamma * 0.2 - 0.5
    a2 = d2
    a1 = d1 + gamma * lam * a2
    a0 = d0 + gamma * lam * a1
    assert adv[:, 0].tolist() == [a0, a1, a2]
    assert returns[:, 0].tolist() == [a0 + 0.5, a1 + 0.2, a2 + 0.1]


def test_gae_resets_at_an_episode_end_and_keeps_envs_apart() -> None:
    """Env 0 runs episodes of 3 and 2 steps, env 1 one of 5: env 0's second episode never reaches its first."""
    rewards = torch.tensor([[1.0, 5.0], [1.0, 6.0], [1.0, 7.0], [10.0, 8.0], [10.0, 9.0]], dtype=torch.float64)
    values = torch.ones(5, 2, dtype=torch.float64)
    dones = torch.tensor([[False, False], [False, False], [True, False], [False, False], [True, True]])
    _, adv = gae(rewards, values, dones, 0.99, 0.95)
    first, _ = gae(rewards[:3, :1], values[:3, :1], dones[:3, :1], 0.99, 0.95)
    alone, _ = gae(rewards[:, 1:], values[:, 1:], dones[:, 1:], 0.99, 0.95)
    assert torch.equal(adv[:3, :1] + values[:3, :1], first) and torch.equal(adv[:, 1:], alone - values[:, 1:])
    assert adv[2, 0] == 0.0  # r − v at the terminal step: 1 − 1


def test_group_advantage_is_the_return_minus_the_peers_mean() -> None:
    """Two groups of three; one step each, so the return is the reward."""
    rewards = torch.tensor([[1.0, 2.0, 6.0, 0.0, 0.0, 3.0]], dtype=torch.float64)
    returns, adv = group_advantages(rewards, torch.ones(1, 6, dtype=torch.bool), 0.9, 3)
    assert returns.tolist() == rewards.tolist()
    assert adv.tolist() == [[1.0 - 4.0, 2.0 - 3.5, 6.0 - 1.5, 0.0 - 1.5, 0.0 - 1.5, 3.0 - 0.0]]
    two_steps, _ = group_advantages(torch.tensor([[1.0, 0.0], [2.0, 4.0]], dtype=torch.float64),
                                    torch.tensor([[False, False], [True, True]]), 0.5, 2)
    assert two_steps.tolist() == [[2.0, 2.0], [2.0, 4.0]]  # returns-to-go: 1 + 0.5 · 2, 0 + 0.5 · 4
    with pytest.raises(ValueError, match="whole groups"):
        group_advantages(torch.zeros(1, 5, dtype=torch.float64), torch.ones(1, 5, dtype=torch.bool), 0.9, 2)


def test_advantages_come_env_major_in_float32() -> None:
    buffer = filled(3, 2)
    returns, adv = buffer.advantages("gae", 0.9, 0.8, 1)
    expected_returns, expected = gae(buffer.rewards, buffer.values.double(), buffer.dones, 0.9, 0.8)
    assert adv.dtype == torch.float32 and adv.shape == (6,)
    assert torch.equal(adv, expected.T.reshape(-1).float())
    assert torch.equal(returns, expected_returns.T.reshape(-1).float())
    _, grouped = buffer.advantages("group", 0.9, 0.8, 2)
    assert torch.equal(grouped, group_advantages(buffer.rewards, buffer.dones, 0.9, 2)[1].T.reshape(-1).float())


def test_minibatches_cover_a_permutation_of_the_env_major_rows() -> None:
    buffer = filled(4, 3)
    seen: list[int] = []
    for batch in buffer.minibatches(5, torch.Generator().manual_seed(0)):
        seen.extend(batch.index.tolist())
        for row, i in enumerate(batch.index.tolist()):
            e, t = divmod(i, 4)  # env-major: env e's step t is row e · steps + t
            assert batch.states[row, 0] == e * 10 + t and batch.log_probs[row] == -(e * 10 + t)
            assert batch.values[row] == buffer.values[t, e] and batch.actions["op"][row] == (t + e) % 4
            assert torch.equal(batch.masks["slot"][row], buffer.masks["slot"][t, e])
    assert sorted(seen) == list(range(12))

    def order(seed: int) -> list[int]:
        return [i for b in buffer.minibatches(5, torch.Generator().manual_seed(seed)) for i in b.index.tolist()]

    assert order(1) == order(1) and order(1) != order(2)
    assert env_major(torch.arange(6).reshape(3, 2)).tolist() == [0, 2, 4, 1, 3, 5]
    with pytest.raises(ValueError, match="minibatch size"):
        next(buffer.minibatches(0, torch.Generator()))
