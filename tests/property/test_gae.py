"""GAE per-env independence."""

from __future__ import annotations

import torch
from hypothesis import given
from hypothesis import strategies as st

from esper.simic.ppo.buffer import FactoredRolloutBuffer

WAIT = {"slot": 0, "blueprint": 0, "blend": 0, "op": 0}
MASKS = {
    "op": torch.ones(4, dtype=torch.bool),
    "slot": torch.ones(3, dtype=torch.bool),
    "blueprint": torch.ones(5, dtype=torch.bool),
    "blend": torch.ones(3, dtype=torch.bool),
}
finite = st.floats(min_value=-10, max_value=10, allow_nan=False)
step = st.tuples(finite, finite, st.booleans())  # reward, value, done
episodes = st.lists(st.lists(step, min_size=1, max_size=12), min_size=1, max_size=4)


def per_env_advantages(buffer: FactoredRolloutBuffer, last_value: float) -> dict[int, list[float]]:
    _, advantages = buffer.compute_returns_and_advantages(last_value, 0.99, 0.95)
    out: dict[int, list[float]] = {}
    for transition, adv in zip(buffer.steps, advantages.tolist()):
        out.setdefault(transition.env_id, []).append(adv)
    return out


@given(envs=episodes, order_seed=st.integers(0, 2**16), last_value=finite)
def test_permuting_env_interleaving_leaves_advantages_unchanged(
    envs: list[list[tuple[float, float, bool]]], order_seed: int, last_value: float
) -> None:
    sequential, shuffled = FactoredRolloutBuffer(), FactoredRolloutBuffer()
    for env_id, steps in enumerate(envs):
        for reward, value, done in steps:
            sequential.add(torch.zeros(2), WAIT, 0.0, value, reward, done, MASKS, env_id=env_id)
    # A random interleaving that keeps each env's own order (what lock-stepped envs produce).
    schedule = [env_id for env_id, steps in enumerate(envs) for _ in steps]
    generator = torch.Generator().manual_seed(order_seed)
    schedule = [schedule[i] for i in torch.randperm(len(schedule), generator=generator).tolist()]
    cursors = [0] * len(envs)
    for env_id in schedule:
        reward, value, done = envs[env_id][cursors[env_id]]
        cursors[env_id] += 1
        shuffled.add(torch.zeros(2), WAIT, 0.0, value, reward, done, MASKS, env_id=env_id)
    expected = per_env_advantages(sequential, last_value)
    assert per_env_advantages(shuffled, last_value) == expected
    # And each env alone gives the same numbers: nothing leaks across envs.
    for env_id, steps in enumerate(envs):
        alone = FactoredRolloutBuffer()
        for reward, value, done in steps:
            alone.add(torch.zeros(2), WAIT, 0.0, value, reward, done, MASKS)
        assert per_env_advantages(alone, last_value)[0] == expected[env_id]
