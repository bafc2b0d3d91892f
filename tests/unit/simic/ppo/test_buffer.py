"""FactoredRolloutBuffer: storage, per-env GAE, masks and minibatches."""

from __future__ import annotations

import pytest
import torch

from esper.env.masks import compute_action_masks
from esper.leyline import MaskSeedInfo, SeedStage
from esper.runtime.tasks import get_task_spec
from esper.simic.ppo.buffer import FactoredRolloutBuffer

WAIT = {"slot": 0, "blueprint": 0, "blend": 0, "op": 0}


def open_masks() -> dict[str, torch.Tensor]:
    return {
        "slot": torch.ones(3, dtype=torch.bool),
        "blueprint": torch.ones(5, dtype=torch.bool),
        "blend": torch.ones(3, dtype=torch.bool),
        "op": torch.ones(4, dtype=torch.bool),
    }


def add(
    buffer: FactoredRolloutBuffer,
    reward: float,
    value: float,
    done: bool,
    env_id: int = 0,
) -> None:
    buffer.add(torch.randn(6), WAIT, -1.0, value, reward, done, open_masks(), env_id)


# --- factored-action cases ----------------------------------------------------------------------------------
def test_factored_buffer_add_and_len() -> None:
    buffer = FactoredRolloutBuffer()
    masks = open_masks()
    masks["op"] = torch.tensor([True, True, False, False])
    buffer.add(torch.randn(50), {"slot": 0, "blueprint": 1, "blend": 2, "op": 1}, -1.5, 0.5, 1.0, False, masks)
    assert len(buffer) == 1


def test_factored_buffer_get_batches() -> None:
    buffer = FactoredRolloutBuffer()
    for i in range(10):
        buffer.add(
            state=torch.randn(50),
            action={"slot": i % 3, "blueprint": i % 5, "blend": i % 3, "op": i % 4},
            log_prob=-1.0,
            value=0.5,
            reward=1.0,
            done=(i == 9),
            action_masks=open_masks(),
        )
    batches = list(buffer.get_batches(batch_size=5, device="cpu"))
    assert len(batches) == 2
    batch, indices = batches[0]
    assert isinstance(batch["actions"], dict)
    assert set(batch["actions"].keys()) == {"slot", "blueprint", "blend", "op"}
    assert batch["actions"]["slot"].shape == (5,)
    assert indices.shape == (5,)


def test_factored_buffer_gae_resets_on_done() -> None:
    buffer = FactoredRolloutBuffer()
    for i in range(3):
        add(buffer, reward=1.0, value=1.0, done=(i == 2))
    for i in range(2):
        add(buffer, reward=10.0, value=1.0, done=(i == 1))
    returns, advantages = buffer.compute_returns_and_advantages(last_value=0.0, gamma=0.99, gae_lambda=0.95)
    assert returns.shape == (5,) and advantages.shape == (5,)
    alone = FactoredRolloutBuffer()
    for i in range(3):
        add(alone, reward=1.0, value=1.0, done=(i == 2))
    _, adv_alone = alone.compute_returns_and_advantages(last_value=0.0, gamma=0.99, gae_lambda=0.95)
    assert torch.allclose(advantages[:3], adv_alone)  # episode 2 does not bleed into episode 1
    assert advantages[2].item() == pytest.approx(0.0)  # r + 0 − v at the terminal step


# --- GAE values ------------------------------------------------------------------------------------------------------
def test_gae_matches_hand_computation_with_bootstrap() -> None:
    buffer = FactoredRolloutBuffer()
    rewards, values = [1.0, 0.0, 2.0], [0.5, 0.2, 0.1]
    for r, v in zip(rewards, values):
        add(buffer, reward=r, value=v, done=False)
    gamma, lam, last = 0.9, 0.8, 0.7
    returns, adv = buffer.compute_returns_and_advantages(last, gamma, lam)
    d2 = 2.0 + gamma * last - 0.1
    d1 = 0.0 + gamma * 0.1 - 0.2
    d0 = 1.0 + gamma * 0.2 - 0.5
    a2 = d2
    a1 = d1 + gamma * lam * a2
    a0 = d0 + gamma * lam * a1
    assert adv.tolist() == pytest.approx([a0, a1, a2])
    assert returns.tolist() == pytest.approx([a0 + 0.5, a1 + 0.2, a2 + 0.1])


def test_terminal_step_ignores_last_value() -> None:
    terminal = FactoredRolloutBuffer()
    add(terminal, reward=1.0, value=0.5, done=True)
    _, adv_t = terminal.compute_returns_and_advantages(last_value=100.0, gamma=0.5, gae_lambda=1.0)
    assert adv_t.item() == pytest.approx(0.5)


def test_envs_are_isolated_and_steps_are_env_major() -> None:
    interleaved = FactoredRolloutBuffer()
    for t in range(4):
        for env in (2, 0):
            add(interleaved, reward=float(env * 10 + t), value=0.1 * t, done=(t == 3), env_id=env)
    assert [s.env_id for s in interleaved.steps] == [0, 0, 0, 0, 2, 2, 2, 2]
    assert [s.reward for s in interleaved.steps] == [0.0, 1.0, 2.0, 3.0, 20.0, 21.0, 22.0, 23.0]
    _, adv = interleaved.compute_returns_and_advantages(0.0, 0.99, 0.95)
    for env, chunk in ((0, adv[:4]), (2, adv[4:])):
        alone = FactoredRolloutBuffer()
        for t in range(4):
            add(alone, reward=float(env * 10 + t), value=0.1 * t, done=(t == 3))
        assert torch.allclose(chunk, alone.compute_returns_and_advantages(0.0, 0.99, 0.95)[1])


# --- storage and batches -------------------------------------------------------------------------------------------
def test_full_masks_are_conditioned_on_insert_and_tensors_detached() -> None:
    masks = compute_action_masks({"early": None, "mid": MaskSeedInfo(SeedStage.PROBATIONARY, 4), "late": None},
                                 space=get_task_spec("synthetic").action_space)
    buffer = FactoredRolloutBuffer()
    state = torch.randn(6, requires_grad=True)
    buffer.add(state, WAIT, torch.tensor(-0.3), torch.tensor(0.2), 1.0, False, masks)
    buffer.add(state, {"slot": 2, "blueprint": 1, "blend": 0, "op": 1}, -1.0, 0.0, 0.0, False, masks)
    wait_step, germ_step = buffer.steps
    assert not wait_step.state.requires_grad
    assert wait_step.slot_mask.all() and wait_step.blueprint_mask.all()
    assert isinstance(wait_step.log_prob, float) and wait_step.log_prob == pytest.approx(-0.3)
    assert germ_step.slot_mask.tolist() == [True, False, True]
    assert germ_step.blueprint_mask.tolist() == [False, True, True, True, True]


def test_get_batches_cover_a_permutation_and_align_with_steps() -> None:
    buffer = FactoredRolloutBuffer()
    for i in range(11):
        buffer.add(torch.full((4,), float(i)), {"slot": i % 3, "blueprint": 1, "blend": i % 3, "op": 1},
                   -float(i), float(i), 0.0, False, open_masks(), env_id=i % 2)
    steps = buffer.steps
    seen: list[int] = []
    for batch, idx in buffer.get_batches(4, generator=torch.Generator().manual_seed(0)):
        seen.extend(idx.tolist())
        for row, i in enumerate(idx.tolist()):
            assert batch["states"][row, 0].item() == steps[i].state[0].item()
            assert batch["old_log_probs"][row].item() == steps[i].log_prob
            assert batch["values"][row].item() == steps[i].value
            assert batch["actions"]["slot"][row].item() == steps[i].slot_action
        assert batch["action_masks"]["blueprint"].shape[1:] == (5,)
    assert sorted(seen) == list(range(11))

    def order(seed: int) -> list[int]:
        batches = buffer.get_batches(4, generator=torch.Generator().manual_seed(seed))
        return [i for _, idx in batches for i in idx.tolist()]

    assert order(1) == order(1) and order(1) != order(2)


def test_clear_and_empty_batches() -> None:
    buffer = FactoredRolloutBuffer()
    add(buffer, reward=0.0, value=0.0, done=True)
    buffer.clear()
    assert len(buffer) == 0 and buffer.steps == []
    assert list(buffer.get_batches(4)) == []
    with pytest.raises(ValueError, match="batch_size"):
        list(buffer.get_batches(0))
