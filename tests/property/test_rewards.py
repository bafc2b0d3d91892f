"""Property tests of the rewards: exact totals, bounds, semantics, the gap telescoping and PBRS invariance.

Records are drawn as pairs of measurements (what the decision saw, what followed); episodes as sequences of
measurements, so consecutive records share a measurement exactly as the epoch loop's records do.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from esper.env.potential import lifecycle_potential
from esper.env.rewards import (
    INTERVENTION_COSTS,
    SUMMED_FIELDS,
    ContributionRewardConfig,
    GapRewardConfig,
    LossRewardConfig,
    RewardConfig,
    RewardFamily,
    SparseRewardConfig,
    StepRecord,
    compute_reward,
)
from esper.env.step_record import Measurement, SlotRewardInfo
from esper.leyline import CANONICAL_SLOTS, LifecycleCommand, LifecycleOp, SeedStage, is_live_stage
from esper.leyline.constants import DEFAULT_GOVERNOR_DEATH_PENALTY

OCCUPIED = (SeedStage.GERMINATED, SeedStage.TRAINING, SeedStage.BLENDING, SeedStage.PROBATIONARY, SeedStage.FOSSILIZED)
MAX_EPOCHS = 25
GAMMA = 0.995
LOSS_CFG = LossRewardConfig.for_task("classification", math.log(10), 0.3, 0.05)
GAP_CFG = GapRewardConfig(cost=1.5)
CONFIGS: dict[RewardFamily, RewardConfig] = {
    RewardFamily.GAP: GAP_CFG,
    RewardFamily.CONTRIBUTION: ContributionRewardConfig(),
    RewardFamily.LOSS: LOSS_CFG,
    RewardFamily.SPARSE: SparseRewardConfig(),
}
PBRS_WEIGHTS = {RewardFamily.GAP: 0.0, RewardFamily.CONTRIBUTION: ContributionRewardConfig().pbrs_weight,
                RewardFamily.LOSS: LOSS_CFG.stage_potential_weight, RewardFamily.SPARSE: 0.0}
WAIT = LifecycleCommand(LifecycleOp.WAIT)

acc = st.floats(0.0, 100.0)
families = st.sampled_from(list(RewardFamily))


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


def _snapshot(slots: dict[str, SlotRewardInfo | None]) -> tuple[tuple[str, int, int], ...]:
    return tuple((s, 0, 0) if i is None else (s, i.stage, i.epochs_in_stage) for s, i in slots.items())


@st.composite
def measurements(draw: st.DrawFn, epoch: int, slots: dict[str, SlotRewardInfo | None] | None = None,
                 twin: bool = True) -> Measurement:
    if slots is None:
        slots = {s: draw(st.none() | slot_infos()) for s in CANONICAL_SLOTS}
    return Measurement(
        epoch=epoch,
        val_accuracy=draw(acc),
        val_loss=draw(st.floats(0.0, 20.0) | st.just(math.nan) | st.just(math.inf)),
        acc_delta=draw(st.floats(-10.0, 10.0)),
        loss_delta=draw(st.floats(-10.0, 10.0) | st.just(math.nan) | st.just(-math.inf)),
        slots=slots,
        snapshot=_snapshot(slots),
        seed_param_counts=tuple(draw(st.lists(st.tuples(st.integers(0, 30), st.integers(0, 10**6)), max_size=3))),
        host_param_count=draw(st.integers(10**5, 10**7)),
        fossilized_contributing=draw(st.integers(0, 3)),
        best_val_accuracy=draw(acc),
        twin_val_accuracy=draw(acc) if twin else None,
        twin_val_loss=draw(st.floats(0.0, 20.0)) if twin else None,
    )


def _commands(slots: dict[str, SlotRewardInfo | None]) -> list[LifecycleCommand]:
    """Every command the validity rules could allow in this state (plus WAIT)."""
    out = [WAIT]
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
    is_terminal = draw(st.booleans()) if terminal is None else terminal
    epoch = MAX_EPOCHS - 1 if is_terminal else draw(st.integers(1, MAX_EPOCHS - 2))
    before = draw(measurements(epoch))
    return StepRecord(epoch=epoch, max_epochs=MAX_EPOCHS, command=draw(st.sampled_from(_commands(dict(before.slots)))),
                      action_success=draw(st.booleans()), before=before, after=draw(measurements(epoch + 1)),
                      rollback=draw(st.booleans()))


def _reward(rec: StepRecord, family: RewardFamily, gamma: float = GAMMA) -> Any:
    return compute_reward(rec, CONFIGS[family], gamma)


REWARD_DIAGNOSTICS = frozenset({"family", "attribution_discount", "ratio_penalty", "growth_ratio", "phi_prev",
                                "phi_next", "val_accuracy", "action_name", "action_success"})
"""Logged beside the reward, never part of it."""


# --- every family -------------------------------------------------------------------------------------------------


@given(step_records(), families, st.floats(0.5, 1.0))
def test_total_is_the_exact_sum_and_everything_is_finite_and_bounded(
    rec: StepRecord, family: RewardFamily, gamma: float
) -> None:
    comp = _reward(rec, family, gamma)
    parts = [getattr(comp, name) for name in SUMMED_FIELDS]
    assert all(math.isfinite(p) for p in parts)
    # Every numeric component that is not a named diagnostic is part of the reward (written out here, not taken
    # from SUMMED_FIELDS, so a component left out of the sum or a diagnostic summed in fails).
    logged = comp.to_dict()
    summed = [v for k, v in logged.items() if k not in REWARD_DIAGNOSTICS and k != "total"]
    assert comp.total() == pytest.approx(math.fsum(summed), rel=1e-12, abs=1e-12)
    assert logged["total"] == comp.total()
    penalty = DEFAULT_GOVERNOR_DEATH_PENALTY if rec.rollback else 0.0
    assert comp.governor_penalty == -penalty
    if family == RewardFamily.GAP:
        # |Δg| ≤ 200 pp, Δp ≤ 30 (3 seeds of 10^6 on a host of 10^5), the largest intervention cost 0.02
        bound = 200.0 + GAP_CFG.cost * 30.0 + 0.02
    else:
        bound = 50.0
    assert abs(comp.total()) <= bound + penalty
    assert comp.probation_warning >= -sum(
        1 for i in rec.before.slots.values() if i is not None and i.stage == SeedStage.PROBATIONARY
    )


@given(step_records())
def test_the_language_model_gap_is_finite_even_after_a_divergence(rec: StepRecord) -> None:
    comp = compute_reward(rec, GapRewardConfig(cost=GAP_CFG.cost, lm=True), GAMMA)
    assert all(math.isfinite(getattr(comp, name)) for name in SUMMED_FIELDS)


@given(step_records(), families)
def test_terminal_bonus_only_at_the_terminal_step(rec: StepRecord, family: RewardFamily) -> None:
    comp = _reward(rec, family)
    if not rec.is_terminal:
        assert comp.terminal == 0.0 and comp.sparse_terminal == 0.0
    else:
        assert comp.phi_next == 0.0
    if family == RewardFamily.SPARSE and not rec.is_terminal:
        assert comp.total() == comp.governor_penalty


@given(step_records(), families)
def test_rewards_are_pure_functions_of_the_record(rec: StepRecord, family: RewardFamily) -> None:
    rebuilt = StepRecord(**{f.name: getattr(rec, f.name) for f in dataclasses.fields(rec)})
    assert _reward(rebuilt, family).to_dict() == _reward(rec, family).to_dict()


# --- contribution family ------------------------------------------------------------------------------------------


def _with_after_slots(rec: StepRecord, slots: dict[str, SlotRewardInfo | None]) -> StepRecord:
    after = dataclasses.replace(rec.after, slots=slots, snapshot=_snapshot(slots))
    return dataclasses.replace(rec, after=after)


@given(step_records(), st.floats(-8.0, 8.0), st.floats(-8.0, 8.0))
def test_fossilized_seeds_get_no_attribution(rec: StepRecord, c1: float, c2: float) -> None:
    def with_fossil_counterfactual(c: float) -> dict[str, SlotRewardInfo | None]:
        return {s: i if i is None or i.stage != SeedStage.FOSSILIZED else dataclasses.replace(i, counterfactual=c)
                for s, i in rec.after.slots.items()}

    a = _reward(_with_after_slots(rec, with_fossil_counterfactual(c1)), RewardFamily.CONTRIBUTION).attribution
    b = _reward(_with_after_slots(rec, with_fossil_counterfactual(c2)), RewardFamily.CONTRIBUTION).attribution
    assert a == b
    only_fossils = {s: None if i is None or i.stage != SeedStage.FOSSILIZED else i for s, i in rec.after.slots.items()}
    assert _reward(_with_after_slots(rec, only_fossils), RewardFamily.CONTRIBUTION).attribution == 0.0


@given(step_records(), st.data(), families)
def test_what_the_decision_saw_enters_only_through_its_slots_and_lifecycle(
    rec: StepRecord, data: st.DataObject, family: RewardFamily
) -> None:
    """Apart from the gap family's reference point, a reward reads `before` only to judge the decision (its target
    and waiting seeds) and for the potential: every measured number of the reward comes from the outcome."""
    other = data.draw(measurements(rec.epoch, dict(rec.before.slots)))
    if family == RewardFamily.GAP:  # the gap's reference point is the previous measurement
        other = dataclasses.replace(other, val_accuracy=rec.before.val_accuracy,
                                    twin_val_accuracy=rec.before.twin_val_accuracy,
                                    seed_param_counts=rec.before.seed_param_counts,
                                    host_param_count=rec.before.host_param_count)
    assert _reward(dataclasses.replace(rec, before=other), family).to_dict() == _reward(rec, family).to_dict()


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
    st.booleans(),
)
def test_ransomware_is_not_profitable(
    stage: SeedStage, n: int, c: float, ti: float, acc0: float, ready: bool, op: LifecycleOp, acc_delta: float,
    seed_params: int, terminal: bool,
) -> None:
    """High contribution with a worse host since germination (progress = total improvement < 0) earns ≤ 0.5."""
    if stage == SeedStage.BLENDING and op == LifecycleOp.FOSSILIZE:
        op = LifecycleOp.WAIT
    info = SlotRewardInfo(int(stage), n, n + 8, ti, c, acc0, ready)
    if op == LifecycleOp.FOSSILIZE:
        outcome: SlotRewardInfo | None = SlotRewardInfo(int(SeedStage.FOSSILIZED), 1, n + 9, ti, c, acc0, False)
    elif op == LifecycleOp.CULL:
        outcome = None
    elif stage == SeedStage.BLENDING and n >= 4:
        outcome = SlotRewardInfo(int(SeedStage.PROBATIONARY), 1, n + 9, ti, c, acc0, ready)
    else:
        outcome = SlotRewardInfo(int(stage), n + 1, n + 9, ti, c, acc0, ready)
    seen = {"early": None, "mid": info, "late": None}
    followed = {"early": None, "mid": outcome, "late": None}
    epoch = MAX_EPOCHS - 1 if terminal else 12
    common: dict[str, Any] = {"val_loss": 1.0, "loss_delta": 0.0, "host_param_count": 10**5,
                              "fossilized_contributing": 0, "best_val_accuracy": 60.0, "twin_val_accuracy": None,
                              "twin_val_loss": None}
    rec = StepRecord(
        epoch=epoch, max_epochs=MAX_EPOCHS,
        command=WAIT if op == LifecycleOp.WAIT else LifecycleCommand(op, "mid"), action_success=True,
        before=Measurement(epoch=epoch, val_accuracy=acc0 + ti, acc_delta=0.0, slots=seen, snapshot=_snapshot(seen),
                           seed_param_counts=((n + 8, seed_params),), **common),
        after=Measurement(epoch=epoch + 1, val_accuracy=acc0 + ti, acc_delta=acc_delta, slots=followed,
                          snapshot=_snapshot(followed),
                          seed_param_counts=((n + 9, seed_params),) if outcome is not None else (), **common),
        rollback=False,
    )
    comp = _reward(rec, RewardFamily.CONTRIBUTION)
    if terminal:  # the final accuracy bonus is paid whatever the seed did; it is not the seed's reward
        comp.terminal = 0.0
    assert comp.total() <= 0.5
    if outcome is not None and outcome.stage != SeedStage.FOSSILIZED:
        assert comp.attribution_discount < 0.5


@given(st.integers(0, 10), st.floats(1.0, 8.0), st.floats(0.0, 10.0))
def test_early_fossilize_earns_less_than_the_undiscounted_maximum(n: int, c: float, ti: float) -> None:
    cfg = ContributionRewardConfig()
    info = SlotRewardInfo(int(SeedStage.PROBATIONARY), n, n + 8, ti, c, 40.0, True)
    seen = {"early": None, "mid": info, "late": None}
    m = Measurement(epoch=12, val_accuracy=50.0, val_loss=1.0, acc_delta=0.0, loss_delta=0.0, slots=seen,
                    snapshot=_snapshot(seen), seed_param_counts=(), host_param_count=10**4, fossilized_contributing=0,
                    best_val_accuracy=50.0)
    rec = StepRecord(epoch=12, max_epochs=MAX_EPOCHS, command=LifecycleCommand(LifecycleOp.FOSSILIZE, "mid"),
                     action_success=True, before=m, after=dataclasses.replace(m, epoch=13), rollback=False)
    shaping = compute_reward(rec, cfg, GAMMA).action_shaping
    maximum = cfg.fossilize_cost + cfg.fossilize_base_bonus + cfg.fossilize_contribution_scale * c
    if n < 5:
        assert shaping < maximum
    else:
        assert math.isclose(shaping, maximum)


@given(step_records(), st.floats(1e-4, 10.0))
def test_loss_family_rewards_decreases_and_punishes_increases(rec: StepRecord, magnitude: float) -> None:
    def primary(delta: float) -> float:
        changed = dataclasses.replace(rec, after=dataclasses.replace(rec.after, loss_delta=delta))
        return _reward(changed, RewardFamily.LOSS).loss_primary

    better, worse = primary(magnitude), primary(-magnitude)
    assert better > 0 > worse
    assert abs(worse) <= abs(better)  # regressions are scaled by 0.5


# --- gap: the return telescopes to the question users ask ---------------------------------------------------------

OPS = st.sampled_from(list(LifecycleOp))
_PROBATIONARY_MID = {"early": None, "late": None,
                     "mid": SlotRewardInfo(int(SeedStage.PROBATIONARY), 3, 10, 1.0, 1.0, 40.0, True)}
_EMPTY = {s: None for s in CANONICAL_SLOTS}


def _command(op: LifecycleOp) -> LifecycleCommand:
    if op == LifecycleOp.WAIT:
        return WAIT
    if op == LifecycleOp.GERMINATE:
        return LifecycleCommand(op, "mid", "norm", "sigmoid")
    return LifecycleCommand(op, "mid")


@st.composite
def gap_episodes(draw: st.DrawFn, start_at_zero: bool) -> tuple[list[Measurement], list[LifecycleOp], list[bool]]:
    """T measurements, the T − 1 decisions between them and whether each outcome rolled back.

    Measurement e must let decision e's command be valid, so its slots follow the op; the gap reward ignores slots.
    """
    horizon = draw(st.integers(2, 30))
    ops = draw(st.lists(OPS, min_size=horizon - 1, max_size=horizon - 1))
    episode = []
    for e in range(1, horizon + 1):
        op = ops[e - 1] if e < horizon else LifecycleOp.WAIT
        slots = _PROBATIONARY_MID if op in (LifecycleOp.CULL, LifecycleOp.FOSSILIZE) else _EMPTY
        m = draw(measurements(e, slots))
        if e == 1 and start_at_zero:  # nothing grown yet: the env is its twin
            m = dataclasses.replace(m, twin_val_accuracy=m.val_accuracy, twin_val_loss=m.val_loss if math.isfinite(
                m.val_loss) else 1.0, val_loss=m.val_loss if math.isfinite(m.val_loss) else 1.0, seed_param_counts=())
        episode.append(m)
    rollbacks = draw(st.lists(st.booleans(), min_size=horizon - 1, max_size=horizon - 1))
    return episode, ops, rollbacks


def _finite_losses(episode: list[Measurement]) -> list[Measurement]:
    return [m if math.isfinite(m.val_loss) else dataclasses.replace(m, val_loss=2.0) for m in episode]


def _gap(m: Measurement, lm: bool) -> float:
    assert m.twin_val_accuracy is not None and m.twin_val_loss is not None
    return 100.0 * (m.twin_val_loss - m.val_loss) if lm else m.val_accuracy - m.twin_val_accuracy


def _gap_return(episode: list[Measurement], ops: list[LifecycleOp], rollbacks: list[bool],
                config: GapRewardConfig) -> float:
    horizon = len(episode)
    rewards = []
    for e in range(1, horizon):
        rec = StepRecord(epoch=e, max_epochs=horizon, command=_command(ops[e - 1]), action_success=True,
                         before=episode[e - 1], after=episode[e], rollback=rollbacks[e - 1])
        rewards.append(compute_reward(rec, config, GAMMA).total())
    return math.fsum(rewards)


@given(gap_episodes(start_at_zero=False), st.booleans(), st.floats(0.0, 10.0))
def test_gap_return_telescopes(
    drawn: tuple[list[Measurement], list[LifecycleOp], list[bool]], lm: bool, param_cost: float
) -> None:
    """Σ r_e = g_T − g_1 − λ·(p_T − p_1) − Σc (− 10 per rollback), whatever happened in between."""
    episode, ops, rollbacks = drawn
    episode = _finite_losses(episode)
    config = GapRewardConfig(cost=param_cost, lm=lm)
    first, last = episode[0], episode[-1]
    costs = math.fsum(INTERVENTION_COSTS[op] for op in ops) - DEFAULT_GOVERNOR_DEATH_PENALTY * sum(rollbacks)
    expected = _gap(last, lm) - _gap(first, lm) - param_cost * (last.param_ratio - first.param_ratio) + costs
    assert math.isclose(_gap_return(episode, ops, rollbacks, config), expected, rel_tol=1e-12, abs_tol=1e-9)


@given(gap_episodes(start_at_zero=True), st.booleans(), st.floats(0.0, 10.0))
def test_gap_return_from_a_seedless_start_is_the_final_gap_minus_costs(
    drawn: tuple[list[Measurement], list[LifecycleOp], list[bool]], lm: bool, param_cost: float
) -> None:
    """With g_1 = p_1 = 0 (nothing grown before the first decision) the return is g_T − λ·p_T − Σc."""
    episode, ops, _ = drawn
    episode = _finite_losses(episode)
    no_rollbacks = [False] * len(ops)
    last = episode[-1]
    assert _gap(episode[0], lm) == 0.0 and episode[0].param_ratio == 0.0
    expected = _gap(last, lm) - param_cost * last.param_ratio + math.fsum(INTERVENTION_COSTS[op] for op in ops)
    got = _gap_return(episode, ops, no_rollbacks, GapRewardConfig(cost=param_cost, lm=lm))
    assert math.isclose(got, expected, rel_tol=1e-12, abs_tol=1e-9)


@st.composite
def with_flops(draw: st.DrawFn, episode: list[Measurement], start_at_zero: bool) -> list[Measurement]:
    """The episode with cumulative training FLOPs: a twin whose every epoch costs the same, an env whose epochs cost
    anything up to 5 twin epochs (the same as the twin's in epoch 1 when nothing has grown before it)."""
    per_epoch = draw(st.integers(1, 10**12))
    increments = [draw(st.integers(0, 5 * per_epoch)) for _ in episode]
    if start_at_zero:
        increments[0] = per_epoch
    env = list(itertools.accumulate(increments))
    return [dataclasses.replace(m, train_flops=env[i], twin_train_flops=per_epoch * (i + 1))
            for i, m in enumerate(episode)]


def _excess_share(m: Measurement, horizon: int) -> float:
    """x_e / D: FLOPs beyond the twin's by the end of epoch e, per FLOP of the twin's whole episode."""
    assert m.twin_train_flops is not None
    return (m.train_flops - m.twin_train_flops) / (m.twin_train_flops * horizon / m.epoch)


@given(gap_episodes(start_at_zero=False), st.data(), st.booleans(), st.floats(0.0, 10.0))
def test_compute_charged_gap_return_telescopes(
    drawn: tuple[list[Measurement], list[LifecycleOp], list[bool]], data: st.DataObject, lm: bool, compute_cost: float
) -> None:
    """Σ r_e = g_T − g_1 − λ_c·(x_T − x_1)/D (− 10 per rollback) with no intervention costs, whatever happened."""
    episode, ops, rollbacks = drawn
    episode = data.draw(with_flops(_finite_losses(episode), start_at_zero=False))
    first, last, horizon = episode[0], episode[-1], len(episode)
    expected = (_gap(last, lm) - _gap(first, lm)
                - compute_cost * (_excess_share(last, horizon) - _excess_share(first, horizon))
                - DEFAULT_GOVERNOR_DEATH_PENALTY * sum(rollbacks))
    config = GapRewardConfig(cost=compute_cost, charge="compute", lm=lm)
    assert math.isclose(_gap_return(episode, ops, rollbacks, config), expected, rel_tol=1e-9, abs_tol=1e-9)


@given(gap_episodes(start_at_zero=True), st.data(), st.booleans(), st.floats(0.0, 10.0), st.floats(0.0, 10.0))
def test_compute_charged_return_from_a_seedless_start_is_the_gap_at_equal_compute(
    drawn: tuple[list[Measurement], list[LifecycleOp], list[bool]], data: st.DataObject, lm: bool,
    compute_cost: float, param_cost: float,
) -> None:
    """With nothing grown before the first decision the return is exactly g_T − λ_c·(F_env(T)/F_twin(T) − 1); the
    parameter charge's return on the same episode is still g_T − λ_p·p_T − Σc (FLOPs are not its business)."""
    episode, ops, _ = drawn
    episode = data.draw(with_flops(_finite_losses(episode), start_at_zero=True))
    no_rollbacks = [False] * len(ops)
    last = episode[-1]
    assert last.twin_train_flops is not None
    objective = _gap(last, lm) - compute_cost * (last.train_flops / last.twin_train_flops - 1.0)
    got = _gap_return(episode, ops, no_rollbacks, GapRewardConfig(cost=compute_cost, charge="compute", lm=lm))
    assert math.isclose(got, objective, rel_tol=1e-9, abs_tol=1e-9)
    param = _gap(last, lm) - param_cost * last.param_ratio + math.fsum(INTERVENTION_COSTS[op] for op in ops)
    got = _gap_return(episode, ops, no_rollbacks, GapRewardConfig(cost=param_cost, lm=lm))
    assert math.isclose(got, param, rel_tol=1e-12, abs_tol=1e-9)


@given(step_records(), st.integers(1, 10**9), st.integers(1, 10**9))
def test_a_twin_whose_epochs_cost_differently_is_refused(rec: StepRecord, per_epoch: int, change: int) -> None:
    """D must be one number for the whole episode, or the charges would not telescope."""
    config = GapRewardConfig(cost=1.0, charge="compute")
    steady = dataclasses.replace(rec, before=dataclasses.replace(rec.before, twin_train_flops=per_epoch * rec.epoch),
                                 after=dataclasses.replace(rec.after, twin_train_flops=per_epoch * (rec.epoch + 1)))
    assert math.isfinite(compute_reward(steady, config, GAMMA).rent)
    changed = dataclasses.replace(steady, after=dataclasses.replace(
        steady.after, twin_train_flops=per_epoch * (rec.epoch + 1) + change))
    with pytest.raises(ValueError, match="must cost the same"):
        compute_reward(changed, config, GAMMA)
    with pytest.raises(ValueError, match="live twin"):
        compute_reward(rec, config, GAMMA)  # drawn without FLOPs: as a stored twin's measurements


# --- potential-based shaping: policy-invariant in every family ----------------------------------------------------


@st.composite
def episodes(draw: st.DrawFn) -> list[StepRecord]:
    """The records of one episode: random measurements (random lifecycle snapshots) and valid random commands."""
    horizon = draw(st.integers(2, 20))
    ms = [draw(measurements(e)) for e in range(1, horizon + 1)]
    return [StepRecord(epoch=e, max_epochs=horizon, command=draw(st.sampled_from(_commands(dict(ms[e - 1].slots)))),
                       action_success=True, before=ms[e - 1], after=ms[e], rollback=draw(st.booleans()))
            for e in range(1, horizon)]


@given(episodes(), families, st.floats(0.5, 1.0))
def test_discounted_shaping_of_an_episode_is_minus_the_first_potential(
    records: list[StepRecord], family: RewardFamily, gamma: float
) -> None:
    """Σ_e γ^(e−1)·F_e = −w·Φ(S_1) because Φ(terminal) = 0: shaping never changes which policy is best."""
    shaping = math.fsum(gamma ** (rec.epoch - 1) * _reward(rec, family, gamma).pbrs for rec in records)
    phi_1 = lifecycle_potential(records[0].before.snapshot)
    assert math.isclose(shaping, -PBRS_WEIGHTS[family] * phi_1, rel_tol=1e-6, abs_tol=1e-6)
    for rec in records:  # the logged potentials are the records' own
        comp = _reward(rec, family, gamma)
        assert comp.phi_prev == lifecycle_potential(rec.before.snapshot)
        assert comp.phi_next == (0.0 if rec.is_terminal else lifecycle_potential(rec.after.snapshot))


def _germinated(after: Measurement, slot: str, age: int, params: int) -> Measurement:
    fresh = SlotRewardInfo(int(SeedStage.TRAINING), age, age, 0.0, None, after.val_accuracy, False)
    slots = {**after.slots, slot: fresh}
    return dataclasses.replace(after, slots=slots, snapshot=_snapshot(slots),
                               seed_param_counts=(*after.seed_param_counts, (age, params)))


@given(st.data(), families, st.floats(0.5, 1.0), st.integers(0, 1), st.integers(1, 10**6))
def test_a_germination_at_the_last_decision_never_pays(
    data: st.DataObject, family: RewardFamily, gamma: float, age: int, params: int
) -> None:
    """No family pays shaping for a seed that can never be measured; the germination is worth less than WAIT."""
    before = data.draw(measurements(MAX_EPOCHS - 1))
    empty = [s for s, i in before.slots.items() if i is None]
    if not empty:
        slots = {**before.slots, "mid": None}
        before = dataclasses.replace(before, slots=slots, snapshot=_snapshot(slots))
        empty = ["mid"]
    slot = data.draw(st.sampled_from(empty))
    outcome = data.draw(measurements(MAX_EPOCHS, {**before.slots, slot: None}))
    germinate = LifecycleCommand(LifecycleOp.GERMINATE, slot, "norm", "sigmoid")

    def reward(command: LifecycleCommand, after: Measurement) -> Any:
        rec = StepRecord(epoch=MAX_EPOCHS - 1, max_epochs=MAX_EPOCHS, command=command, action_success=True,
                         before=before, after=after, rollback=False)
        assert rec.is_terminal
        return _reward(rec, family, gamma)

    grown = reward(germinate, _germinated(outcome, slot, age, params))
    waited = reward(WAIT, outcome)
    assert grown.pbrs <= 0.0 and grown.action_shaping <= 0.0 and grown.proxy == 0.0
    assert grown.pbrs + grown.action_shaping <= waited.pbrs + waited.action_shaping
    assert grown.total() <= waited.total()
