"""Advantages over all envs at once equal, bit for bit, a plain per-env loop in Python floats; no env leaks into
another."""

from __future__ import annotations

import torch
from hypothesis import given
from hypothesis import strategies as st

from esper.simic.ppo.buffer import PolicyStep, RolloutBuffer, gae, group_advantages

finite = st.floats(min_value=-10, max_value=10, allow_nan=False, width=32)
step = st.tuples(finite, finite, st.booleans())  # reward, value, done


@st.composite
def rollouts(draw: st.DrawFn, group_size: int = 1) -> list[list[tuple[float, float, bool]]]:
    """[steps][envs] of (reward, value, done), with envs a multiple of `group_size`."""
    steps = draw(st.integers(1, 12))
    envs = group_size * draw(st.integers(1, 4 if group_size == 1 else 3))
    return draw(st.lists(st.lists(step, min_size=envs, max_size=envs), min_size=steps, max_size=steps))


def reference_gae(rewards: list[float], values: list[float], dones: list[bool], gamma: float, lam: float
                  ) -> list[float]:
    """One env's advantages, written plainly."""
    advantages = [0.0] * len(rewards)
    next_value, next_adv = 0.0, 0.0
    for i in range(len(rewards) - 1, -1, -1):
        if dones[i]:
            next_value, next_adv = 0.0, 0.0
        delta = rewards[i] + gamma * next_value - values[i]
        advantages[i] = delta + gamma * lam * next_adv
        next_value, next_adv = values[i], advantages[i]
    return advantages


def reference_group(rewards: list[list[float]], dones: list[list[bool]], gamma: float, k: int) -> list[list[float]]:
    """Per env (rows): its return-to-go minus the mean of its group peers', written plainly."""
    returns = []
    for env_rewards, env_dones in zip(rewards, dones):
        running, out = 0.0, [0.0] * len(env_rewards)
        for i in range(len(env_rewards) - 1, -1, -1):
            running = env_rewards[i] + gamma * (0.0 if env_dones[i] else running)
            out[i] = running
        returns.append(out)
    advantages = []
    for e, own in enumerate(returns):
        peers = [returns[p] for p in range(len(returns)) if p // k == e // k and p != e]
        advantages.append([g - sum(p[t] for p in peers) / len(peers) for t, g in enumerate(own)])
    return advantages


def columns(rollout: list[list[tuple[float, float, bool]]], field: int) -> list[list]:  # type: ignore[type-arg]
    """Per env, one field of its steps."""
    return [[row[e][field] for row in rollout] for e in range(len(rollout[0]))]


@given(rollout=rollouts(), gamma=st.floats(0.0, 1.0), lam=st.floats(0.0, 1.0))
def test_gae_equals_the_per_env_loop_bit_for_bit(rollout: list[list[tuple[float, float, bool]]], gamma: float,
                                                 lam: float) -> None:
    rewards = torch.tensor([[r for r, _, _ in row] for row in rollout], dtype=torch.float64)
    values = torch.tensor([[v for _, v, _ in row] for row in rollout], dtype=torch.float64)
    dones = torch.tensor([[d for _, _, d in row] for row in rollout])
    returns, advantages = gae(rewards, values, dones, gamma, lam)
    for e, (r, v, d) in enumerate(zip(columns(rollout, 0), columns(rollout, 1), columns(rollout, 2))):
        expected = reference_gae(r, v, d, gamma, lam)
        assert advantages[:, e].tolist() == expected
        assert returns[:, e].tolist() == [a + value for a, value in zip(expected, v)]
        # Each env alone gives the same numbers: nothing leaks across envs.
        assert gae(rewards[:, e:e + 1], values[:, e:e + 1], dones[:, e:e + 1], gamma, lam)[1][:, 0].tolist() == expected


@given(rollout=st.integers(2, 4).flatmap(lambda k: st.tuples(st.just(k), rollouts(k))), gamma=st.floats(0.0, 1.0))
def test_group_advantages_equal_the_per_env_loop_bit_for_bit(
        rollout: tuple[int, list[list[tuple[float, float, bool]]]], gamma: float) -> None:
    k, steps = rollout
    rewards = torch.tensor([[r for r, _, _ in row] for row in steps], dtype=torch.float64)
    dones = torch.tensor([[d for _, _, d in row] for row in steps])
    _, advantages = group_advantages(rewards, dones, gamma, k)
    expected = reference_group(columns(steps, 0), columns(steps, 2), gamma, k)
    assert advantages.T.tolist() == expected


@given(rollout=rollouts(), gamma=st.floats(0.0, 1.0), lam=st.floats(0.0, 1.0))
def test_the_buffer_rounds_the_reference_to_float32_once(rollout: list[list[tuple[float, float, bool]]],
                                                        gamma: float, lam: float) -> None:
    """Values stored in float32 and rewards in float64 give the env-major float32 the per-env loop gives."""
    steps, envs = len(rollout), len(rollout[0])
    buffer = RolloutBuffer(steps, envs, 1, 5)
    for t, row in enumerate(rollout):
        values = torch.tensor([v for _, v, _ in row], dtype=torch.float32)
        buffer.add(t, PolicyStep(torch.zeros(envs, 1), torch.zeros(envs, 1), {h: torch.zeros(envs, dtype=torch.long)
                                 for h in ("op", "slot", "blueprint", "blend")}, torch.zeros(envs), values,
                                 {h: torch.ones(envs, n, dtype=torch.bool) for h, n in
                                  (("op", 4), ("slot", 3), ("blueprint", 5), ("blend", 3))}, []))
        buffer.credit(t, list(range(envs)), [r for r, _, _ in row], [d for _, _, d in row])
    _, advantages = buffer.advantages("gae", gamma, lam, 1)
    expected = [a for e in range(envs) for a in reference_gae(
        [row[e][0] for row in rollout], [float(torch.tensor(row[e][1], dtype=torch.float32)) for row in rollout],
        [row[e][2] for row in rollout], gamma, lam)]
    assert torch.equal(advantages, torch.tensor(expected, dtype=torch.float32))
