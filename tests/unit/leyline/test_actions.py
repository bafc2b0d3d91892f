"""Factored actions, action spaces, commands, joint index, slot ordering and validity rules."""

from __future__ import annotations

import dataclasses
import itertools
from enum import IntEnum

import pytest

import esper.leyline.actions as actions_module
from esper.leyline import (
    CANONICAL_SLOTS,
    NUM_BLENDS,
    NUM_OPS,
    NUM_SLOTS,
    UNRECORDED_HEADS,
    ActionSpace,
    ActionValidity,
    BlendAction,
    FactoredAction,
    LifecycleCommand,
    LifecycleOp,
    MaskSeedInfo,
    SeedStage,
    SlotAction,
    compute_action_validity,
    ordered_slots,
)
from esper.leyline.constants import MIN_CULL_AGE
from esper.leyline.errors import UserInputError

OP = LifecycleOp
CNN = ActionSpace("cnn", UNRECORDED_HEADS["cnn"], others=("conv_heavy",))
TRANSFORMER = ActionSpace("transformer", UNRECORDED_HEADS["transformer"])
SPACES = (CNN, TRANSFORMER)
SIX = ActionSpace("cnn", (*UNRECORDED_HEADS["cnn"], "pointwise"))
"""The CNN space with one plugin blueprint more in its head."""
NUM_JOINT_ACTIONS = CNN.num_joint_actions
ALL_JOINT = [CNN.from_joint_index(i) for i in range(NUM_JOINT_ACTIONS)]


def fa(slot: int, blueprint: int, blend: int, op: int) -> FactoredAction:
    return CNN.action(slot, blueprint, blend, op)


def validity(states: dict[str, MaskSeedInfo | None], space: ActionSpace = CNN, **kwargs: object) -> ActionValidity:
    return compute_action_validity(states, space=space, **kwargs)  # type: ignore[arg-type]


def seed(stage: SeedStage, age: int = 5, ready: bool = True) -> MaskSeedInfo:
    return MaskSeedInfo(stage=int(stage), seed_age_epochs=age, fossilize_ready=ready)


# --------------------------------------------------------------------------------------------- enums and constants


def test_sizes_and_canonical_slots() -> None:
    assert CANONICAL_SLOTS == ("early", "mid", "late")
    assert (NUM_SLOTS, CNN.num_blueprints, NUM_BLENDS, NUM_OPS, CNN.num_joint_actions) == (3, 5, 3, 4, 43)
    assert (TRANSFORMER.num_blueprints, TRANSFORMER.num_joint_actions) == (5, 43)
    assert actions_module.CANONICAL_SLOTS == CANONICAL_SLOTS


def test_sizes_follow_the_blueprint_head() -> None:
    """One blueprint more in the head: 3 slots × 3 blends more GERMINATE actions, nothing counted by hand."""
    assert (SIX.num_blueprints, SIX.num_joint_actions) == (6, 52)
    for n in range(2, 9):
        space = ActionSpace("cnn", ("noop", *(f"b{i}" for i in range(1, n))))
        assert space.num_joint_actions == 1 + NUM_SLOTS * (n - 1) * NUM_BLENDS + 2 * NUM_SLOTS
        joint = [space.from_joint_index(i) for i in range(space.num_joint_actions)]
        assert [space.joint_index(a) for a in joint] == list(range(space.num_joint_actions))
        assert len(set(joint)) == space.num_joint_actions


@pytest.mark.parametrize(("head", "others"), [(("conv_light",), ()), (("noop",), ()), (("noop", "a", "a"), ()),
                                              (("noop", "a"), ("a",))])
def test_action_space_rejects_a_malformed_head(head: tuple[str, ...], others: tuple[str, ...]) -> None:
    with pytest.raises(UserInputError):
        ActionSpace("cnn", head, others)


def test_buildable_blueprints_include_those_outside_the_head() -> None:
    assert CNN.buildable == ("conv_light", "attention", "norm", "depthwise", "conv_heavy")
    assert CNN.blueprint_index("conv_heavy") is None and CNN.blueprint_index("norm") == 3


@pytest.mark.parametrize(
    ("enum", "expected", "size"),
    [
        (SlotAction, {"EARLY": 0, "MID": 1, "LATE": 2}, NUM_SLOTS),
        (BlendAction, {"LINEAR": 0, "SIGMOID": 1, "GATED": 2}, NUM_BLENDS),
        (LifecycleOp, {"WAIT": 0, "GERMINATE": 1, "CULL": 2, "FOSSILIZE": 3}, NUM_OPS),
    ],
    ids=lambda x: getattr(x, "__name__", ""),
)
def test_enum_values(enum: type[IntEnum], expected: dict[str, int], size: int) -> None:
    assert issubclass(enum, IntEnum)
    assert {m.name: m.value for m in enum} == expected
    assert len(enum) == size


def test_no_advance_op_and_no_flat_action_enum() -> None:
    assert "ADV" + "ANCE" not in LifecycleOp.__members__  # split so repo-wide greps stay clean
    assert not hasattr(actions_module, "Action")
    assert not hasattr(actions_module, "compute_flat_" + "action_mask")


def test_slot_and_blend_ids() -> None:
    assert [s.to_slot_id() for s in SlotAction] == ["early", "mid", "late"]
    assert [b.to_algorithm_id() for b in BlendAction] == ["linear", "sigmoid", "gated"]


def test_unrecorded_heads() -> None:
    assert UNRECORDED_HEADS == {
        "cnn": ("noop", "conv_light", "attention", "norm", "depthwise"),
        "transformer": ("noop", "lora", "attention", "norm", "mlp"),
    }


@pytest.mark.parametrize("space", SPACES, ids=lambda s: s.topology)
def test_blueprint_id_uses_head(space: ActionSpace) -> None:
    assert [space.blueprint_id(b) for b in range(space.num_blueprints)] == list(space.head)
    with pytest.raises(ValueError):
        space.blueprint_id(space.num_blueprints)


# ---------------------------------------------------------------------------------------------- FactoredAction


@pytest.mark.parametrize("op", list(LifecycleOp), ids=lambda o: o.name)
def test_factored_action_is_germinate(op: LifecycleOp) -> None:
    assert fa(1, 2, 1, op).is_germinate == (op == LifecycleOp.GERMINATE)


def test_factored_action_fields_and_ids() -> None:
    action = fa(2, 4, 1, OP.GERMINATE)
    assert action.slot is SlotAction.LATE
    assert action.blueprint == 4
    assert action.blend is BlendAction.SIGMOID
    assert action.op is OP.GERMINATE
    assert action.slot_id == "late"
    assert action.blend_algorithm_id == "sigmoid"
    assert action.to_command(CNN).blueprint_id == "depthwise"
    assert action.to_command(TRANSFORMER).blueprint_id == "mlp"


def test_factored_action_is_frozen_and_slotted() -> None:
    action = fa(0, 1, 0, OP.GERMINATE)
    with pytest.raises(dataclasses.FrozenInstanceError):
        action.op = OP.CULL  # type: ignore[misc]
    assert not hasattr(action, "__dict__")
    assert action == fa(0, 1, 0, OP.GERMINATE) and hash(action) == hash(fa(0, 1, 0, OP.GERMINATE))


@pytest.mark.parametrize(
    "indices",
    [
        (3, 0, 0, 0),
        (-1, 0, 0, 0),
        (0, 5, 0, 0),
        (0, -1, 0, 0),
        (0, 0, 3, 0),
        (0, 0, -1, 0),
        (0, 0, 0, 4),
        (0, 0, 0, -1),
    ],
)
def test_from_indices_out_of_range_raises(indices: tuple[int, int, int, int]) -> None:
    with pytest.raises(ValueError):
        CNN.action(*indices)


def test_the_blueprint_range_is_the_space_head() -> None:
    assert SIX.action(0, 5, 0, OP.GERMINATE).to_command(SIX).blueprint_id == "pointwise"
    with pytest.raises(ValueError):
        CNN.action(0, 5, 0, OP.GERMINATE)


def test_from_indices_builds_enum_members() -> None:
    for s, b, bl, o in itertools.product(range(3), range(5), range(3), range(4)):
        action = CNN.action(s, b, bl, o)
        assert (action.slot, action.blueprint, action.blend, action.op) == (
            SlotAction(s),
            b,
            BlendAction(bl),
            LifecycleOp(o),
        )
        assert isinstance(action.op, LifecycleOp)


# ----------------------------------------------------------------------------------------------- LifecycleCommand


@pytest.mark.parametrize(
    "kwargs",
    [
        {"op": OP.WAIT, "slot_id": "early"},
        {"op": OP.WAIT, "blueprint_id": "norm"},
        {"op": OP.WAIT, "blend_id": "linear"},
        {"op": OP.GERMINATE, "blueprint_id": "norm", "blend_id": "linear"},
        {"op": OP.GERMINATE, "slot_id": "early", "blend_id": "linear"},
        {"op": OP.GERMINATE, "slot_id": "early", "blueprint_id": "norm"},
        {"op": OP.CULL},
        {"op": OP.CULL, "slot_id": "early", "blueprint_id": "norm"},
        {"op": OP.FOSSILIZE},
        {"op": OP.FOSSILIZE, "slot_id": "late", "blend_id": "gated"},
    ],
)
def test_lifecycle_command_validation_errors(kwargs: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        LifecycleCommand(**kwargs)  # type: ignore[arg-type]


def test_lifecycle_command_valid_forms_and_frozen() -> None:
    wait = LifecycleCommand(OP.WAIT)
    assert (wait.slot_id, wait.blueprint_id, wait.blend_id) == (None, None, None)
    germ = LifecycleCommand(OP.GERMINATE, "mid", "norm", "gated")
    assert (germ.slot_id, germ.blueprint_id, germ.blend_id) == ("mid", "norm", "gated")
    cull = LifecycleCommand(OP.CULL, slot_id="late")
    assert (cull.blueprint_id, cull.blend_id) == (None, None)
    LifecycleCommand(OP.FOSSILIZE, slot_id="early")
    with pytest.raises(dataclasses.FrozenInstanceError):
        germ.slot_id = "early"  # type: ignore[misc]


# ------------------------------------------------------------------------------------------ to/from command


def test_to_command_per_op() -> None:
    assert fa(2, 3, 2, OP.WAIT).to_command(CNN) == LifecycleCommand(OP.WAIT)
    assert fa(1, 1, 2, OP.GERMINATE).to_command(CNN) == LifecycleCommand(OP.GERMINATE, "mid", "conv_light", "gated")
    assert fa(1, 1, 2, OP.GERMINATE).to_command(TRANSFORMER) == LifecycleCommand(OP.GERMINATE, "mid", "lora", "gated")
    assert fa(0, 4, 0, OP.GERMINATE).to_command(TRANSFORMER) == LifecycleCommand(
        OP.GERMINATE, "early", "mlp", "linear"
    )
    assert fa(2, 3, 1, OP.CULL).to_command(CNN) == LifecycleCommand(OP.CULL, "late")
    assert fa(0, 0, 0, OP.FOSSILIZE).to_command(TRANSFORMER) == LifecycleCommand(OP.FOSSILIZE, "early")


def test_to_command_germinate_noop_raises() -> None:
    with pytest.raises(ValueError):
        fa(0, 0, 0, OP.GERMINATE).to_command(CNN)


@pytest.mark.parametrize("space", SPACES, ids=lambda s: s.topology)
@pytest.mark.parametrize("action", ALL_JOINT, ids=lambda a: f"{a.op.name}-{a.slot}-{a.blueprint}-{a.blend}")
def test_command_round_trip(action: FactoredAction, space: ActionSpace) -> None:
    cmd = action.to_command(space)
    back = FactoredAction.from_command(cmd, space)
    assert back == action
    assert back is not None and back.to_command(space) == cmd


@pytest.mark.parametrize(
    ("cmd", "space"),
    [
        (LifecycleCommand(OP.GERMINATE, "early", "conv_heavy", "linear"), CNN),
        (LifecycleCommand(OP.GERMINATE, "mid", "conv_light", "linear"), TRANSFORMER),
        (LifecycleCommand(OP.GERMINATE, "late", "lora", "sigmoid"), CNN),
        (LifecycleCommand(OP.GERMINATE, "late", "pointwise", "sigmoid"), CNN),
    ],
)
def test_from_command_outside_head_is_none(cmd: LifecycleCommand, space: ActionSpace) -> None:
    assert FactoredAction.from_command(cmd, space) is None


def test_a_plugin_blueprint_has_a_factored_action_in_its_head() -> None:
    cmd = LifecycleCommand(OP.GERMINATE, "late", "pointwise", "sigmoid")
    action = FactoredAction.from_command(cmd, SIX)
    assert action == SIX.action(2, 5, 1, OP.GERMINATE) and action.to_command(SIX) == cmd
    assert SIX.from_joint_index(SIX.joint_index(action)) == action


def test_from_command_non_germinate_ignores_the_space() -> None:
    for space in SPACES:
        assert FactoredAction.from_command(LifecycleCommand(OP.CULL, "mid"), space) == fa(1, 0, 0, OP.CULL)
        assert FactoredAction.from_command(LifecycleCommand(OP.WAIT), space) == fa(0, 0, 0, OP.WAIT)


# --------------------------------------------------------------------------------------------------- joint index


def test_joint_index_bijection() -> None:
    indices = [CNN.joint_index(a) for a in ALL_JOINT]
    assert indices == list(range(NUM_JOINT_ACTIONS))
    assert len(set(ALL_JOINT)) == NUM_JOINT_ACTIONS
    ops = [a.op for a in ALL_JOINT]
    assert ops.count(OP.WAIT) == 1 and ops.count(OP.GERMINATE) == 36
    assert ops.count(OP.CULL) == 3 and ops.count(OP.FOSSILIZE) == 3


def test_joint_index_formula_for_every_germinate() -> None:
    for s, b, bl in itertools.product(range(3), range(1, 5), range(3)):
        i = CNN.joint_index(fa(s, b, bl, OP.GERMINATE))
        assert i == 1 + 12 * s + 3 * (b - 1) + bl
        assert CNN.from_joint_index(i) == fa(s, b, bl, OP.GERMINATE)


@pytest.mark.parametrize(
    ("action", "index"),
    [
        (fa(0, 0, 0, OP.WAIT), 0),
        (fa(0, 1, 0, OP.GERMINATE), 1),
        (fa(2, 4, 2, OP.GERMINATE), 36),
        (fa(0, 0, 0, OP.CULL), 37),
        (fa(1, 0, 0, OP.CULL), 38),
        (fa(0, 0, 0, OP.FOSSILIZE), 40),
        (fa(2, 0, 0, OP.FOSSILIZE), 42),
    ],
)
def test_joint_index_spot_values(action: FactoredAction, index: int) -> None:
    assert CNN.joint_index(action) == index
    assert CNN.from_joint_index(index) == action


def test_joint_index_ignores_unused_heads() -> None:
    """Heads irrelevant to the op do not change the joint index."""
    assert CNN.joint_index(fa(2, 3, 1, OP.WAIT)) == 0
    assert CNN.joint_index(fa(1, 4, 2, OP.CULL)) == 38
    assert CNN.joint_index(fa(2, 2, 1, OP.FOSSILIZE)) == 42


def test_joint_index_errors() -> None:
    with pytest.raises(ValueError):
        CNN.joint_index(fa(0, 0, 0, OP.GERMINATE))
    for bad in (-1, NUM_JOINT_ACTIONS, 100):
        with pytest.raises(ValueError):
            CNN.from_joint_index(bad)


# ------------------------------------------------------------------------------------------------ ordered_slots


def test_ordered_slots_invariant_to_dict_insertion_order() -> None:
    for r in range(len(CANONICAL_SLOTS) + 1):
        for subset in itertools.combinations(CANONICAL_SLOTS, r):
            outputs = {ordered_slots(dict.fromkeys(perm)) for perm in itertools.permutations(subset)}
            assert outputs == {tuple(subset)}, subset
            assert ordered_slots(list(reversed(subset))) == tuple(subset)


def test_ordered_slots_returns_tuple() -> None:
    assert ordered_slots({"late": 1, "early": 2}) == ("early", "late")
    assert ordered_slots([]) == ()


@pytest.mark.parametrize("bad", [["early", "bogus"], ["EARLY"], ["mid", "mid"], ["late", "early", "late"]])
def test_ordered_slots_errors(bad: list[str]) -> None:
    with pytest.raises(ValueError):
        ordered_slots(bad)


# ---------------------------------------------------------------------------------------------- validity rules


def test_validity_shapes() -> None:
    v = validity({"early": None, "mid": None, "late": None})
    assert isinstance(v, ActionValidity)
    assert len(v.op_slot) == NUM_OPS and all(len(row) == NUM_SLOTS for row in v.op_slot)
    assert len(v.op) == NUM_OPS
    assert len(v.slot_blueprint) == NUM_SLOTS and all(len(row) == CNN.num_blueprints for row in v.slot_blueprint)
    assert all(len(row) == 6 for row in validity({"early": None}, SIX).slot_blueprint)
    assert len(v.blend) == NUM_BLENDS
    assert all(isinstance(x, bool) for x in (*v.op, *v.blend, *itertools.chain(*v.op_slot, *v.slot_blueprint)))


def test_empty_slots_wait_and_germinate_only() -> None:
    v = validity({"early": None, "mid": None, "late": None}, total_seeds=0, max_seeds=3)
    assert v.op == (True, True, False, False)
    assert v.op_slot[OP.GERMINATE] == (True, True, True)
    assert v.op_slot[OP.WAIT] == (False, False, False)
    assert v.op_slot[OP.CULL] == v.op_slot[OP.FOSSILIZE] == (False, False, False)


def test_seed002_germinate_mask() -> None:
    v = validity({"early": None}, total_seeds=0, max_seeds=3)
    assert v.op[OP.WAIT] and v.op[OP.GERMINATE]
    assert not v.op[OP.CULL] and not v.op[OP.FOSSILIZE]


def test_probationary_ready_can_fossilize_and_cull() -> None:
    v = validity({"early": seed(SeedStage.PROBATIONARY, 5)}, total_seeds=1, max_seeds=3)
    assert v.op[OP.FOSSILIZE] and v.op[OP.CULL]
    assert v.op_slot[OP.FOSSILIZE] == (True, False, False)
    assert v.op_slot[OP.CULL] == (True, False, False)
    assert not v.op[OP.GERMINATE]


def test_probationary_not_ready_cannot_fossilize() -> None:
    v = validity({"early": seed(SeedStage.PROBATIONARY, 5, ready=False)})
    assert not v.op[OP.FOSSILIZE] and v.op_slot[OP.FOSSILIZE] == (False, False, False)
    assert v.op[OP.CULL]


def test_mask_seed_info_defaults_ready() -> None:
    info = MaskSeedInfo(stage=6, seed_age_epochs=0)
    assert info.fossilize_ready is True
    with pytest.raises(dataclasses.FrozenInstanceError):
        info.stage = 7  # type: ignore[misc]


@pytest.mark.parametrize(
    "stage", [SeedStage.GERMINATED, SeedStage.TRAINING, SeedStage.BLENDING, SeedStage.PROBATIONARY]
)
def test_cull_needs_min_age(stage: SeedStage) -> None:
    assert MIN_CULL_AGE == 1
    young = validity({"mid": seed(stage, age=0)})
    assert young.op_slot[OP.CULL] == (False, False, False) and not young.op[OP.CULL]
    old = validity({"mid": seed(stage, age=MIN_CULL_AGE)})
    assert old.op_slot[OP.CULL] == (False, True, False) and old.op[OP.CULL]


@pytest.mark.parametrize("stage", list(SeedStage), ids=lambda s: s.name)
def test_per_stage_cull_fossilize_rules(stage: SeedStage) -> None:
    v = validity({"late": seed(stage, age=10)})
    cullable = stage in (SeedStage.GERMINATED, SeedStage.TRAINING, SeedStage.BLENDING, SeedStage.PROBATIONARY)
    assert v.op_slot[OP.CULL][2] is cullable
    assert v.op_slot[OP.FOSSILIZE][2] is (stage == SeedStage.PROBATIONARY)
    assert v.op_slot[OP.GERMINATE][2] is False  # occupied


def test_fossilized_blocks_germination_and_enables_nothing() -> None:
    v = validity({"early": seed(SeedStage.FOSSILIZED, age=20)}, total_seeds=1, max_seeds=0)
    assert v.op == (True, False, False, False)
    assert all(not any(row) for row in v.op_slot)
    mixed = validity({"early": seed(SeedStage.FOSSILIZED, 20), "mid": None})
    assert mixed.op_slot[OP.GERMINATE] == (False, True, False)


def test_seed_limit_masks_germinate() -> None:
    v = validity({"early": None}, total_seeds=3, max_seeds=3)
    assert not v.op[OP.GERMINATE] and v.op[OP.WAIT]
    assert v.op_slot[OP.GERMINATE] == (False, False, False)
    assert validity({"early": None}, total_seeds=4, max_seeds=3).op[OP.GERMINATE] is False
    assert validity({"early": None}, total_seeds=2, max_seeds=3).op[OP.GERMINATE] is True
    assert validity({"early": None}, total_seeds=99, max_seeds=0).op[OP.GERMINATE] is True


def test_seed_limit_does_not_mask_cull_or_fossilize() -> None:
    v = validity({"early": seed(SeedStage.PROBATIONARY), "mid": None}, total_seeds=1, max_seeds=1)
    assert v.op == (True, False, True, True)


def test_embargoed_slot_cannot_germinate() -> None:
    states = {"early": None, "mid": None, "late": None}
    v = validity(states, embargoed=("mid",))
    assert v.op_slot[OP.GERMINATE] == (True, False, True)
    all_blocked = validity(states, embargoed=CANONICAL_SLOTS)
    assert not all_blocked.op[OP.GERMINATE] and all_blocked.op[OP.WAIT]
    # embargo is about germination only: an occupied embargoed slot can still be culled
    occupied = validity({"mid": seed(SeedStage.TRAINING, 3)}, embargoed={"mid"})
    assert occupied.op_slot[OP.CULL] == (False, True, False)


def test_disabled_slots_are_masked_for_everything() -> None:
    v = validity({"mid": None})
    assert v.op_slot[OP.GERMINATE] == (False, True, False)
    v = validity({"late": seed(SeedStage.PROBATIONARY)})
    assert v.op_slot[OP.GERMINATE] == (False, False, False)
    assert v.op_slot[OP.CULL] == v.op_slot[OP.FOSSILIZE] == (False, False, True)
    none_enabled = validity({})
    assert none_enabled.op == (True, False, False, False)
    assert not any(itertools.chain(*none_enabled.op_slot))


def test_blueprint_noop_always_masked_and_blend_all_true() -> None:
    cases = [
        {},
        {"early": None, "mid": None, "late": None},
        {"early": seed(SeedStage.FOSSILIZED), "mid": seed(SeedStage.PROBATIONARY)},
    ]
    for states in cases:
        for space in SPACES:
            v = validity(states, space, total_seeds=5, max_seeds=5)
            assert v.slot_blueprint == ((False, True, True, True, True),) * NUM_SLOTS
            assert v.blend == (True, True, True)


def test_op_is_any_over_slots() -> None:
    infos = [None, *(seed(s, age) for s in SeedStage for age in (0, 1)), seed(SeedStage.PROBATIONARY, 3, False)]
    for early, late in itertools.product(infos, repeat=2):
        v = validity({"early": early, "late": late}, total_seeds=1, max_seeds=2)
        assert v.op[OP.WAIT] is True
        for op in (OP.GERMINATE, OP.CULL, OP.FOSSILIZE):
            assert v.op[op] is any(v.op_slot[op])


def test_validity_independent_of_dict_order_and_stage_type() -> None:
    base = {"early": seed(SeedStage.TRAINING, 2), "mid": None, "late": seed(SeedStage.PROBATIONARY, 6)}
    expected = validity(base, total_seeds=2, max_seeds=3)
    for perm in itertools.permutations(base):
        assert validity({k: base[k] for k in perm}, total_seeds=2, max_seeds=3) == expected
    enum_stage = {"early": MaskSeedInfo(stage=SeedStage.TRAINING, seed_age_epochs=2), "mid": None}
    int_stage = {"early": MaskSeedInfo(stage=3, seed_age_epochs=2), "mid": None}
    assert validity(enum_stage) == validity(int_stage)


def test_validity_unknown_slot_raises() -> None:
    with pytest.raises(ValueError):
        validity({"middle": None})


def test_topology_does_not_change_validity() -> None:
    states = {"early": seed(SeedStage.BLENDING, 3), "mid": None, "late": seed(SeedStage.PROBATIONARY, 6)}
    cnn, transformer = validity(states, CNN), validity(states, TRANSFORMER)
    assert (cnn.op, cnn.op_slot, cnn.slot_blueprint) == (transformer.op, transformer.op_slot,
                                                         transformer.slot_blueprint)


# ------------------------------------------------------------------------------------ ActionValidity consistency

STATE_CASES = [
    ({"early": None, "mid": None, "late": None}, 0, 0, ()),
    ({"early": None, "mid": None, "late": None}, 3, 3, ()),
    ({"early": seed(SeedStage.PROBATIONARY), "mid": None, "late": seed(SeedStage.TRAINING, 0)}, 2, 3, ("mid",)),
    ({"mid": seed(SeedStage.FOSSILIZED), "late": None}, 1, 0, ()),
    ({"early": seed(SeedStage.BLENDING, 4), "late": seed(SeedStage.PROBATIONARY, 7, ready=False)}, 2, 0, ()),
    ({}, 0, 0, ()),
]


@pytest.mark.parametrize(("states", "total", "limit", "embargo"), STATE_CASES)
def test_is_valid_matches_rule_tables(
    states: dict[str, MaskSeedInfo | None], total: int, limit: int, embargo: tuple[str, ...]
) -> None:
    v = validity(states, total_seeds=total, max_seeds=limit, embargoed=embargo)
    for s, b, bl, o in itertools.product(range(3), range(5), range(3), range(4)):
        action = fa(s, b, bl, o)
        if o == OP.WAIT:
            expected = True
        elif o == OP.GERMINATE:
            expected = v.op[o] and v.op_slot[o][s] and v.slot_blueprint[s][b] and v.blend[bl]
        else:
            expected = v.op[o] and v.op_slot[o][s]
        assert v.is_valid(action) is expected, action


@pytest.mark.parametrize(("states", "total", "limit", "embargo"), STATE_CASES)
@pytest.mark.parametrize("space", (*SPACES, SIX), ids=lambda s: f"{s.topology}-{s.num_blueprints}")
def test_joint_mask_and_commands_consistent(
    states: dict[str, MaskSeedInfo | None], total: int, limit: int, embargo: tuple[str, ...], space: ActionSpace
) -> None:
    v = validity(states, space, total_seeds=total, max_seeds=limit, embargoed=embargo)
    mask = v.joint_mask()
    assert len(mask) == space.num_joint_actions and mask[0] is True
    for i in range(space.num_joint_actions):
        action = space.from_joint_index(i)
        assert mask[i] is v.is_valid(action)
        assert v.is_valid_command(action.to_command(space)) is mask[i]
    for op in (OP.GERMINATE, OP.CULL, OP.FOSSILIZE):
        assert v.valid_slots(op) == tuple(s for i, s in enumerate(CANONICAL_SLOTS) if v.op_slot[op][i])


def test_is_valid_command_outside_head_needs_only_slot() -> None:
    v = validity({"early": None, "mid": seed(SeedStage.TRAINING, 2)})
    assert v.is_valid_command(LifecycleCommand(OP.GERMINATE, "early", "conv_heavy", "linear"))
    assert not v.is_valid_command(LifecycleCommand(OP.GERMINATE, "mid", "conv_heavy", "linear"))
    assert not v.is_valid_command(LifecycleCommand(OP.GERMINATE, "late", "conv_heavy", "linear"))
    assert v.is_valid_command(LifecycleCommand(OP.WAIT))
    assert v.is_valid_command(LifecycleCommand(OP.CULL, "mid"))
    assert not v.is_valid_command(LifecycleCommand(OP.CULL, "early"))
    assert not v.is_valid_command(LifecycleCommand(OP.FOSSILIZE, "mid"))


@pytest.mark.parametrize("space", SPACES, ids=lambda s: s.topology)
def test_is_valid_command_rejects_noop_germination(space: ActionSpace) -> None:
    """The noop head entry is always masked, so germinating "noop" is never a valid command."""
    v = validity({"early": None, "mid": None, "late": None}, space)
    for slot in CANONICAL_SLOTS:
        assert not v.is_valid_command(LifecycleCommand(OP.GERMINATE, slot, "noop", "linear"))
