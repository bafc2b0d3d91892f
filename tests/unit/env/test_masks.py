"""Action masks: validity per lifecycle state, head masks and their consistency with the joint mask."""

from __future__ import annotations

import pytest
import torch

from esper.env import masks as masks_module
from esper.env.masks import (
    MaskSeedInfo,
    build_slot_states,
    compute_batch_masks,
    condition_on_action,
    full_masks,
    masks_from_validity,
)
from esper.leyline import (
    UNRECORDED_HEADS,
    ActionSpace,
    ActionValidity,
    LifecycleOp,
    SeedMetrics,
    SeedStage,
    SeedStateReport,
)
from esper.leyline import MaskSeedInfo as LeylineMaskSeedInfo
from esper.leyline import compute_action_validity as leyline_validity

CNN = ActionSpace("cnn", UNRECORDED_HEADS["cnn"])
TRANSFORMER = ActionSpace("transformer", UNRECORDED_HEADS["transformer"])


def compute_action_masks(states: dict[str, MaskSeedInfo | None], total_seeds: int = 0, max_seeds: int = 0, *,
                         space: ActionSpace = CNN, **kwargs: object) -> dict[str, torch.Tensor]:
    return masks_module.compute_action_masks(states, total_seeds, max_seeds, space=space, **kwargs)  # type: ignore


def compute_action_validity(states: dict[str, MaskSeedInfo | None], **kwargs: object) -> ActionValidity:
    return leyline_validity(states, space=CNN, **kwargs)  # type: ignore[arg-type]

WAIT, GERMINATE, CULL, FOSSILIZE = LifecycleOp.WAIT, LifecycleOp.GERMINATE, LifecycleOp.CULL, LifecycleOp.FOSSILIZE
SHAPES = {"op": (4,), "slot": (3,), "blueprint": (5,), "blend": (3,), "op_slot": (4, 3), "slot_blueprint": (3, 5)}


def hand_built(op: list[bool], slot: list[bool], blueprint: list[bool] | None = None) -> dict[str, torch.Tensor]:
    return {
        "op": torch.tensor(op),
        "slot": torch.tensor(slot),
        "blueprint": torch.tensor(blueprint or [True] * 5),
        "blend": torch.ones(3, dtype=torch.bool),
    }


def test_reexports_leyline_mask_seed_info() -> None:
    assert MaskSeedInfo is LeylineMaskSeedInfo


def test_shapes_and_dtypes() -> None:
    masks = compute_action_masks({"early": None, "mid": None, "late": None})
    assert set(masks) == set(SHAPES)
    for key, shape in SHAPES.items():
        assert tuple(masks[key].shape) == shape and masks[key].dtype == torch.bool


# --- factored-action cases ----------------------------------------------------------------------------------
def test_factored_masking_germinate() -> None:
    masks = compute_action_masks({"early": None}, total_seeds=0, max_seeds=3)
    assert masks["op"].tolist() == [True, True, False, False]


def test_factored_masking_fossilize() -> None:
    masks = compute_action_masks({"early": MaskSeedInfo(SeedStage.PROBATIONARY.value, 5)}, total_seeds=1, max_seeds=3)
    assert masks["op"][FOSSILIZE].item() is True
    assert masks["op"][CULL].item() is True
    assert masks["op"][GERMINATE].item() is False


def test_factored_masking_seed_limit() -> None:
    masks = compute_action_masks({"early": None}, total_seeds=3, max_seeds=3)
    assert masks["op"][GERMINATE].item() is False
    assert masks["op"][WAIT].item() is True


# --- joint masks -----------------------------------------------------------------------------------------------------
def test_joint_op_slot_and_slot_union() -> None:
    states = {
        "early": MaskSeedInfo(SeedStage.PROBATIONARY, 6, fossilize_ready=True),
        "mid": None,
        "late": MaskSeedInfo(SeedStage.TRAINING, 0),  # too young to cull
    }
    masks = compute_action_masks(states, total_seeds=2)
    assert masks["op_slot"].tolist() == [
        [False, False, False],
        [False, True, False],
        [True, False, False],
        [True, False, False],
    ]
    assert masks["op"].tolist() == [True, True, True, True]
    assert masks["slot"].tolist() == [True, True, False]
    assert masks["blueprint"].tolist() == [False, True, True, True, True]
    assert masks["slot_blueprint"][:, 0].tolist() == [False, False, False]
    assert masks["blend"].all()


def test_disabled_slots_are_masked() -> None:
    masks = compute_action_masks({"mid": None})
    assert masks["slot"].tolist() == [False, True, False]
    assert masks["op_slot"][GERMINATE].tolist() == [False, True, False]


def test_embargo_and_space_are_passed_through() -> None:
    masks = compute_action_masks({"early": None, "mid": None}, embargoed=("early",), space=TRANSFORMER)
    assert masks["op_slot"][GERMINATE].tolist() == [False, True, False]
    plugin = ActionSpace("cnn", (*UNRECORDED_HEADS["cnn"], "pointwise"))
    wide = compute_action_masks({"early": None}, space=plugin)
    assert wide["blueprint"].tolist() == [False, True, True, True, True, True]
    assert tuple(wide["slot_blueprint"].shape) == (3, 6)
    assert tuple(full_masks({k: wide[k] for k in ("op", "slot", "blueprint", "blend")})["slot_blueprint"].shape) == (
        3, 6)


def test_fossilized_seed_enables_nothing() -> None:
    masks = compute_action_masks({"early": MaskSeedInfo(SeedStage.FOSSILIZED, 20)}, total_seeds=1)
    assert masks["op"].tolist() == [True, False, False, False]
    assert not masks["slot"].any()


def test_masks_from_validity_equals_compute_action_masks() -> None:
    states = {"early": MaskSeedInfo(SeedStage.BLENDING, 3), "late": None}
    validity = compute_action_validity(states, total_seeds=1, max_seeds=2)
    a, b = masks_from_validity(validity), compute_action_masks(states, total_seeds=1, max_seeds=2)
    assert all(torch.equal(a[k], b[k]) for k in SHAPES)


# --- build_slot_states -----------------------------------------------------------------------------------------------
def report(
    slot: str, stage: SeedStage, *, epochs: int, contribution: float | None, healthy: bool = True
) -> SeedStateReport:
    return SeedStateReport(
        seed_id=f"s_{slot}",
        slot_id=slot,
        blueprint_id="norm",
        blend_id="linear",
        stage=stage,
        previous_stage=SeedStage.BLENDING,
        previous_epochs_in_stage=3,
        stage_entered_epoch=9,
        metrics=SeedMetrics(epochs_total=epochs, counterfactual_contribution=contribution),
        is_healthy=healthy,
    )


def test_build_slot_states_derives_fossilize_readiness() -> None:
    reports = {
        "late": report("late", SeedStage.PROBATIONARY, epochs=12, contribution=1.0),
        "early": report("early", SeedStage.PROBATIONARY, epochs=7, contribution=0.99),
    }
    states = build_slot_states(reports, ["late", "mid", "early"])
    assert list(states) == ["early", "mid", "late"]
    assert states["mid"] is None
    assert states["late"] == MaskSeedInfo(SeedStage.PROBATIONARY, 12, fossilize_ready=True)
    assert states["early"] == MaskSeedInfo(SeedStage.PROBATIONARY, 7, fossilize_ready=False)
    unhealthy = build_slot_states({"mid": report("mid", SeedStage.PROBATIONARY, epochs=9, contribution=5.0,
                                                 healthy=False)}, ["mid"])
    assert unhealthy["mid"] is not None and unhealthy["mid"].fossilize_ready is False
    unmeasured = build_slot_states({"mid": report("mid", SeedStage.TRAINING, epochs=2, contribution=None)}, ["mid"])
    assert unmeasured["mid"] is not None and unmeasured["mid"].fossilize_ready is False
    custom = build_slot_states(reports, ["early", "mid", "late"], min_fossilize_contribution=0.5)
    assert custom["early"] is not None and custom["early"].fossilize_ready is True


def test_build_slot_states_rejects_reports_for_disabled_slots() -> None:
    with pytest.raises(ValueError, match="not enabled"):
        build_slot_states({"mid": report("mid", SeedStage.TRAINING, epochs=1, contribution=None)}, ["early"])


# --- hand-built dicts ------------------------------------------------------------------------------------------------
def test_full_masks_broadcasts_hand_built_dicts() -> None:
    full = full_masks(hand_built([True, True, False, True], [True, False, True]))
    assert full["op_slot"].tolist() == [[False] * 3, [True, False, True], [True, False, True], [True, False, True]]
    assert full["slot_blueprint"].tolist() == [[True] * 5] * 3
    batched = full_masks({k: v.unsqueeze(0).repeat(2, *([1] * v.dim())) for k, v in hand_built(
        [True] * 4, [True, True, False]).items()})
    assert tuple(batched["op_slot"].shape) == (2, 4, 3) and tuple(batched["slot_blueprint"].shape) == (2, 3, 5)


def test_full_masks_validates() -> None:
    with pytest.raises(KeyError, match="blend"):
        full_masks({"op": torch.ones(4, dtype=torch.bool), "slot": torch.ones(3, dtype=torch.bool),
                    "blueprint": torch.ones(5, dtype=torch.bool)})
    bad = hand_built([True] * 4, [True] * 3)
    bad["slot"] = torch.ones(4, dtype=torch.bool)
    with pytest.raises(ValueError, match="slot"):
        full_masks(bad)


def test_compute_batch_masks_stacks_validities_and_dicts() -> None:
    validity = compute_action_validity({"early": None, "mid": None, "late": None})
    hand = hand_built([True, False, False, False], [False, False, False])
    batch = compute_batch_masks([validity, hand])
    for key, shape in SHAPES.items():
        assert tuple(batch[key].shape) == (2, *shape)
    assert batch["op"][1].tolist() == [True, False, False, False]
    assert batch["op_slot"][0, GERMINATE].tolist() == [True, True, True]
    with pytest.raises(ValueError, match="at least one"):
        compute_batch_masks([])


# --- conditioning ----------------------------------------------------------------------------------------------------
def mixed_masks() -> dict[str, torch.Tensor]:
    states = {"early": None, "mid": MaskSeedInfo(SeedStage.PROBATIONARY, 4), "late": None}
    return compute_action_masks(states, total_seeds=1)


def test_condition_on_wait_makes_other_heads_all_true() -> None:
    used = condition_on_action(mixed_masks(), {"op": 0, "slot": 0, "blueprint": 0, "blend": 0})
    assert used["op"].tolist() == [True, True, True, True]
    assert used["slot"].all() and used["blueprint"].all() and used["blend"].all()


def test_condition_on_germinate_and_cull() -> None:
    masks = mixed_masks()
    used = condition_on_action(masks, {"op": 1, "slot": 2, "blueprint": 3, "blend": 1})
    assert used["slot"].tolist() == [True, False, True]
    assert used["blueprint"].tolist() == [False, True, True, True, True]
    assert used["blend"].tolist() == [True, True, True]
    used = condition_on_action(masks, {"op": 2, "slot": 1, "blueprint": 0, "blend": 0})
    assert used["slot"].tolist() == [False, True, False]
    assert used["blueprint"].all() and used["blend"].all()


def test_condition_batched_equals_per_row() -> None:
    masks = mixed_masks()
    batch = {k: torch.stack([v, v, v]) for k, v in masks.items()}
    actions = {"op": torch.tensor([0, 1, 3]), "slot": torch.tensor([0, 0, 1]),
               "blueprint": torch.tensor([0, 2, 0]), "blend": torch.tensor([0, 2, 0])}
    used = condition_on_action(batch, actions)
    for i in range(3):
        row = condition_on_action(masks, {k: int(v[i]) for k, v in actions.items()})
        assert all(torch.equal(used[k][i], row[k]) for k in row)


def test_condition_is_idempotent_on_used_masks() -> None:
    masks = mixed_masks()
    for action in ({"op": 1, "slot": 0, "blueprint": 4, "blend": 2}, {"op": 3, "slot": 1, "blueprint": 0, "blend": 0}):
        used = condition_on_action(masks, action)
        again = condition_on_action(used, action)
        assert all(torch.equal(used[k], again[k]) for k in used)
