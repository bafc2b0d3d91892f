"""Property tests of the rewards (DESIGN §6.9, §11.3 items 4–5): exact totals, bounds, semantics, PBRS telescoping."""

from __future__ import annotations

import math
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from esper.env.rewards import (
    SUMMED_FIELDS,
    ContributionRewardConfig,
    LifecycleSnapshot,
    LossRewardConfig,
    RewardFamily,
    SlotRewardInfo,
    StepRecord,
    compute_reward,
    lifecycle_potential,
)
from esper.leyline import CANONICAL_SLOTS, LifecycleCommand, LifecycleOp, SeedStage, is_live_stage

OCCUPIED = (SeedStage.GERMINATED, SeedStage.TRAINING, SeedStage.BLENDING, SeedStage.PROBATIONARY, SeedStage.FOSSILIZED)
SNAPSHOT_STAGES = (0, *(int(s) for s in OCCUPIED))
GAMMA = 0.995
LOSS_CFG = LossRewardConfig.for_task("classification", math.log(10), 0.3, 0.05)
CONFIGS: dict[RewardFamily, Any] = {
    RewardFamily.CONTRIBUTION: None,
    RewardFamily.LOSS: LOSS_CFG,
    RewardFamily.SPARSE: None,
}

acc = st.floats(0.0, 100.0)


@st.composite
def slot_infos(draw: st.DrawFn, stages: tuple[SeedStage, ...] = OCCUPIED) -> SlotRewardInfo:
    n = draw(st.integers(0, 12))
    return SlotRewardInfo(
        stage=int(draw(st.sampled_from(stages))),
        epochs_in_stage=n,
        seed_age_epochs=n + draw(st.integers(0, 12)),
        total_improvement=draw(st.floats(-10.0, 10.0)),
        counterfactual=draw(st.none() | st.floats(-8.0, 8.0)),
        acc_at_germination=draw(st.none() | acc),
        fossilize_ready=draw(st.booleans()),
    )


snapshots = st.tuples(
    *[st.tuples(st.just(s), st.sampled_from(SNAPSHOT_STAGES), st.integers(0, 30)) for s in CANONICAL_SLOTS]
)


def _commands(slots: dict[str, SlotRewardInfo | None]) -> list[LifecycleCommand]:
    """Every command the validity rules could allow in this state (plus WAIT)."""
    out = [LifecycleCommand(LifecycleOp.WAIT)]
    for slot, info in slots.items():
        if info is None:
            out.append(LifecycleCommand(LifecycleOp.GERMINATE, slot, "norm", "sigmoid"))
            continue
        if is_live_stage(SeedStage(info.stage)):
            out.append(LifecycleCommand(LifecycleOp.CULL, slot))
        if info.stage == SeedStage.PROBATIONARY:
            out.append(LifecycleCommand(LifecycleOp.FOSSILIZE, slot))
    return out


@st.composite
def step_records(draw: st.DrawFn, *, terminal: bool | None = None) -> StepRecord:
    slots = {s: draw(st.none() | slot_infos()) for s in CANONICAL_SLOTS}
    is_terminal = draw(st.booleans()) if terminal is None else terminal
    return StepRecord(
        epoch=25 if is_terminal else draw(st.integers(1, 24)),
        max_epochs=25,
        slots=slots,
        command=draw(st.sampled_from(_commands(slots))),
        action_success=draw(st.booleans()),
        val_acc=draw(acc),
        val_loss=draw(st.floats(0.0, 20.0) | st.just(math.nan) | st.just(math.inf)),
        acc_delta=draw(st.floats(-10.0, 10.0)),
        loss_delta=draw(st.floats(-10.0, 10.0) | st.just(math.nan) | st.just(-math.inf)),
        seed_param_counts=tuple(draw(st.lists(st.tuples(st.integers(0, 30), st.integers(0, 10**7)), max_size=3))),
        host_param_count=draw(st.integers(1, 10**7)),
        fossilized_contributing=draw(st.integers(0, 3)),
        prev_snapshot=draw(snapshots),
        next_snapshot=draw(snapshots),
        host_max_acc=draw(acc),
        is_terminal=is_terminal,
        rollback=draw(st.booleans()),
    )


def _with(rec: StepRecord, **changes: Any) -> StepRecord:
    fields = {name: getattr(rec, name) for name in StepRecord.__dataclass_fields__}
    fields.update(changes)
    return StepRecord(**fields)


@given(step_records(), st.sampled_from(list(RewardFamily)), st.floats(0.5, 1.0))
def test_total_is_the_exact_sum_and_everything_is_finite_and_bounded(
    rec: StepRecord, family: RewardFamily, gamma: float
) -> None:
    comp = compute_reward(rec, family, CONFIGS[family], gamma)
    parts = [getattr(comp, name) for name in SUMMED_FIELDS]
    assert all(math.isfinite(p) for p in parts)
    expected = 0.0
    for p in parts:
        expected += p
    assert comp.total() == expected
    assert comp.to_dict()["total"] == comp.total()
    bound = 60.0 if rec.rollback else 50.0
    assert abs(comp.total()) <= bound
    assert comp.probation_warning >= -sum(
        1 for i in rec.slots.values() if i is not None and i.stage == SeedStage.PROBATIONARY
    )


@given(step_records(), st.sampled_from(list(RewardFamily)))
def test_terminal_bonus_only_at_the_terminal_step(rec: StepRecord, family: RewardFamily) -> None:
    comp = compute_reward(rec, family, CONFIGS[family], GAMMA)
    if not rec.is_terminal:
        assert comp.terminal == 0.0 and comp.sparse_terminal == 0.0
    if family == RewardFamily.SPARSE and not rec.is_terminal:
        assert comp.total() == comp.governor_penalty


@given(step_records(), st.floats(-8.0, 8.0), st.floats(-8.0, 8.0))
def test_fossilized_seeds_get_no_attribution(rec: StepRecord, c1: float, c2: float) -> None:
    slots = {
        s: i if i is None or i.stage != SeedStage.FOSSILIZED else SlotRewardInfo(**{**_fields(i), "counterfactual": c1})
        for s, i in rec.slots.items()
    }
    flipped = {
        s: i if i is None or i.stage != SeedStage.FOSSILIZED else SlotRewardInfo(**{**_fields(i), "counterfactual": c2})
        for s, i in rec.slots.items()
    }
    a = compute_reward(_with(rec, slots=slots), "contribution", None, GAMMA).attribution
    b = compute_reward(_with(rec, slots=flipped), "contribution", None, GAMMA).attribution
    assert a == b
    only_fossils = {s: None if i is None or i.stage != SeedStage.FOSSILIZED else i for s, i in slots.items()}
    rec_f = _with(rec, slots=only_fossils, command=LifecycleCommand(LifecycleOp.WAIT))
    assert compute_reward(rec_f, "contribution", None, GAMMA).attribution == 0.0


def _fields(info: SlotRewardInfo) -> dict[str, Any]:
    return {name: getattr(info, name) for name in SlotRewardInfo.__dataclass_fields__}


@given(slot_infos(stages=(SeedStage.TRAINING, SeedStage.BLENDING, SeedStage.PROBATIONARY)), acc)
def test_cull_attribution_opposes_wait_attribution(info: SlotRewardInfo, val_acc: float) -> None:
    slots = {"early": None, "mid": info, "late": None}
    snap = (("early", 0, 0), ("mid", info.stage, info.epochs_in_stage), ("late", 0, 0))
    base = _record(slots, LifecycleCommand(LifecycleOp.WAIT), snap, snap, val_acc=val_acc)
    wait = compute_reward(base, "contribution", None, GAMMA).attribution
    cull = compute_reward(_with(base, command=LifecycleCommand(LifecycleOp.CULL, "mid")), "contribution", None, GAMMA)
    assert cull.attribution == -wait


def _record(
    slots: dict[str, SlotRewardInfo | None],
    command: LifecycleCommand,
    prev: LifecycleSnapshot,
    nxt: LifecycleSnapshot,
    **changes: Any,
) -> StepRecord:
    fields: dict[str, Any] = {
        "epoch": 12,
        "max_epochs": 25,
        "slots": slots,
        "command": command,
        "action_success": True,
        "val_acc": 50.0,
        "val_loss": 1.0,
        "acc_delta": 0.0,
        "loss_delta": 0.0,
        "seed_param_counts": (),
        "host_param_count": 10_000,
        "fossilized_contributing": 0,
        "prev_snapshot": prev,
        "next_snapshot": nxt,
        "host_max_acc": 60.0,
        "is_terminal": False,
        "rollback": False,
    }
    fields.update(changes)
    return StepRecord(**fields)


@given(
    st.sampled_from((SeedStage.BLENDING, SeedStage.PROBATIONARY)),
    st.integers(0, 5),
    st.floats(1.0, 10.0),
    st.floats(-2.0, -0.2),
    st.floats(2.0, 98.0),
    st.booleans(),
    st.sampled_from((LifecycleOp.WAIT, LifecycleOp.FOSSILIZE, LifecycleOp.CULL)),
    st.floats(-10.0, 10.0),
    st.integers(0, 10**6),
)
def test_ransomware_is_not_profitable(
    stage: SeedStage,
    n: int,
    c: float,
    ti: float,
    acc0: float,
    ready: bool,
    op: LifecycleOp,
    acc_delta: float,
    seed_params: int,
) -> None:
    """High contribution with a worse host since germination (progress = total improvement < 0) earns ≤ 0.5."""
    if stage == SeedStage.BLENDING and op == LifecycleOp.FOSSILIZE:
        op = LifecycleOp.WAIT
    info = SlotRewardInfo(int(stage), n, n + 8, ti, c, acc0, ready)
    if op == LifecycleOp.FOSSILIZE:
        after: tuple[int, int] = (int(SeedStage.FOSSILIZED), 0)
    elif op == LifecycleOp.CULL:
        after = (0, 0)
    elif stage == SeedStage.BLENDING and n >= 4:
        after = (int(SeedStage.PROBATIONARY), 0)
    else:
        after = (int(stage), n + 1)
    prev = (("early", 0, 0), ("mid", int(stage), n), ("late", 0, 0))
    nxt = (("early", 0, 0), ("mid", *after), ("late", 0, 0))
    command = LifecycleCommand(op) if op == LifecycleOp.WAIT else LifecycleCommand(op, "mid")
    rec = _record(
        {"early": None, "mid": info, "late": None},
        command,
        prev,
        nxt,
        val_acc=acc0 + ti,
        acc_delta=acc_delta,
        seed_param_counts=((n + 8, seed_params),) if op != LifecycleOp.CULL else (),
    )
    comp = compute_reward(rec, "contribution", None, GAMMA)
    assert comp.total() <= 0.5
    assert comp.attribution_discount < 0.5


@given(st.integers(0, 10), st.floats(1.0, 8.0), st.floats(0.0, 10.0))
def test_early_fossilize_earns_less_than_the_undiscounted_maximum(n: int, c: float, ti: float) -> None:
    cfg = ContributionRewardConfig()
    info = SlotRewardInfo(int(SeedStage.PROBATIONARY), n, n + 8, ti, c, 40.0, True)
    snap = (("early", 0, 0), ("mid", int(SeedStage.PROBATIONARY), n), ("late", 0, 0))
    rec = _record(
        {"early": None, "mid": info, "late": None}, LifecycleCommand(LifecycleOp.FOSSILIZE, "mid"), snap, snap
    )
    shaping = compute_reward(rec, "contribution", cfg, GAMMA).action_shaping
    maximum = cfg.fossilize_cost + cfg.fossilize_base_bonus + cfg.fossilize_contribution_scale * c
    if n < 5:
        assert shaping < maximum
    else:
        assert math.isclose(shaping, maximum)


@given(step_records(), st.floats(1e-4, 10.0))
def test_loss_family_rewards_decreases_and_punishes_increases(rec: StepRecord, magnitude: float) -> None:
    better = compute_reward(_with(rec, loss_delta=magnitude), "loss", LOSS_CFG, GAMMA).loss_primary
    worse = compute_reward(_with(rec, loss_delta=-magnitude), "loss", LOSS_CFG, GAMMA).loss_primary
    assert better > 0 > worse
    assert abs(worse) <= abs(better)  # regressions are scaled by 0.5


# --- PBRS telescoping -------------------------------------------------------------------------------------------


def _telescopes(sequence: list[LifecycleSnapshot], gamma: float) -> None:
    shaped = sum(
        gamma ** (e - 1) * (gamma * lifecycle_potential(sequence[e]) - lifecycle_potential(sequence[e - 1]))
        for e in range(1, len(sequence))
    )
    horizon = len(sequence) - 1
    closed = gamma**horizon * lifecycle_potential(sequence[-1]) - lifecycle_potential(sequence[0])
    assert math.isclose(shaped, closed, rel_tol=1e-6, abs_tol=1e-9)


@given(st.lists(snapshots, min_size=1, max_size=40), st.floats(0.5, 1.0))
def test_pbrs_telescopes_over_random_stage_sequences(sequence: list[LifecycleSnapshot], gamma: float) -> None:
    s0: LifecycleSnapshot = tuple((s, 0, 0) for s in CANONICAL_SLOTS)
    _telescopes([s0, *sequence], gamma)


def _timeline_snapshots(fossilize_at: int | None) -> list[LifecycleSnapshot]:
    """Post-step lifecycles of the §3.11 episode: germinate `mid` at 5, train 3, blend 5, probation ≤ 5."""
    stages: list[tuple[int, int]] = [(0, 0)]
    for epoch in range(1, 26):
        stage, n = stages[-1]
        if epoch == 5:
            stages.append((int(SeedStage.TRAINING), 0))
        elif stage == SeedStage.TRAINING:
            stages.append((int(SeedStage.BLENDING), 0) if n + 1 >= 3 else (stage, n + 1))
        elif stage == SeedStage.BLENDING:
            stages.append((int(SeedStage.PROBATIONARY), 0) if n + 1 >= 5 else (stage, n + 1))
        elif stage == SeedStage.PROBATIONARY:
            if epoch == fossilize_at:
                stages.append((int(SeedStage.FOSSILIZED), 0))
            else:
                stages.append((0, 0) if n + 1 >= 5 else (stage, n + 1))
        elif stage == SeedStage.FOSSILIZED:
            stages.append((stage, n + 1))
        else:
            stages.append((0, 0))
    return [(("early", 0, 0), ("mid", stage, n), ("late", 0, 0)) for stage, n in stages]


@given(st.sampled_from([None, 14, 16, 18]), st.floats(0.9, 1.0), st.sampled_from(list(RewardFamily)))
def test_pbrs_component_telescopes_on_a_recorded_episode(
    fossilize_at: int | None, gamma: float, family: RewardFamily
) -> None:
    """The logged `pbrs` component of every step sums (discounted) to the closed form: nothing is lost in records."""
    sequence = _timeline_snapshots(fossilize_at)
    empty: dict[str, SlotRewardInfo | None] = {s: None for s in CANONICAL_SLOTS}
    weight = {RewardFamily.CONTRIBUTION: 0.3, RewardFamily.LOSS: 0.1, RewardFamily.SPARSE: 0.0}[family]
    total = 0.0
    for e in range(1, 26):
        rec = _record(empty, LifecycleCommand(LifecycleOp.WAIT), sequence[e - 1], sequence[e], epoch=e, max_epochs=25)
        comp = compute_reward(rec, family, CONFIGS[family], gamma)
        assert comp.phi_prev == lifecycle_potential(sequence[e - 1])
        total += gamma ** (e - 1) * comp.pbrs
    closed = weight * (gamma**25 * lifecycle_potential(sequence[-1]) - lifecycle_potential(sequence[0]))
    assert math.isclose(total, closed, rel_tol=1e-6, abs_tol=1e-9)
    _telescopes(sequence, gamma)
