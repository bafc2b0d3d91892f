"""Reward formulas of DESIGN §6.9: spot values per component and family, dispatch and record validation."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

import pytest

from esper.env.rewards import (
    INTERVENTION_COSTS,
    SUMMED_FIELDS,
    ContributionRewardConfig,
    LossRewardConfig,
    RewardFamily,
    ShapedRewardComponents,
    SlotRewardInfo,
    SparseRewardConfig,
    StepRecord,
    compute_contribution_reward,
    compute_loss_reward,
    compute_reward,
    compute_sparse_reward,
    lifecycle_potential,
    pbrs_shaping,
    slot_potential,
)
from esper.leyline import FactoredAction, LifecycleCommand, LifecycleOp, SeedStage

P, B, T, F = SeedStage.PROBATIONARY, SeedStage.BLENDING, SeedStage.TRAINING, SeedStage.FOSSILIZED
WAIT = LifecycleCommand(LifecycleOp.WAIT)
CFG = ContributionRewardConfig()
LOSS_CFG = LossRewardConfig.for_task("classification", math.log(10), 0.3, 0.05)


def seed(
    stage: SeedStage,
    n: int = 0,
    *,
    ti: float = 0.0,
    c: float | None = None,
    acc0: float | None = 40.0,
    ready: bool = False,
) -> SlotRewardInfo:
    return SlotRewardInfo(
        stage=int(stage),
        epochs_in_stage=n,
        seed_age_epochs=n + 5,
        total_improvement=ti,
        counterfactual=c,
        acc_at_germination=acc0,
        fossilize_ready=ready,
    )


def record(
    slots: Mapping[str, SlotRewardInfo | None] | None = None,
    command: LifecycleCommand = WAIT,
    **overrides: Any,
) -> StepRecord:
    """A mid-episode step whose lifecycle snapshots are unchanged (so with gamma 1 PBRS is exactly 0)."""
    slots = {"early": None, "mid": None, "late": None} if slots is None else slots
    snapshot = tuple((s, 0, 0) if i is None else (s, i.stage, i.epochs_in_stage) for s, i in slots.items())
    fields: dict[str, Any] = {
        "epoch": 10,
        "max_epochs": 25,
        "slots": slots,
        "command": command,
        "action_success": True,
        "val_acc": 50.0,
        "val_loss": 1.0,
        "acc_delta": 0.0,
        "loss_delta": 0.0,
        "seed_param_counts": (),
        "host_param_count": 1000,
        "fossilized_contributing": 0,
        "prev_snapshot": snapshot,
        "next_snapshot": snapshot,
        "host_max_acc": 50.0,
        "is_terminal": False,
        "rollback": False,
    }
    fields.update(overrides)
    return StepRecord(**fields)


def one(info: SlotRewardInfo | None) -> dict[str, SlotRewardInfo | None]:
    return {"early": None, "mid": info, "late": None}


def contribution(rec: StepRecord, gamma: float = 1.0) -> ShapedRewardComponents:
    return compute_contribution_reward(rec, CFG, gamma)


def cmd(op: LifecycleOp, slot: str = "mid") -> LifecycleCommand:
    return LifecycleCommand(op, slot)


# --- potentials -------------------------------------------------------------------------------------------------


def test_slot_potentials() -> None:
    assert slot_potential(0, 0) == 0.0
    assert slot_potential(SeedStage.GERMINATED, 0) == 1.0
    assert slot_potential(T, 2) == pytest.approx(2.6)
    assert slot_potential(B, 20) == pytest.approx(5.5)  # epoch bonus capped at 2.0
    assert slot_potential(P, 1) == pytest.approx(5.8)
    assert slot_potential(F, 0) == 6.0
    with pytest.raises(ValueError, match="failure"):
        slot_potential(SeedStage.CULLED, 0)
    with pytest.raises(ValueError):
        slot_potential(T, -1)


def test_lifecycle_potential_and_shaping() -> None:
    s0 = (("early", 0, 0), ("mid", 0, 0))
    s1 = (("early", int(T), 1), ("mid", int(F), 3))
    assert lifecycle_potential(s0) == 0.0
    assert lifecycle_potential(s1) == pytest.approx(2.3 + 6.9)
    assert pbrs_shaping(s0, s1, 0.9, 0.3) == pytest.approx(0.3 * 0.9 * 9.2)
    with pytest.raises(ValueError, match="different slots"):
        pbrs_shaping(s0, (("early", 0, 0),), 0.9, 0.3)
    with pytest.raises(ValueError, match="gamma"):
        pbrs_shaping(s0, s0, 0.0, 0.3)
    with pytest.raises(ValueError):
        lifecycle_potential((("early", 0, 0), ("early", 0, 0)))


# --- contribution family ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("n", "expected"), [(0, 0.0), (1, 0.0), (2, -0.1), (3, -0.3), (4, -0.9), (5, -1.0), (1000, -1.0)]
)
def test_probation_warning_sequence(n: int, expected: float) -> None:
    comp = contribution(record(one(seed(P, n, ti=2.0, c=1.5, ready=True))))
    assert comp.probation_warning == pytest.approx(expected)


def test_probation_warning_exemptions() -> None:
    waiting = seed(P, 4, ti=2.0, c=1.5, ready=True)
    assert contribution(record(one(seed(P, 4, ti=2.0, c=1.5, ready=False)))).probation_warning == 0.0
    assert contribution(record(one(waiting), cmd(LifecycleOp.FOSSILIZE))).probation_warning == 0.0
    assert contribution(record(one(waiting), cmd(LifecycleOp.CULL))).probation_warning == 0.0
    both = {"early": waiting, "mid": None, "late": waiting}
    assert contribution(record(both, cmd(LifecycleOp.FOSSILIZE, "late"))).probation_warning == pytest.approx(-0.9)


@pytest.mark.parametrize(
    ("info", "expected"),
    [
        (seed(P, 5, ti=2.0, c=3.0, ready=True), -0.01 + 0.8),  # mature, contributing
        (seed(P, 2, ti=2.0, c=3.0, ready=True), -0.01 + 0.8 * 0.4),  # early fossilize earns less
        (seed(P, 5, ti=2.0, c=0.5, ready=True), -0.01 - 0.2),  # non-contributing
        (seed(P, 5, ti=1.0, c=None, ready=True), -0.01 - 0.2),
        (seed(P, 5, ti=-1.0, c=0.05, ready=True), -0.01 - 0.5 - 0.2),  # regressed
        (seed(P, 5, ti=-3.0, c=2.0, ready=True), -0.01 - 0.5 - 0.6 - 0.3),  # ransomware
        (seed(P, 5, ti=-10.0, c=2.0, ready=True), -0.01 - 0.5 - 1.0 - 0.3),  # regression term capped
        (seed(P, 5, ti=-0.1, c=2.0, ready=True), -0.01 - 0.5 - 0.02),  # ti not below -0.2: no ransomware term
    ],
)
def test_fossilize_shaping(info: SlotRewardInfo, expected: float) -> None:
    assert contribution(record(one(info), cmd(LifecycleOp.FOSSILIZE))).action_shaping == pytest.approx(expected)


@pytest.mark.parametrize(
    ("c", "expected"),
    [(None, -0.005), (-1.0, -0.005 + 0.3), (-0.5, -0.005 + 0.1), (-0.2, -0.005 + 0.1), (0.0, -0.305), (2.0, -0.405)],
)
def test_cull_shaping(c: float | None, expected: float) -> None:
    comp = contribution(record(one(seed(P, 2, ti=1.0, c=c)), cmd(LifecycleOp.CULL)))
    assert comp.action_shaping == pytest.approx(expected)


def test_cull_shaping_signs() -> None:
    hurting = contribution(record(one(seed(B, 2, ti=-1.0, c=-2.0)), cmd(LifecycleOp.CULL)))
    helping = contribution(record(one(seed(B, 2, ti=3.0, c=2.0)), cmd(LifecycleOp.CULL)))
    assert hurting.action_shaping > 0 and hurting.attribution > 0
    assert helping.action_shaping < 0 and helping.attribution < 0


def test_simple_action_costs() -> None:
    assert contribution(record()).action_shaping == 0.0
    germ = LifecycleCommand(LifecycleOp.GERMINATE, "mid", "conv_light", "linear")
    assert contribution(record(command=germ)).action_shaping == pytest.approx(-0.02)


@pytest.mark.parametrize(
    ("c", "ti", "penalty"),
    [
        (8.0, 1.0, -0.06),  # c/ti = 8 > 5
        (30.0, 1.0, -0.3),  # capped
        (4.0, 1.0, 0.0),  # c/ti = 4
        (4.0, 0.05, -0.12),  # ti <= 0.1
        (12.0, 0.0, -0.3),  # ti <= 0.1, capped at c/10 = 1
        (0.9, 0.0, 0.0),  # c <= 1
        (5.0, -0.5, 0.0),  # discount < 0.5
    ],
)
def test_ratio_penalty_branches(c: float, ti: float, penalty: float) -> None:
    comp = contribution(record(one(seed(B, 2, ti=ti, c=c, acc0=0.0)), val_acc=100.0))
    assert comp.ratio_penalty == pytest.approx(penalty)
    discount = 1.0 if ti >= 0 else 1 / (1 + math.exp(-10 * ti))
    assert comp.attribution_discount == pytest.approx(discount)
    assert comp.attribution == pytest.approx(c * discount + penalty)  # progress 100 ≥ c: bounded = c


@pytest.mark.parametrize(
    ("c", "progress", "bounded"),
    [(2.0, 10.0, 2.0), (4.0, 1.0, 2.0), (4.0, 0.0, 0.0), (4.0, -3.0, 0.0), (-2.0, -3.0, -2.0)],
)
def test_bounded_contribution(c: float, progress: float, bounded: float) -> None:
    comp = contribution(record(one(seed(B, 2, ti=1.0, c=c, acc0=40.0)), val_acc=40.0 + progress))
    assert comp.ratio_penalty == 0.0
    assert comp.attribution == pytest.approx(bounded)


def test_negative_contribution_is_paid_undiscounted_and_unknown_baseline_earns_nothing() -> None:
    assert contribution(record(one(seed(B, 2, ti=-1.0, c=-2.0)))).attribution == pytest.approx(-2.0)
    assert contribution(record(one(seed(B, 2, ti=1.0, c=0.5, acc0=None)))).attribution == 0.0


def test_discounted_attribution() -> None:
    comp = contribution(record(one(seed(B, 2, ti=-0.1, c=0.5, acc0=40.0)), val_acc=45.0))
    assert comp.attribution == pytest.approx(0.5 / (1 + math.e))


def test_action_overrides_on_target_slot() -> None:
    info = seed(P, 3, ti=-1.0, c=0.5, ready=True)
    wait = contribution(record(one(info), val_acc=60.0))
    assert wait.attribution != 0.0
    assert contribution(record(one(info), cmd(LifecycleOp.FOSSILIZE), val_acc=60.0)).attribution == 0.0
    assert contribution(record(one(info), cmd(LifecycleOp.CULL), val_acc=60.0)).attribution == -wait.attribution
    # Overrides touch only the target slot.
    other = {"early": seed(B, 1, ti=1.0, c=2.0), "mid": info, "late": None}
    base = contribution(record(other, val_acc=60.0)).attribution
    culled = contribution(record(other, cmd(LifecycleOp.CULL), val_acc=60.0)).attribution
    assert culled == pytest.approx(base - 2 * wait.attribution)


def test_fossilized_seeds_get_no_attribution() -> None:
    assert contribution(record(one(seed(F, 3, ti=5.0, c=5.0)), val_acc=90.0)).attribution == 0.0


def test_proxy() -> None:
    unmeasured = one(seed(T, 1, ti=1.0, c=None))
    assert contribution(record(unmeasured, acc_delta=2.0)).proxy == pytest.approx(0.6)
    assert contribution(record(unmeasured, acc_delta=-1.0)).proxy == 0.0
    assert contribution(record(one(seed(B, 1, ti=1.0, c=1.0)), acc_delta=2.0)).proxy == 0.0
    assert contribution(record(one(seed(F, 1, ti=1.0, c=None)), acc_delta=2.0)).proxy == 0.0
    twice = {"early": seed(T, 1), "mid": seed(T, 2), "late": None}
    assert contribution(record(twice, acc_delta=2.0)).proxy == pytest.approx(0.6)  # once, not per seed


@pytest.mark.parametrize(("ti", "n", "expected"), [(-1.0, 2, -0.2), (-1.0, 10, -0.4), (0.0, 3, 0.0)])
def test_blending_warning(ti: float, n: int, expected: float) -> None:
    assert contribution(record(one(seed(B, n, ti=ti, c=0.5)))).blending_warning == pytest.approx(expected)


@pytest.mark.parametrize(("seed_params", "expected"), [(0, 0.0), (1000, -0.5 * math.log(2)), (10**12, -8.0)])
def test_rent(seed_params: int, expected: float) -> None:
    comp = contribution(record(seed_param_counts=((4, seed_params),)))
    assert comp.rent == pytest.approx(expected)
    assert comp.growth_ratio == seed_params / 1000


def test_terminal_and_governor() -> None:
    assert contribution(record(val_acc=80.0, fossilized_contributing=2)).terminal == 0.0
    final = contribution(record(val_acc=80.0, fossilized_contributing=2, epoch=25, is_terminal=True))
    assert final.terminal == pytest.approx(0.05 * 80 + 3.0 * 2)
    assert contribution(record(rollback=True)).governor_penalty == -10.0
    assert contribution(record()).governor_penalty == 0.0


def test_pbrs_in_contribution_family() -> None:
    slots = one(seed(T, 3, ti=1.0))
    prev = (("early", 0, 0), ("mid", int(T), 2), ("late", 0, 0))
    comp = contribution(record(slots, prev_snapshot=prev), gamma=0.99)
    assert comp.phi_prev == pytest.approx(2.6) and comp.phi_next == pytest.approx(2.9)
    assert comp.pbrs == pytest.approx(0.3 * (0.99 * 2.9 - 2.6))


def test_wait_reward_ignores_the_slot_head() -> None:
    slots = {"early": seed(B, 2, ti=-0.5, c=1.5), "mid": seed(P, 3, ti=1.0, c=2.0, ready=True), "late": None}
    totals = {
        compute_reward(
            record(slots, FactoredAction.from_indices(s, b, blend, LifecycleOp.WAIT).to_command()),
            RewardFamily.CONTRIBUTION,
            None,
            0.99,
        ).total()
        for s in range(3)
        for b in range(5)
        for blend in range(3)
    }
    assert len(totals) == 1


# --- loss and sparse families -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("loss_delta", "expected"),
    [(0.0, 0.0), (0.1, 10.0), (-0.1, -5.0), (1.0, 25.0), (-1.0, -12.5), (math.nan, -12.5), (-math.inf, -12.5)],
)
def test_loss_primary(loss_delta: float, expected: float) -> None:
    assert compute_loss_reward(record(loss_delta=loss_delta), LOSS_CFG, 1.0).loss_primary == pytest.approx(expected)


@pytest.mark.parametrize(
    ("val_loss", "expected"), [(0.3, 1.0), (0.1, 1.0), ((math.log(10) + 0.3) / 2, 0.5), (5.0, 0.0), (math.nan, 0.0)]
)
def test_loss_terminal(val_loss: float, expected: float) -> None:
    final = compute_loss_reward(record(val_loss=val_loss, epoch=25, is_terminal=True), LOSS_CFG, 1.0)
    assert final.terminal == pytest.approx(expected)
    assert compute_loss_reward(record(val_loss=val_loss), LOSS_CFG, 1.0).terminal == 0.0


def test_loss_family_rent_grace_costs_and_pbrs() -> None:
    rec = record(
        one(seed(T, 3)),
        cmd(LifecycleOp.CULL),
        seed_param_counts=((2, 5000), (3, 1000)),
        prev_snapshot=(("early", 0, 0), ("mid", int(T), 2), ("late", 0, 0)),
    )
    comp = compute_loss_reward(rec, LOSS_CFG, 0.99)
    assert comp.rent == pytest.approx(-0.05 * math.log(2))  # the 2-epoch-old seed is in its grace period
    assert comp.action_shaping == INTERVENTION_COSTS[LifecycleOp.CULL] == -0.005
    assert comp.pbrs == pytest.approx(0.1 * (0.99 * 2.9 - 2.6))
    assert comp.attribution == comp.proxy == comp.probation_warning == 0.0
    steep = LossRewardConfig(typical_loss_delta_std=0.05, compute_rent_weight=1.0, baseline_loss=2.3, target_loss=0.3)
    capped = compute_loss_reward(record(seed_param_counts=((9, 10**9),)), steep, 1.0)
    assert capped.rent == -5.0


def test_loss_config_for_task_and_validation() -> None:
    lm = LossRewardConfig.for_task("lm", math.log(257), 1.2, 0.15)
    assert (lm.compute_rent_weight, lm.baseline_loss, lm.target_loss, lm.typical_loss_delta_std) == (
        0.01,
        math.log(257),
        1.2,
        0.15,
    )
    assert LOSS_CFG.compute_rent_weight == 0.05
    with pytest.raises(ValueError, match="task_type"):
        LossRewardConfig.for_task("regression", 1.0, 0.1, 0.1)
    with pytest.raises(ValueError):
        LossRewardConfig.for_task("lm", 1.0, 2.0, 0.1)
    with pytest.raises(ValueError):
        LossRewardConfig.for_task("lm", 3.0, 2.0, 0.0)


def test_sparse_spot_value() -> None:
    final = record(host_max_acc=80.0, seed_param_counts=((6, 60_000), (2, 40_000)), epoch=25, is_terminal=True)
    comp = compute_sparse_reward(final, SparseRewardConfig(), 0.99)
    assert comp.sparse_terminal == pytest.approx(0.78)
    assert comp.total() == pytest.approx(0.78)
    assert comp.pbrs == 0.0


def test_sparse_is_zero_before_the_end_and_clamped() -> None:
    cfg = SparseRewardConfig()
    assert compute_sparse_reward(record(host_max_acc=80.0), cfg, 0.99).total() == 0.0
    assert compute_sparse_reward(record(rollback=True), cfg, 0.99).total() == -10.0
    huge = record(seed_param_counts=((6, 10**8),), is_terminal=True, epoch=25)
    assert compute_sparse_reward(huge, cfg, 0.99).sparse_terminal == -1.0
    scaled = record(host_max_acc=100.0, is_terminal=True, epoch=25)
    assert compute_sparse_reward(scaled, SparseRewardConfig(sparse_reward_scale=3.0), 1.0).sparse_terminal == 1.0


# --- dispatch, components, record validation --------------------------------------------------------------------


def test_compute_reward_dispatch() -> None:
    rec = record(host_max_acc=80.0, is_terminal=True, epoch=25)
    assert compute_reward(rec, "contribution", None, 0.99).family == "contribution"
    assert compute_reward(rec, RewardFamily.SPARSE, None, 0.99).sparse_terminal == pytest.approx(0.8)
    assert compute_reward(rec, "loss", LOSS_CFG, 0.99).family == "loss"
    with pytest.raises(ValueError, match="LossRewardConfig"):
        compute_reward(rec, "loss", None, 0.99)
    with pytest.raises(TypeError):
        compute_reward(rec, "sparse", CFG, 0.99)
    with pytest.raises(ValueError):
        compute_reward(rec, "dense", None, 0.99)


def test_components_total_and_json() -> None:
    slots = {"early": seed(B, 2, ti=-0.5, c=1.5), "mid": seed(P, 4, ti=1.0, c=2.0, ready=True), "late": seed(T, 1)}
    comp = compute_reward(
        record(slots, acc_delta=1.0, rollback=True, is_terminal=True, epoch=25, seed_param_counts=((5, 300),)),
        "contribution",
        None,
        0.99,
    )
    assert comp.total() == sum(getattr(comp, name) for name in SUMMED_FIELDS)
    data = json.loads(json.dumps(comp.to_dict(), allow_nan=False))
    assert data["total"] == comp.total()
    assert data["family"] == "contribution" and data["action_name"] == "WAIT"
    assert set(SUMMED_FIELDS) < set(data)


def test_step_record_validation() -> None:
    with pytest.raises(ValueError, match="prev_snapshot"):
        record(prev_snapshot=(("early", 0, 0),))
    with pytest.raises(ValueError, match="occupied"):
        record(command=cmd(LifecycleOp.CULL))
    with pytest.raises(ValueError, match="occupied"):
        record(one(seed(T, 1)), LifecycleCommand(LifecycleOp.GERMINATE, "mid", "norm", "linear"))
    with pytest.raises(ValueError, match="not enabled"):
        record({"early": None}, cmd(LifecycleOp.CULL, "late"))
    with pytest.raises(ValueError, match="epoch"):
        record(epoch=26)
    with pytest.raises(ValueError, match="non-finite"):
        record(val_acc=math.nan)
    with pytest.raises(ValueError, match="host_param_count"):
        record(host_param_count=0)
    with pytest.raises(ValueError, match="non-finite"):
        seed(T, 1, c=math.inf)
