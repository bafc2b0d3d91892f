"""Head masks rebuilt from the stored joint validity equal the ones built from the validity rules."""

from __future__ import annotations

import torch
from hypothesis import given
from hypothesis import strategies as st

from esper.env.masks import masks_from_joint, masks_from_validity
from esper.leyline import (
    CANONICAL_SLOTS,
    UNRECORDED_HEADS,
    ActionSpace,
    LifecycleOp,
    MaskSeedInfo,
    SeedStage,
    compute_action_validity,
)

STAGES = [None, SeedStage.TRAINING, SeedStage.BLENDING, SeedStage.PROBATIONARY, SeedStage.FOSSILIZED]


SPACES = [ActionSpace("cnn", UNRECORDED_HEADS["cnn"]), ActionSpace("cnn", (*UNRECORDED_HEADS["cnn"], "pointwise"))]


@given(st.lists(st.sampled_from(STAGES), min_size=3, max_size=3), st.lists(st.integers(0, 12), min_size=3,
                                                                            max_size=3), st.booleans(),
       st.sampled_from(SPACES))
def test_masks_from_joint_equal_masks_from_validity(stages: list[SeedStage | None], ages: list[int],
                                                    ready: bool, space: ActionSpace) -> None:
    states = {slot: None if stage is None else MaskSeedInfo(stage, age, fossilize_ready=ready)
              for slot, stage, age in zip(CANONICAL_SLOTS, stages, ages, strict=True)}
    validity = compute_action_validity(states, total_seeds=sum(s is not None for s in stages), max_seeds=3,
                                       space=space)
    rebuilt = masks_from_joint(torch.tensor([validity.joint_mask()]), space)
    direct = masks_from_validity(validity)
    for key in ("op", "op_slot", "slot"):
        assert torch.equal(rebuilt[key][0], direct[key]), key
    # Blueprints and blends only matter for slots a germination may target (dependent sampling picks the slot first).
    germinable = direct["op_slot"][LifecycleOp.GERMINATE]
    assert torch.equal(rebuilt["slot_blueprint"][0][germinable], direct["slot_blueprint"][germinable])
    if germinable.any():
        assert torch.equal(rebuilt["blend"][0], direct["blend"])
    assert rebuilt["blend"].any()
