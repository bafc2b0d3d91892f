"""Leyline property tests: joint index, validity masks, SeedTelemetry features."""

from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st

from esper.leyline import (
    CANONICAL_SLOTS,
    NUM_BLENDS,
    NUM_SLOTS,
    ActionSpace,
    BlendAction,
    FactoredAction,
    LifecycleOp,
    MaskSeedInfo,
    SeedStage,
    SeedTelemetry,
    SlotAction,
    compute_action_validity,
)

# Action spaces of every head size a registry can produce: noop and 1 … 7 blueprints (5 built in for CNNs).
spaces = st.integers(2, 8).map(lambda n: ActionSpace("cnn", ("noop", *(f"blueprint_{i}" for i in range(1, n)))))


@st.composite
def spaces_and_actions(draw: st.DrawFn) -> tuple[ActionSpace, FactoredAction]:
    """A space and one of its factored actions that has a joint index (all but GERMINATE with the noop blueprint)."""
    space = draw(spaces)
    action = draw(st.builds(FactoredAction, slot=st.sampled_from(SlotAction),
                            blueprint=st.integers(0, space.num_blueprints - 1), blend=st.sampled_from(BlendAction),
                            op=st.sampled_from(LifecycleOp)))
    action = draw(st.just(action).filter(lambda a: not (a.is_germinate and a.blueprint == 0)))
    return space, action


seed_infos = st.builds(
    MaskSeedInfo,
    stage=st.sampled_from([int(s) for s in SeedStage]),
    seed_age_epochs=st.integers(0, 30),
    fossilize_ready=st.booleans(),
)
slot_states = st.dictionaries(st.sampled_from(CANONICAL_SLOTS), st.none() | seed_infos, max_size=len(CANONICAL_SLOTS))
embargoes = st.lists(st.sampled_from(CANONICAL_SLOTS), unique=True, max_size=3)


def canonical(space: ActionSpace, action: FactoredAction) -> FactoredAction:
    """Zero the heads the op does not use (the placeholders `from_joint_index` produces)."""
    if action.op == LifecycleOp.WAIT:
        return space.action(0, 0, 0, LifecycleOp.WAIT)
    if action.is_germinate:
        return action
    return space.action(int(action.slot), 0, 0, int(action.op))


@given(spaces_and_actions())
def test_joint_index_round_trip(drawn: tuple[ActionSpace, FactoredAction]) -> None:
    space, action = drawn
    index = space.joint_index(action)
    assert 0 <= index < space.num_joint_actions
    back = space.from_joint_index(index)
    assert back == canonical(space, action)
    assert space.joint_index(back) == index


@given(spaces, st.data())
def test_from_joint_index_round_trip(space: ActionSpace, data: st.DataObject) -> None:
    index = data.draw(st.integers(0, space.num_joint_actions - 1))
    assert space.joint_index(space.from_joint_index(index)) == index


@given(states=slot_states, total=st.integers(0, 5), limit=st.integers(0, 4), embargo=embargoes, space=spaces)
def test_joint_mask_agrees_with_factored_validity(
    states: dict[str, MaskSeedInfo | None], total: int, limit: int, embargo: list[str], space: ActionSpace
) -> None:
    v = compute_action_validity(states, total_seeds=total, max_seeds=limit, space=space, embargoed=embargo)
    mask = v.joint_mask()
    assert len(mask) == space.num_joint_actions
    assert mask[0] is True  # WAIT is always valid
    for i, valid in enumerate(mask):
        action = space.from_joint_index(i)
        assert valid is v.is_valid(action)
        assert v.is_valid_command(action.to_command(space)) is valid
    # Factored rules re-derived from the inputs agree with the joint mask (laid out as WAIT, GERMINATE per slot,
    # blueprint and blend, CULL per slot, FOSSILIZE per slot).
    per_slot = (space.num_blueprints - 1) * NUM_BLENDS
    cull = 1 + NUM_SLOTS * per_slot
    budget_full = limit > 0 and total >= limit
    for s, slot in enumerate(CANONICAL_SLOTS):
        enabled = slot in states
        info = states.get(slot)
        can_germinate = enabled and info is None and slot not in embargo and not budget_full
        live = info is not None and info.stage in (2, 3, 4, 6)
        can_cull = live and info is not None and info.seed_age_epochs >= 1
        can_fossilize = info is not None and info.stage == SeedStage.PROBATIONARY and info.fossilize_ready
        assert all(mask[1 + per_slot * s + k] is can_germinate for k in range(per_slot)), slot
        assert mask[cull + s] is can_cull, slot
        assert mask[cull + NUM_SLOTS + s] is can_fossilize, slot
    assert v.op[LifecycleOp.GERMINATE] is any(mask[1:cull])
    assert v.op[LifecycleOp.CULL] is any(mask[cull:cull + NUM_SLOTS])
    assert v.op[LifecycleOp.FOSSILIZE] is any(mask[cull + NUM_SLOTS:])


@given(drawn=spaces_and_actions(), states=slot_states, total=st.integers(0, 5), limit=st.integers(0, 4))
def test_is_valid_invariant_to_unused_heads(
    drawn: tuple[ActionSpace, FactoredAction], states: dict[str, MaskSeedInfo | None], total: int, limit: int
) -> None:
    space, action = drawn
    v = compute_action_validity(states, total_seeds=total, max_seeds=limit, space=space)
    assert v.is_valid(action) is v.joint_mask()[space.joint_index(action)]


finite = st.floats(allow_nan=False, allow_infinity=False)
telemetry = st.builds(
    SeedTelemetry,
    seed_id=st.text(max_size=5),
    gradient_norm=finite,
    gradient_health=finite,
    has_vanishing=st.booleans(),
    has_exploding=st.booleans(),
    accuracy=finite,
    accuracy_delta=finite,
    epochs_in_stage=st.integers(0, 10**9),
    stage=st.integers(-(10**6), 10**6),
    alpha=finite,
    epoch=st.integers(0, 10**9),
    max_epochs=st.integers(-(10**6), 10**9),
)


@given(telemetry)
def test_seed_telemetry_features_in_range(t: SeedTelemetry) -> None:
    features = t.to_features()
    assert len(features) == SeedTelemetry.feature_dim() == 10
    for i, f in enumerate(features):
        assert math.isfinite(f) and -1.0 <= f <= 1.0, (i, f)


extreme = st.sampled_from([math.inf, -math.inf, 1e308, -1e308, 5e-324, 0.0])


@given(
    gradient_norm=extreme,
    gradient_health=extreme,
    accuracy=extreme,
    accuracy_delta=extreme,
    alpha=extreme,
    big=st.sampled_from([0, 1, 10**18]),
)
def test_seed_telemetry_features_finite_for_extreme_inputs(
    gradient_norm: float, gradient_health: float, accuracy: float, accuracy_delta: float, alpha: float, big: int
) -> None:
    t = SeedTelemetry(
        seed_id="x",
        gradient_norm=gradient_norm,
        gradient_health=gradient_health,
        accuracy=accuracy,
        accuracy_delta=accuracy_delta,
        alpha=alpha,
        epochs_in_stage=big,
        stage=big,
        epoch=big,
        max_epochs=big,
    )
    for i, f in enumerate(t.to_features()):
        assert math.isfinite(f) and -1.0 <= f <= 1.0, (i, f)


@given(
    states=slot_states,
    total=st.integers(0, 5),
    limit=st.integers(0, 4),
    embargo=embargoes,
    space=spaces,
    data=st.data(),
)
def test_a_blueprint_restriction_allows_exactly_the_allowed_subset(
    states: dict[str, MaskSeedInfo | None], total: int, limit: int, embargo: list[str], space: ActionSpace,
    data: st.DataObject
) -> None:
    allowed = data.draw(st.frozensets(st.integers(1, space.num_blueprints - 1)))
    full = compute_action_validity(states, total_seeds=total, max_seeds=limit, embargoed=embargo, space=space)
    restricted = full.restricted_to_blueprints(allowed)
    for index in range(space.num_joint_actions):
        action = space.from_joint_index(index)
        keeps = not action.is_germinate or action.blueprint in allowed
        assert restricted.is_valid(action) == (full.is_valid(action) and keeps)
    germinable = [any(row) for row in restricted.slot_blueprint]
    assert restricted.op_slot[LifecycleOp.GERMINATE] == tuple(
        ok and g for ok, g in zip(full.op_slot[LifecycleOp.GERMINATE], germinable, strict=True))
    assert restricted.op[LifecycleOp.GERMINATE] == any(restricted.op_slot[LifecycleOp.GERMINATE])
    assert restricted.op_slot[LifecycleOp.CULL] == full.op_slot[LifecycleOp.CULL]
