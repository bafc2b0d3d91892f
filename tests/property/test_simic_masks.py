"""Masks and dependent sampling on random lifecycle states."""

from __future__ import annotations

import random

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from esper.data.tasks import get_task_spec
from esper.env.masks import compute_batch_masks, masks_from_validity
from esper.leyline import (
    CANONICAL_SLOTS,
    ActionValidity,
    FactoredAction,
    LifecycleOp,
    MaskSeedInfo,
    SeedStage,
    compute_action_validity,
)
from esper.simic.ppo.distributions import InvalidStateMachineError, MaskedCategorical
from esper.simic.ppo.network import FactoredActorCritic

CNN = get_task_spec("synthetic").action_space

SEED_STAGES = (SeedStage.GERMINATED, SeedStage.TRAINING, SeedStage.BLENDING, SeedStage.PROBATIONARY,
               SeedStage.FOSSILIZED)
STATE_DIM = 16


def random_lifecycle(rng: random.Random) -> tuple[dict[str, MaskSeedInfo | None], int, int, tuple[str, ...]]:
    """Random enabled subset, per-slot seeds (stage, age, readiness), seed limit and embargo."""
    enabled = [s for s in CANONICAL_SLOTS if rng.random() < 0.75] or [rng.choice(CANONICAL_SLOTS)]
    states: dict[str, MaskSeedInfo | None] = {}
    for slot in enabled:
        if rng.random() < 0.4:
            states[slot] = None
        else:
            states[slot] = MaskSeedInfo(rng.choice(SEED_STAGES), rng.randint(0, 12), rng.random() < 0.5)
    present = sum(v is not None for v in states.values())
    max_seeds = rng.choice([0, 1, 2, 3])
    embargoed = tuple(s for s in enabled if states[s] is None and rng.random() < 0.2)
    return states, present, max_seeds, embargoed


def validity_of(rng: random.Random) -> ActionValidity:
    states, present, max_seeds, embargoed = random_lifecycle(rng)
    return compute_action_validity(states, total_seeds=present, max_seeds=max_seeds, embargoed=embargoed, space=CNN)


def sampled_actions(validities: list[ActionValidity], seed: int) -> list[FactoredAction]:
    torch.manual_seed(seed)
    network = FactoredActorCritic(STATE_DIM, num_blueprints=CNN.num_blueprints, hidden_dim=32)
    states = torch.randn(len(validities), STATE_DIM) * 3
    actions, log_probs, _, _ = network.get_action_batch(
        states, compute_batch_masks(validities), generator=torch.Generator().manual_seed(seed)
    )
    assert torch.isfinite(log_probs).all()
    columns = [actions[h].tolist() for h in ("slot", "blueprint", "blend", "op")]
    return [CNN.action(*row) for row in zip(*columns)]


def test_5000_random_lifecycle_states_only_sample_valid_actions() -> None:
    rng = random.Random(2024)
    validities = [validity_of(rng) for _ in range(5000)]
    op_counts = dict.fromkeys(LifecycleOp, 0)
    for seed in (0, 1):
        for validity, action in zip(validities, sampled_actions(validities, seed)):
            assert validity.is_valid(action), f"{action} sampled under {validity}"
            if action.op != LifecycleOp.WAIT:
                assert validity.is_valid_command(action.to_command(CNN))
            op_counts[action.op] += 1
    assert all(count > 100 for count in op_counts.values()), op_counts  # every op is exercised


lifecycle_seeds = st.integers(min_value=0, max_value=2**32 - 1)


@given(seeds=st.lists(lifecycle_seeds, min_size=1, max_size=32), net_seed=st.integers(0, 1000))
def test_sampled_actions_are_valid(seeds: list[int], net_seed: int) -> None:
    validities = [validity_of(random.Random(s)) for s in seeds]
    for validity, action in zip(validities, sampled_actions(validities, net_seed)):
        assert validity.is_valid(action)


@given(seed=lifecycle_seeds)
def test_joint_validity_agrees_with_factored_masks(seed: int) -> None:
    validity = validity_of(random.Random(seed))
    masks = masks_from_validity(validity)
    for index, valid in enumerate(validity.joint_mask()):
        a = CNN.from_joint_index(index)
        ok = bool(masks["op"][a.op])
        if a.op != LifecycleOp.WAIT:
            ok = ok and bool(masks["op_slot"][a.op, a.slot]) and bool(masks["slot"][a.slot])
        if a.op == LifecycleOp.GERMINATE:
            ok = ok and bool(masks["slot_blueprint"][a.slot, a.blueprint]) and bool(masks["blend"][a.blend])
        assert ok == valid, f"joint action {index} ({a})"
    assert len(validity.joint_mask()) == CNN.num_joint_actions
    # op mask ⇔ some slot valid for that op; WAIT always
    assert masks["op"][LifecycleOp.WAIT]
    assert torch.equal(masks["op"][1:], masks["op_slot"][1:].any(dim=-1))


@given(n=st.integers(1, 6), width=st.integers(1, 6), bad_row=st.integers(0, 5))
def test_all_false_mask_rows_raise(n: int, width: int, bad_row: int) -> None:
    mask = torch.ones(n, width, dtype=torch.bool)
    mask[bad_row % n] = False
    with pytest.raises(InvalidStateMachineError):
        MaskedCategorical(torch.randn(n, width), mask)
