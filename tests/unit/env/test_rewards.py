"""Reward formulas: spot values per component and family, dispatch, and the validation of records.

A record pairs the measurement a decision saw (`before`, epoch e) with the one that followed it (`after`, epoch
e + 1). Action shaping and the probation warning judge the decision by what it saw (`before`); attribution, the
blending warning, rent and the terminal bonus are outcomes (`after`); the gap family compares the two.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Mapping
from typing import Any

import pytest

from esper.data.tasks import get_task_spec
from esper.env.charges import CALIBRATIONS
from esper.env.potential import lifecycle_potential, pbrs_shaping, slot_potential
from esper.env.rewards import (
    INTERVENTION_COSTS,
    NOT_CHARGED,
    SUMMED_FIELDS,
    ContributionRewardConfig,
    GapRewardConfig,
    LossRewardConfig,
    RewardFamily,
    ShapedRewardComponents,
    SparseRewardConfig,
    StepRecord,
    compute_contribution_reward,
    compute_gap_reward,
    compute_loss_reward,
    compute_reward,
    compute_sparse_reward,
    make_reward_fn,
    needs_twin,
    resolved_cost,
    reward_config,
    reward_summary,
)
from esper.env.step_record import Measurement, SlotRewardInfo
from esper.leyline import (
    UNRECORDED_HEADS,
    ActionSpace,
    BlendAction,
    FactoredAction,
    LifecycleCommand,
    LifecycleOp,
    SeedStage,
    SlotAction,
)

P, B, T, F = SeedStage.PROBATIONARY, SeedStage.BLENDING, SeedStage.TRAINING, SeedStage.FOSSILIZED
SLOTS = ("early", "mid", "late")
MAX_EPOCHS = 25
LAST = MAX_EPOCHS - 1  # the terminal decision
WAIT = LifecycleCommand(LifecycleOp.WAIT)
GERMINATE_MID = LifecycleCommand(LifecycleOp.GERMINATE, "mid", "conv_light", "linear")
CFG = ContributionRewardConfig()
LOSS_CFG = LossRewardConfig.for_task("classification", math.log(10), 0.3, 0.05)
GAP_CFG = GapRewardConfig(cost=2.0)

Slots = Mapping[str, SlotRewardInfo | None]


def seed(stage: SeedStage, n: int = 0, *, ti: float = 0.0, c: float | None = None, acc0: float | None = 40.0,
         ready: bool = False) -> SlotRewardInfo:
    return SlotRewardInfo(stage=int(stage), epochs_in_stage=n, seed_age_epochs=n + 5, total_improvement=ti,
                          counterfactual=c, acc_at_germination=acc0, fossilize_ready=ready)


def one(info: SlotRewardInfo | None) -> dict[str, SlotRewardInfo | None]:
    """Only `mid` may be occupied."""
    return {"early": None, "mid": info, "late": None}


EMPTY = one(None)


def measurement(epoch: int, slots: Slots | None = None, **fields: Any) -> Measurement:
    """A measurement whose lifecycle snapshot agrees with its slots (override `snapshot` to break that)."""
    slots = EMPTY if slots is None else slots
    values: dict[str, Any] = {
        "val_accuracy": 50.0, "val_loss": 1.0, "acc_delta": 0.0, "loss_delta": 0.0, "seed_param_counts": (),
        "host_param_count": 1000, "fossilized_contributing": 0, "best_val_accuracy": 50.0, "twin_val_accuracy": 50.0,
        "twin_val_loss": 1.0,
        "snapshot": tuple((s, 0, 0) if i is None else (s, int(i.stage), i.epochs_in_stage) for s, i in slots.items()),
    }
    values.update(fields)
    return Measurement(epoch=epoch, slots=dict(slots), **values)


def record(slots: Slots | None = None, command: LifecycleCommand = WAIT, *, after_slots: Slots | None = None,
           epoch: int = 10, rollback: bool = False, before: Mapping[str, Any] | None = None,
           **after: Any) -> StepRecord:
    """The decision after `epoch`: it saw `slots`; `after_slots` (default: the same) and `after` fields followed.

    With unchanged slots and gamma 1, a mid-episode record has exactly zero potential-based shaping.
    """
    slots = EMPTY if slots is None else slots
    return StepRecord(
        epoch=epoch, max_epochs=MAX_EPOCHS, command=command, action_success=True,
        before=measurement(epoch, slots, **(before or {})),
        after=measurement(epoch + 1, slots if after_slots is None else after_slots, **after),
        rollback=rollback,
    )


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


def test_terminal_potential_is_zero() -> None:
    s1 = (("early", int(T), 1), ("mid", int(F), 3))
    assert pbrs_shaping(s1, s1, 0.9, 0.3, terminal=True) == pytest.approx(-0.3 * 9.2)
    assert pbrs_shaping((("early", 0, 0), ("mid", 0, 0)), s1, 0.9, 0.3, terminal=True) == 0.0


# --- contribution family: action shaping and the probation warning read `before` ---------------------------------


@pytest.mark.parametrize(
    ("n", "expected"), [(0, 0.0), (1, 0.0), (2, -0.1), (3, -0.3), (4, -0.9), (5, -1.0), (1000, -1.0)]
)
def test_probation_warning_sequence(n: int, expected: float) -> None:
    comp = contribution(record(one(seed(P, n, ti=2.0, c=1.5, ready=True))))
    assert comp.probation_warning == pytest.approx(expected)


def test_probation_warning_judges_the_state_the_decision_saw() -> None:
    ready, not_ready = seed(P, 4, ti=2.0, c=1.5, ready=True), seed(P, 4, ti=2.0, c=1.5, ready=False)
    assert contribution(record(one(ready), after_slots=one(not_ready))).probation_warning == pytest.approx(-0.9)
    assert contribution(record(one(not_ready), after_slots=one(ready))).probation_warning == 0.0


def test_probation_warning_exemptions() -> None:
    waiting = seed(P, 4, ti=2.0, c=1.5, ready=True)
    assert contribution(record(one(waiting), cmd(LifecycleOp.FOSSILIZE))).probation_warning == 0.0
    assert contribution(record(one(waiting), cmd(LifecycleOp.CULL), after_slots=EMPTY)).probation_warning == 0.0
    both = {"early": waiting, "mid": None, "late": waiting}
    assert contribution(record(both, cmd(LifecycleOp.FOSSILIZE, "late"))).probation_warning == pytest.approx(-0.9)


def _fossilized(info: SlotRewardInfo) -> dict[str, SlotRewardInfo | None]:
    return one(dataclasses.replace(info, stage=int(F), epochs_in_stage=1, seed_age_epochs=info.seed_age_epochs + 1))


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
    rec = record(one(info), cmd(LifecycleOp.FOSSILIZE), after_slots=_fossilized(info))
    assert contribution(rec).action_shaping == pytest.approx(expected)


def test_fossilize_shaping_judges_the_seed_the_decision_saw() -> None:
    """What the fossilized seed measures afterwards does not change how the decision is judged."""
    info = seed(P, 5, ti=2.0, c=3.0, ready=True)
    regressed = one(seed(F, 1, ti=-5.0, c=-4.0))
    assert contribution(record(one(info), cmd(LifecycleOp.FOSSILIZE), after_slots=regressed)).action_shaping == (
        pytest.approx(-0.01 + 0.8))


@pytest.mark.parametrize(
    ("c", "expected"),
    [(None, -0.005), (-1.0, -0.005 + 0.3), (-0.5, -0.005 + 0.1), (-0.2, -0.005 + 0.1), (0.0, -0.305), (2.0, -0.405)],
)
def test_cull_shaping(c: float | None, expected: float) -> None:
    comp = contribution(record(one(seed(P, 2, ti=1.0, c=c)), cmd(LifecycleOp.CULL), after_slots=EMPTY))
    assert comp.action_shaping == pytest.approx(expected)


def test_cull_shaping_signs_and_no_attribution_for_the_culled_seed() -> None:
    hurting = contribution(record(one(seed(B, 2, ti=-1.0, c=-2.0)), cmd(LifecycleOp.CULL), after_slots=EMPTY))
    helping = contribution(record(one(seed(B, 2, ti=3.0, c=2.0)), cmd(LifecycleOp.CULL), after_slots=EMPTY))
    assert hurting.action_shaping > 0 > helping.action_shaping
    assert hurting.attribution == helping.attribution == 0.0  # the seed is gone from the measured epoch


def test_simple_action_costs() -> None:
    assert contribution(record()).action_shaping == 0.0
    assert contribution(record(command=GERMINATE_MID, after_slots=one(seed(T, 1)))).action_shaping == (
        pytest.approx(-0.02))


def test_wait_reward_ignores_the_slot_head() -> None:
    slots = {"early": seed(B, 2, ti=-0.5, c=1.5), "mid": seed(P, 3, ti=1.0, c=2.0, ready=True), "late": None}
    totals = {
        contribution(record(slots, FactoredAction(SlotAction(s), b, BlendAction(blend), LifecycleOp.WAIT)
                            .to_command(ActionSpace("cnn", UNRECORDED_HEADS["cnn"]))),
                     gamma=0.99).total()
        for s in range(3)
        for b in range(5)
        for blend in range(3)
    }
    assert len(totals) == 1


# --- contribution family: attribution, warnings, rent, terminal read `after` -------------------------------------


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
    comp = contribution(record(one(seed(B, 2, ti=ti, c=c, acc0=0.0)), val_accuracy=100.0))
    assert comp.ratio_penalty == pytest.approx(penalty)
    discount = 1.0 if ti >= 0 else 1 / (1 + math.exp(-10 * ti))
    assert comp.attribution_discount == pytest.approx(discount)
    assert comp.attribution == pytest.approx(c * discount + penalty)  # progress 100 ≥ c: bounded = c


@pytest.mark.parametrize(
    ("c", "progress", "bounded"),
    [(2.0, 10.0, 2.0), (4.0, 1.0, 2.0), (4.0, 0.0, 0.0), (4.0, -3.0, 0.0), (-2.0, -3.0, -2.0)],
)
def test_bounded_contribution(c: float, progress: float, bounded: float) -> None:
    comp = contribution(record(one(seed(B, 2, ti=1.0, c=c, acc0=40.0)), val_accuracy=40.0 + progress))
    assert comp.ratio_penalty == 0.0
    assert comp.attribution == pytest.approx(bounded)


def test_negative_contribution_is_paid_undiscounted_and_unknown_baseline_earns_nothing() -> None:
    assert contribution(record(one(seed(B, 2, ti=-1.0, c=-2.0)))).attribution == pytest.approx(-2.0)
    assert contribution(record(one(seed(B, 2, ti=1.0, c=0.5, acc0=None)))).attribution == 0.0


def test_discounted_attribution() -> None:
    comp = contribution(record(one(seed(B, 2, ti=-0.1, c=0.5, acc0=40.0)), val_accuracy=45.0))
    assert comp.attribution == pytest.approx(0.5 / (1 + math.e))


def test_attribution_pays_the_measured_outcome_not_what_the_decision_saw() -> None:
    comp = contribution(record(one(seed(B, 2, ti=1.0, c=5.0)), after_slots=one(seed(B, 3, ti=1.0, c=-1.0)),
                               val_accuracy=60.0, before={"val_accuracy": 90.0}))
    assert comp.attribution == pytest.approx(-1.0)
    # progress is measured at the outcome's accuracy: 45 - 40 = 5 ≥ c
    assert contribution(record(one(seed(B, 2, ti=1.0, c=3.0)), val_accuracy=45.0, before={"val_accuracy": 40.0})
                        ).attribution == pytest.approx(3.0)


def test_a_culled_or_fossilized_seed_has_no_attribution_and_other_seeds_keep_theirs() -> None:
    mid = seed(P, 3, ti=1.0, c=0.5, ready=True)
    early = seed(B, 1, ti=1.0, c=2.0)
    base = contribution(record({"early": early, "mid": mid, "late": None}, val_accuracy=60.0))
    assert base.attribution == pytest.approx(2.5)
    culled = contribution(record({"early": early, "mid": mid, "late": None}, cmd(LifecycleOp.CULL),
                                 after_slots={"early": early, "mid": None, "late": None}, val_accuracy=60.0))
    fossilized = contribution(record({"early": early, "mid": mid, "late": None}, cmd(LifecycleOp.FOSSILIZE),
                                     after_slots={"early": early, "mid": seed(F, 1, ti=1.0, c=0.5), "late": None},
                                     val_accuracy=60.0))
    assert culled.attribution == fossilized.attribution == pytest.approx(2.0)


def test_fossilized_seeds_get_no_attribution() -> None:
    assert contribution(record(one(seed(F, 3, ti=5.0, c=5.0)), val_accuracy=90.0)).attribution == 0.0


def test_proxy_is_off_by_default_and_reads_the_outcome_when_enabled() -> None:
    unmeasured = one(seed(T, 1, ti=1.0, c=None))
    assert CFG.proxy_contribution_weight == 0.0
    assert contribution(record(unmeasured, acc_delta=2.0)).proxy == 0.0
    proxied = ContributionRewardConfig(proxy_contribution_weight=0.3)

    def proxy(rec: StepRecord) -> float:
        return compute_contribution_reward(rec, proxied, 1.0).proxy

    assert proxy(record(unmeasured, acc_delta=2.0)) == pytest.approx(0.6)
    assert proxy(record(unmeasured, acc_delta=-1.0)) == 0.0
    assert proxy(record(unmeasured, acc_delta=0.0, before={"acc_delta": 5.0})) == 0.0
    assert proxy(record(EMPTY, GERMINATE_MID, after_slots=unmeasured, acc_delta=2.0)) == pytest.approx(0.6)
    assert proxy(record(one(seed(B, 1, ti=1.0, c=1.0)), acc_delta=2.0)) == 0.0
    assert proxy(record(one(seed(F, 1, ti=1.0, c=None)), acc_delta=2.0)) == 0.0
    twice = {"early": seed(T, 1), "mid": seed(T, 2), "late": None}
    assert proxy(record(twice, acc_delta=2.0)) == pytest.approx(0.6)  # once, not per seed


@pytest.mark.parametrize(("ti", "n", "expected"), [(-1.0, 2, -0.2), (-1.0, 10, -0.4), (0.0, 3, 0.0)])
def test_blending_warning(ti: float, n: int, expected: float) -> None:
    rec = record(one(seed(B, n, ti=1.0, c=0.5)), after_slots=one(seed(B, n, ti=ti, c=0.5)))
    assert contribution(rec).blending_warning == pytest.approx(expected)
    # a seed that regressed while it was seen but no longer blends in the outcome is not warned about
    assert contribution(record(one(seed(B, n, ti=-1.0, c=0.5)), after_slots=one(seed(P, 0, ti=ti, c=0.5))
                               )).blending_warning == 0.0


@pytest.mark.parametrize(("seed_params", "expected"), [(0, 0.0), (1000, -0.5 * math.log(2)), (10**12, -8.0)])
def test_rent(seed_params: int, expected: float) -> None:
    comp = contribution(record(seed_param_counts=((4, seed_params),), before={"seed_param_counts": ((3, 7),)}))
    assert comp.rent == pytest.approx(expected)
    assert comp.growth_ratio == seed_params / 1000


def test_terminal_and_governor() -> None:
    assert contribution(record(val_accuracy=80.0, fossilized_contributing=2)).terminal == 0.0
    final = contribution(record(epoch=LAST, val_accuracy=80.0, fossilized_contributing=2,
                                before={"val_accuracy": 10.0, "fossilized_contributing": 0}))
    assert final.terminal == pytest.approx(0.05 * 80 + 3.0 * 2)
    assert contribution(record(rollback=True)).governor_penalty == -10.0
    assert contribution(record()).governor_penalty == 0.0


def test_pbrs_in_contribution_family() -> None:
    rec = record(one(seed(T, 2, ti=1.0)), after_slots=one(seed(T, 3, ti=1.0)))
    comp = contribution(rec, gamma=0.99)
    assert comp.phi_prev == pytest.approx(2.6) and comp.phi_next == pytest.approx(2.9)
    assert comp.pbrs == pytest.approx(0.3 * (0.99 * 2.9 - 2.6))


def test_pbrs_at_the_terminal_decision_releases_the_potential() -> None:
    final = contribution(record(one(seed(T, 2, ti=1.0)), after_slots=one(seed(T, 3, ti=1.0)), epoch=LAST), 0.99)
    assert final.phi_prev == pytest.approx(2.6) and final.phi_next == 0.0
    assert final.pbrs == pytest.approx(-0.3 * 2.6)


def test_a_germination_at_the_last_decision_earns_no_shaping() -> None:
    """Mid-episode a germination earns potential it will pay back later; at the last decision it cannot."""
    fresh = one(seed(T, 1, acc0=50.0))
    mid_episode = contribution(record(EMPTY, GERMINATE_MID, after_slots=fresh), gamma=0.99)
    last = contribution(record(EMPTY, GERMINATE_MID, after_slots=fresh, epoch=LAST), gamma=0.99)
    assert mid_episode.pbrs > 0
    assert last.pbrs == 0.0 and last.action_shaping == pytest.approx(-0.02)


# --- gap family -------------------------------------------------------------------------------------------------


def test_gap_formula() -> None:
    """r = (g' − g) − λ·(p' − p) − c with g = acc − twin acc (pp) and p = seed params / host params."""
    rec = record(EMPTY, GERMINATE_MID, after_slots=one(seed(T, 1)),
                 before={"val_accuracy": 50.0, "twin_val_accuracy": 48.0, "seed_param_counts": ((7, 100),)},
                 val_accuracy=53.0, twin_val_accuracy=49.0, seed_param_counts=((8, 100), (1, 200)))
    comp = compute_gap_reward(rec, GAP_CFG)
    assert comp.family == "gap"
    assert comp.gap == pytest.approx(4.0 - 2.0)
    assert comp.param_cost == pytest.approx(-2.0 * (0.3 - 0.1))
    assert comp.action_shaping == -0.02
    assert comp.total() == pytest.approx(2.0 - 0.4 - 0.02)
    assert comp.pbrs == comp.terminal == comp.attribution == comp.rent == comp.governor_penalty == 0.0


def test_gap_ignores_the_level_and_loss_for_classification() -> None:
    rec = record(before={"val_accuracy": 90.0, "twin_val_accuracy": 90.0, "val_loss": 0.1},
                 val_accuracy=20.0, twin_val_accuracy=20.0, val_loss=math.nan, twin_val_loss=5.0)
    assert compute_gap_reward(rec, GAP_CFG).total() == 0.0


def test_gap_for_language_models_uses_the_validation_loss() -> None:
    rec = record(before={"val_loss": 2.0, "twin_val_loss": 2.1, "val_accuracy": 10.0},
                 val_loss=1.5, twin_val_loss=1.8, val_accuracy=1.0, twin_val_accuracy=90.0)
    comp = compute_gap_reward(rec, GapRewardConfig(cost=2.0, lm=True))
    assert comp.gap == pytest.approx(100 * 0.3 - 100 * 0.1)
    assert comp.total() == pytest.approx(20.0)


@pytest.mark.parametrize("where", ["before", "after"])
@pytest.mark.parametrize("field", ["twin_val_accuracy", "twin_val_loss"])
@pytest.mark.parametrize("lm", [False, True])
def test_gap_without_a_twin_is_a_clear_error(where: str, field: str, lm: bool) -> None:
    rec = record(before={field: None}) if where == "before" else record(**{field: None})
    with pytest.raises(ValueError, match="twin"):
        compute_gap_reward(rec, GapRewardConfig(cost=1.0, lm=lm))


def test_gap_param_cost_term() -> None:
    grown = record(seed_param_counts=((1, 500),), host_param_count=1000)
    assert compute_gap_reward(grown, GapRewardConfig(cost=0.0)).param_cost == 0.0
    assert compute_gap_reward(grown, GapRewardConfig(cost=3.0)).param_cost == pytest.approx(-1.5)
    shrunk = record(one(seed(B, 1)), cmd(LifecycleOp.CULL), after_slots=EMPTY,
                    before={"seed_param_counts": ((4, 300), (9, 200))}, seed_param_counts=((10, 200),))
    culled = compute_gap_reward(shrunk, GapRewardConfig(cost=3.0))
    assert culled.param_cost == pytest.approx(3.0 * 0.3)  # removing parameters refunds their cost
    assert culled.total() == pytest.approx(0.9 - 0.005)


def test_gap_compute_charge_term() -> None:
    """Epoch 11 cost the env 3 twin epochs where its twin spent 1: 2 twin epochs beyond it, of the twin's 25 in the
    episode, so λ_c 2.5 charges 2.5 × 2/25 = 0.2 (as rent), and no parameter or intervention cost."""
    germinated = record(EMPTY, GERMINATE_MID, before={"train_flops": 1000, "twin_train_flops": 1000},
                        train_flops=1300, twin_train_flops=1100, seed_param_counts=((1, 500),), val_accuracy=51.0)
    comp = compute_gap_reward(germinated, GapRewardConfig(cost=2.5, charge="compute"))
    assert comp.rent == pytest.approx(-0.2) and comp.param_cost == 0.0 and comp.action_shaping == 0.0
    assert comp.total() == pytest.approx(1.0 - 0.2)
    cheaper = record(before={"train_flops": 1500, "twin_train_flops": 1000}, train_flops=1600, twin_train_flops=1100)
    assert compute_gap_reward(cheaper, GapRewardConfig(cost=2.5, charge="compute")).rent == 0.0  # level with the twin


@pytest.mark.parametrize(("op", "cost"), [(LifecycleOp.WAIT, 0.0), (LifecycleOp.GERMINATE, -0.02),
                                          (LifecycleOp.FOSSILIZE, -0.01), (LifecycleOp.CULL, -0.005)])
def test_gap_intervention_costs(op: LifecycleOp, cost: float) -> None:
    command = {LifecycleOp.WAIT: WAIT, LifecycleOp.GERMINATE: GERMINATE_MID}.get(op) or cmd(op)
    seen = EMPTY if op in (LifecycleOp.WAIT, LifecycleOp.GERMINATE) else one(seed(P, 3, c=1.0, ready=True))
    comp = compute_gap_reward(record(seen, command, after_slots=EMPTY), GAP_CFG)
    assert INTERVENTION_COSTS[op] == cost
    assert comp.action_shaping == cost and comp.total() == cost


def test_gap_governor_penalty() -> None:
    comp = compute_gap_reward(record(rollback=True, val_accuracy=12.0, twin_val_accuracy=10.0), GAP_CFG)
    assert comp.governor_penalty == -10.0
    assert comp.total() == pytest.approx(-10.0 + 2.0)
    assert compute_gap_reward(record(), GAP_CFG).governor_penalty == 0.0


def test_gap_has_no_extra_terminal_term() -> None:
    kwargs: dict[str, Any] = {"val_accuracy": 70.0, "twin_val_accuracy": 60.0, "fossilized_contributing": 2}
    assert compute_gap_reward(record(epoch=LAST, **kwargs), GAP_CFG).total() == (
        compute_gap_reward(record(**kwargs), GAP_CFG).total())


def test_gap_config_validation() -> None:
    with pytest.raises(ValueError, match="cost"):
        GapRewardConfig(cost=-0.1)
    with pytest.raises(ValueError, match="cost"):
        GapRewardConfig(cost=math.nan)
    with pytest.raises(ValueError, match="charge"):
        GapRewardConfig(cost=1.0, charge="params")  # type: ignore[arg-type]


# --- loss and sparse families -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("loss_delta", "expected"),
    [(0.0, 0.0), (0.1, 10.0), (-0.1, -5.0), (1.0, 25.0), (-1.0, -12.5), (math.nan, -12.5), (-math.inf, -12.5)],
)
def test_loss_primary(loss_delta: float, expected: float) -> None:
    rec = record(loss_delta=loss_delta, before={"loss_delta": 0.3})
    assert compute_loss_reward(rec, LOSS_CFG, 1.0).loss_primary == pytest.approx(expected)


@pytest.mark.parametrize(
    ("val_loss", "expected"), [(0.3, 1.0), (0.1, 1.0), ((math.log(10) + 0.3) / 2, 0.5), (5.0, 0.0), (math.nan, 0.0)]
)
def test_loss_terminal(val_loss: float, expected: float) -> None:
    final = compute_loss_reward(record(epoch=LAST, val_loss=val_loss, before={"val_loss": 0.3}), LOSS_CFG, 1.0)
    assert final.terminal == pytest.approx(expected)
    assert compute_loss_reward(record(val_loss=val_loss), LOSS_CFG, 1.0).terminal == 0.0


def test_loss_family_rent_grace_costs_and_pbrs() -> None:
    rec = record(one(seed(T, 2)), cmd(LifecycleOp.CULL), after_slots=one(seed(T, 3)),
                 seed_param_counts=((2, 5000), (3, 1000)), before={"seed_param_counts": ((9, 10**6),)})
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
        0.01, math.log(257), 1.2, 0.15)
    assert LOSS_CFG.compute_rent_weight == 0.05
    with pytest.raises(ValueError, match="task_type"):
        LossRewardConfig.for_task("regression", 1.0, 0.1, 0.1)
    with pytest.raises(ValueError):
        LossRewardConfig.for_task("lm", 1.0, 2.0, 0.1)
    with pytest.raises(ValueError):
        LossRewardConfig.for_task("lm", 3.0, 2.0, 0.0)


def test_sparse_spot_value() -> None:
    final = record(epoch=LAST, best_val_accuracy=80.0, seed_param_counts=((6, 60_000), (2, 40_000)),
                   before={"best_val_accuracy": 10.0})
    comp = compute_sparse_reward(final, SparseRewardConfig())
    assert comp.sparse_terminal == pytest.approx(0.78)
    assert comp.total() == pytest.approx(0.78)
    assert comp.pbrs == 0.0


def test_sparse_is_zero_before_the_end_and_clamped() -> None:
    cfg = SparseRewardConfig()
    assert compute_sparse_reward(record(best_val_accuracy=80.0), cfg).total() == 0.0
    assert compute_sparse_reward(record(rollback=True), cfg).total() == -10.0
    huge = record(epoch=LAST, seed_param_counts=((6, 10**8),))
    assert compute_sparse_reward(huge, cfg).sparse_terminal == -1.0
    scaled = record(epoch=LAST, best_val_accuracy=100.0)
    assert compute_sparse_reward(scaled, SparseRewardConfig(sparse_reward_scale=3.0)).sparse_terminal == 1.0


# --- configuration, dispatch, components --------------------------------------------------------------------------


def test_reward_config_per_family() -> None:
    task = get_task_spec("synthetic")
    assert reward_config("contribution", task) == ContributionRewardConfig()
    assert reward_config(RewardFamily.LOSS, task) == LossRewardConfig.for_task(
        task.task_type, task.random_guess_loss, task.target_loss, task.typical_loss_delta_std)
    assert reward_config("sparse", task) == SparseRewardConfig()
    custom = SparseRewardConfig(param_budget=10)
    assert reward_config("sparse", task, sparse=custom) is custom
    assert reward_config("gap", task, param_cost=1.5) == GapRewardConfig(cost=1.5, lm=False)
    lm = reward_config("gap", get_task_spec("synthetic_text"), param_cost=0.5)
    assert lm == GapRewardConfig(cost=0.5, lm=True)
    with pytest.raises(ValueError):
        reward_config("dense", task)


def test_gap_uses_the_cost_measured_nearest_the_run_sample_cap_unless_one_is_given() -> None:
    task = get_task_spec("synthetic")
    by_cap = {c.max_train_samples: GapRewardConfig(cost=c.param_cost)
              for c in CALIBRATIONS["synthetic"].calibrations}
    assert reward_config("gap", task, max_train_samples=192) == by_cap[192]
    assert reward_config("gap", task, max_train_samples=400) == by_cap[192]  # nearer 192 by ratio
    assert reward_config("gap", task, max_train_samples=1000) == by_cap[2048]
    assert reward_config("gap", task) == by_cap[2048]  # no cap: all 5,000, nearest 2,048
    assert reward_config("gap", task, max_train_samples=48) == by_cap[192]  # 4× away: still served
    with pytest.raises(ValueError, match="measured at 2048, 192 training samples, not near 40"):
        reward_config("gap", task, max_train_samples=40)  # more than 4× from every measured cap
    with pytest.raises(ValueError, match="not near all 60000"):
        reward_config("gap", get_task_spec("fashion_mnist"))  # measured on 192 samples only
    assert reward_config("gap", task, param_cost=0.0, max_train_samples=192) == GapRewardConfig(cost=0.0)
    unmeasured = get_task_spec("cifar10")
    with pytest.raises(ValueError, match="param_cost"):
        reward_config("gap", unmeasured)
    with pytest.raises(ValueError, match="param_cost"):
        make_reward_fn("gap", unmeasured, 0.99)


def test_reward_summary_names_the_resolved_parameter_cost() -> None:
    task = get_task_spec("synthetic")
    assert reward_summary("gap", task, max_train_samples=192) == "gap, λ_p 3.918"
    assert reward_summary("gap", task, 0.5) == "gap, λ_p 0.5"
    assert reward_summary("contribution", task) == "contribution"


def test_the_compute_charge_resolves_by_the_same_rule() -> None:
    task = get_task_spec("synthetic")
    by_cap = {c.max_train_samples: GapRewardConfig(cost=c.compute_cost, charge="compute")
              for c in CALIBRATIONS["synthetic"].calibrations}
    assert reward_config("gap", task, charge="compute", max_train_samples=192) == by_cap[192]
    assert reward_config("gap", task, charge="compute") == by_cap[2048]
    assert reward_config("gap", task, charge="compute", compute_cost=0.8) == GapRewardConfig(cost=0.8,
                                                                                             charge="compute")
    with pytest.raises(ValueError, match="compute_cost"):
        reward_config("gap", get_task_spec("cifar10"), charge="compute")
    uncharged = reward_config("gap", get_task_spec("cifar10"), charge="compute", logged_only=True)
    assert uncharged == GapRewardConfig(cost=0.0, charge="compute", charged=False)
    with pytest.raises(ValueError, match="charge 'compute'"):
        reward_config("gap", task, compute_cost=0.8)  # a λ_c under the parameter charge
    with pytest.raises(ValueError, match="drop param_cost"):
        reward_config("gap", task, param_cost=0.5, charge="compute")
    assert resolved_cost("gap", task, charge="compute", compute_cost=0.8) == {"compute_cost": 0.8}
    assert resolved_cost("gap", task, max_train_samples=192) == {"param_cost": 3.918}
    assert resolved_cost("gap", get_task_spec("cifar10"), charge="compute", logged_only=True) == {
        "compute_cost": NOT_CHARGED}
    assert resolved_cost("contribution", task) == {}


def test_reward_summary_names_the_charge() -> None:
    task = get_task_spec("synthetic")
    assert reward_summary("gap", task, charge="compute", compute_cost=0.8) == (
        "gap, λ_c 0.8 per 100 % training compute")
    assert reward_summary("gap", get_task_spec("cifar10"), charge="compute", logged_only=True).startswith(
        "gap, λ_c not charged")


def test_only_the_gap_family_needs_a_twin() -> None:
    assert [f.value for f in RewardFamily if needs_twin(f)] == ["gap"]
    assert needs_twin("gap") and not needs_twin("contribution")


@pytest.mark.parametrize("family", list(RewardFamily))
def test_make_reward_fn_dispatches_on_the_config(family: RewardFamily) -> None:
    task = get_task_spec("synthetic")
    rec = record(one(seed(B, 2, ti=1.0, c=1.0)), epoch=LAST, best_val_accuracy=80.0, val_accuracy=55.0,
                 twin_val_accuracy=51.0)
    comp = make_reward_fn(family, task, 0.9, param_cost=1.0)(rec)
    assert comp.family == family.value
    assert comp.to_dict() == compute_reward(rec, reward_config(family, task, param_cost=1.0), 0.9).to_dict()


def test_components_total_and_json() -> None:
    slots = {"early": seed(B, 2, ti=-0.5, c=1.5), "mid": seed(P, 4, ti=1.0, c=2.0, ready=True), "late": seed(T, 1)}
    rec = record(slots, acc_delta=1.0, rollback=True, epoch=LAST, seed_param_counts=((5, 300),))
    for config in (CFG, LOSS_CFG, SparseRewardConfig(), GAP_CFG):
        comp = compute_reward(rec, config, 0.99)
        assert comp.total() == sum(getattr(comp, name) for name in SUMMED_FIELDS)
        data = json.loads(json.dumps(comp.to_dict(), allow_nan=False))
        assert data["total"] == comp.total()
        assert data["action_name"] == "WAIT" and data["family"] == comp.family
        assert set(SUMMED_FIELDS) < set(data)


# --- record validation ------------------------------------------------------------------------------------------


def test_step_record_terminal_and_target() -> None:
    assert record(epoch=LAST).is_terminal and not record(epoch=LAST - 1).is_terminal
    assert record(epoch=1).before.epoch == 1
    info = seed(P, 3, c=1.0)
    assert record(one(info), cmd(LifecycleOp.CULL), after_slots=EMPTY).target_info() == info
    assert record(EMPTY, GERMINATE_MID, after_slots=one(seed(T, 1))).target_info() is None
    assert record().target_info() is None


def test_measurement_parameter_ratio() -> None:
    m = measurement(3, seed_param_counts=((1, 100), (4, 300)), host_param_count=800)
    assert m.seed_param_count_total == 400 and m.param_ratio == 0.5


def test_step_record_validation() -> None:
    with pytest.raises(ValueError, match="decision epoch"):
        record(epoch=0)
    with pytest.raises(ValueError, match="decision epoch"):
        record(epoch=MAX_EPOCHS)
    with pytest.raises(ValueError, match="needs measurements"):
        StepRecord(epoch=3, max_epochs=MAX_EPOCHS, command=WAIT, action_success=True, before=measurement(3),
                   after=measurement(3), rollback=False)
    with pytest.raises(ValueError, match="same enabled slots"):
        record(EMPTY, after_slots={"early": None, "mid": None})
    with pytest.raises(ValueError, match="occupied"):
        record(command=cmd(LifecycleOp.CULL))
    with pytest.raises(ValueError, match="occupied"):
        record(one(seed(T, 1)), GERMINATE_MID)
    with pytest.raises(ValueError, match="occupied"):  # the target must be judged by what the decision saw
        record(EMPTY, cmd(LifecycleOp.FOSSILIZE), after_slots=one(seed(F, 1)))
    with pytest.raises(ValueError, match="not enabled"):
        record({"early": None}, cmd(LifecycleOp.CULL, "late"))


def test_measurement_validation() -> None:
    with pytest.raises(ValueError, match="snapshot"):
        measurement(2, snapshot=(("early", 0, 0),))
    with pytest.raises(ValueError, match="snapshot"):
        measurement(2, snapshot=(("early", 0, 0), ("mid", 0, 0), ("mid", 0, 0)))
    with pytest.raises(ValueError, match="non-finite"):
        measurement(2, val_accuracy=math.nan)
    with pytest.raises(ValueError, match="non-finite"):
        measurement(2, best_val_accuracy=math.inf)
    with pytest.raises(ValueError, match="host_param_count"):
        measurement(2, host_param_count=0)
    with pytest.raises(ValueError, match="Negative"):
        measurement(2, seed_param_counts=((1, -5),))
    with pytest.raises(ValueError, match="fossilized_contributing"):
        measurement(2, fossilized_contributing=-1)
    assert math.isnan(measurement(2, val_loss=math.nan, loss_delta=math.nan).val_loss)  # divergence is recorded
    with pytest.raises(ValueError, match="non-finite"):
        seed(T, 1, c=math.inf)
    with pytest.raises(ValueError, match="Negative"):
        seed(T, -1)


@pytest.mark.parametrize("diverged", [math.nan, math.inf])
@pytest.mark.parametrize("who", ["val_loss", "twin_val_loss"])
def test_gap_for_language_models_stays_finite_through_a_divergence(diverged: float, who: str) -> None:
    """A diverged epoch has no measurable loss gap: the rewards stay finite, the rollback is charged, and the two
    rewards around the divergence still telescope."""
    config = GapRewardConfig(cost=2.0, lm=True)
    into = record(epoch=10, rollback=True, before={"val_loss": 2.0, "twin_val_loss": 2.1}, **{who: diverged})
    out = record(epoch=11, before={"val_loss": into.after.val_loss, "twin_val_loss": into.after.twin_val_loss},
                 val_loss=1.8, twin_val_loss=1.85)
    rewards = [compute_gap_reward(into, config).total(), compute_gap_reward(out, config).total()]
    assert all(math.isfinite(r) for r in rewards)
    assert sum(rewards) == pytest.approx(100 * (0.05 - 0.1) - 10.0)
