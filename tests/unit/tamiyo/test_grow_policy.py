"""The `grow:` rule: the modules of its spec, each germinated at the first chance and fossilized at the first, every
decision valid; and the single-module variants best-rule is chosen from."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from esper.evaluation.selection import rule_candidates
from esper.leyline import LifecycleCommand, LifecycleOp, SeedStage, SeedStateReport
from esper.tamiyo import CONTROLLERS, GROW, ControllerContext, GrowPolicy, check_decision, host_variant
from esper.tamiyo.grow import GROW_BLEND
from unit.tamiyo.helpers import make_obs, make_report, space_of

ALL = ("early", "mid", "late")
LIVE_OR_FOSSILIZED = [SeedStage.GERMINATED, SeedStage.TRAINING, SeedStage.BLENDING, SeedStage.PROBATIONARY,
                      SeedStage.FOSSILIZED]


def _build(text: str, topology: str = "cnn", slots: tuple[str, ...] = ALL) -> GrowPolicy:
    policy = CONTROLLERS.build(text, ControllerContext(space=space_of(topology), slots=slots))
    assert isinstance(policy, GrowPolicy)
    return policy


def _decide(policy: GrowPolicy, *reports: SeedStateReport, **obs_options: Any) -> LifecycleCommand:
    obs = make_obs(reports, **obs_options)
    decision = policy.decide(obs)
    check_decision(decision, obs)
    return decision.command


def test_a_spec_is_parsed_like_fixed_and_named_grow() -> None:
    policy = _build("grow:attention@late, norm@early")
    assert policy.modules == (("early", "norm"), ("late", "attention"))
    assert policy.label == "grow:norm@early,attention@late"
    assert host_variant(policy) == (1.0, ())  # it grows on the plain host, unlike fixed:
    with pytest.raises(ValueError, match=r"'grow:norm': 'norm' is not BLUEPRINT@SLOT.*e\.g\. grow:norm@early"):
        _build("grow:norm")
    with pytest.raises(ValueError, match="slot 'late' is not enabled in this run"):
        _build("grow:norm@late", slots=("early", "mid"))
    with pytest.raises(ValueError, match=r"needs an argument: grow:BLUEPRINT@SLOT"):
        CONTROLLERS.parse(GROW)


def test_it_germinates_its_module_at_the_first_chance_then_waits_then_fossilizes_at_the_first() -> None:
    policy = _build("grow:norm@early")
    assert _decide(policy, epoch=0) == LifecycleCommand(LifecycleOp.GERMINATE, "early", "norm", GROW_BLEND)
    for stage in (SeedStage.TRAINING, SeedStage.BLENDING, SeedStage.PROBATIONARY):
        report = make_report("early", stage, blueprint_id="norm", counterfactual=0.0)
        assert _decide(policy, report).op == LifecycleOp.WAIT, stage  # never culls, fossilizes only when allowed
    ready = make_report("early", SeedStage.PROBATIONARY, blueprint_id="norm", counterfactual=2.0)
    assert _decide(policy, ready) == LifecycleCommand(LifecycleOp.FOSSILIZE, "early")
    fossilized = make_report("early", SeedStage.FOSSILIZED, blueprint_id="norm")
    assert _decide(policy, fossilized).op == LifecycleOp.WAIT
    # another controller's seed elsewhere is none of its business; the seed budget closes germination
    other = make_report("mid", SeedStage.PROBATIONARY, counterfactual=2.0)
    assert _decide(policy, other).op == LifecycleOp.GERMINATE
    assert _decide(policy, other, max_seeds=1).op == LifecycleOp.WAIT


def test_fossilizing_one_module_comes_before_germinating_the_next() -> None:
    policy = _build("grow:norm@early,attention@late")
    ready = make_report("early", SeedStage.PROBATIONARY, blueprint_id="norm", counterfactual=2.0)
    assert _decide(policy, ready).op == LifecycleOp.FOSSILIZE
    training = make_report("early", SeedStage.TRAINING, blueprint_id="norm")
    assert _decide(policy, training) == LifecycleCommand(LifecycleOp.GERMINATE, "late", "attention", GROW_BLEND)


def test_it_refuses_an_observation_of_another_topology() -> None:
    with pytest.raises(ValueError, match="built for 'transformer'"):
        _build("grow:lora@early", "transformer").decide(make_obs())


@given(st.lists(st.sampled_from(ALL), unique=True, min_size=1),
       st.dictionaries(st.sampled_from(ALL), st.sampled_from(LIVE_OR_FOSSILIZED), max_size=3),
       st.booleans(), st.integers(0, 3))
def test_every_decision_is_valid_whatever_the_slots_hold(slots: list[str], stages: dict[str, SeedStage],
                                                         ready: bool, max_seeds: int) -> None:
    policy = _build("grow:" + ",".join(f"norm@{s}" for s in slots))
    reports = [make_report(s, stage, counterfactual=2.0 if ready else 0.0) for s, stage in stages.items()]
    command = _decide(policy, *reports, max_seeds=max_seeds)
    if command.op != LifecycleOp.WAIT:
        assert command.slot_id in slots


def test_best_rule_is_chosen_among_the_behaviour_presets_and_every_single_module_grow_rule() -> None:
    rules = rule_candidates(space_of("cnn"), ("early", "late"))
    grown = [r for r in rules if r.startswith("grow:")]
    blueprints = ("conv_light", "attention", "norm", "depthwise")
    assert grown == [f"grow:{b}@{s}" for b in blueprints for s in ("early", "late")]
    assert "behavior:random" not in rules and any(r.startswith("behavior:") for r in rules)
    assert [_build(r, slots=("early", "late")).label for r in grown] == grown
