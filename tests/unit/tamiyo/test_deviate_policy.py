"""`deviate:EPOCH:ACTION:TEACHER`: the teacher's decision at every epoch but one, the action there, the module it
germinated fossilized at the first chance, every decision valid; bad specs refused naming the fix."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from esper.leyline import EnvObservation, LifecycleCommand, LifecycleOp, SeedStage, SeedStateReport
from esper.tamiyo import (
    CONTROLLERS,
    ControllerContext,
    DeviatingPolicy,
    GrowPolicy,
    TamiyoDecision,
    check_decision,
    deviation_spec,
)
from esper.tamiyo.grow import GROW_BLEND
from unit.tamiyo.helpers import make_obs, make_report, space_of

ALL = ("early", "mid", "late")
TEACHER = "grow:norm@late"


def _build(text: str, max_epochs: int | None = 25) -> DeviatingPolicy:
    policy = CONTROLLERS.build(text, ControllerContext(space=space_of("cnn"), slots=ALL, max_epochs=max_epochs))
    assert isinstance(policy, DeviatingPolicy)
    return policy


def _decide(policy: Any, *reports: SeedStateReport, epoch: int) -> LifecycleCommand:
    obs = make_obs(reports, epoch=epoch)
    decision = policy.decide(obs)
    check_decision(decision, obs)
    command: LifecycleCommand = decision.command
    return command


def test_before_and_after_its_epoch_it_decides_as_its_teacher() -> None:
    policy = _build(deviation_spec(3, "wait", TEACHER))
    teacher = CONTROLLERS.build(TEACHER, ControllerContext(space=space_of("cnn"), slots=ALL))
    for epoch in (0, 1, 2, 4, 5):
        assert _decide(policy, epoch=epoch) == _decide(teacher, epoch=epoch)
    assert not policy.deviated
    assert _decide(policy, epoch=3) == LifecycleCommand(LifecycleOp.WAIT)  # the teacher would germinate
    assert policy.deviated


def test_the_module_it_germinates_is_fossilized_at_the_first_chance() -> None:
    policy = _build(deviation_spec(2, "germinate=attention@mid/linear", TEACHER))
    late = make_report("late", SeedStage.TRAINING, blueprint_id="norm")
    assert _decide(policy, late, epoch=2) == LifecycleCommand(LifecycleOp.GERMINATE, "mid", "attention", "linear")
    training = make_report("mid", SeedStage.TRAINING, blueprint_id="attention")
    assert _decide(policy, late, training, epoch=3).op == LifecycleOp.WAIT  # not yet fossilizable: the teacher's
    ready = make_report("mid", SeedStage.PROBATIONARY, blueprint_id="attention", counterfactual=2.0)
    ready_late = make_report("late", SeedStage.PROBATIONARY, blueprint_id="norm", counterfactual=2.0)
    assert _decide(policy, ready_late, ready, epoch=9) == LifecycleCommand(LifecycleOp.FOSSILIZE, "mid")
    assert _decide(policy, ready_late, epoch=10) == LifecycleCommand(LifecycleOp.FOSSILIZE, "late")  # teacher's own


def test_a_culled_deviation_module_is_let_go() -> None:
    policy = _build(deviation_spec(1, "germinate=conv_light@early", TEACHER))
    assert _decide(policy, epoch=1) == LifecycleCommand(LifecycleOp.GERMINATE, "early", "conv_light", GROW_BLEND)
    assert _decide(policy, epoch=2).op == LifecycleOp.GERMINATE  # the env culled it: the teacher germinates late
    ready = make_report("early", SeedStage.PROBATIONARY, counterfactual=2.0)  # a later seed there is not its own
    assert _decide(policy, ready, make_report("late", SeedStage.TRAINING), epoch=3).op == LifecycleOp.WAIT


def test_an_illegal_action_or_the_teachers_own_leaves_the_episode_the_teachers() -> None:
    policy = _build(deviation_spec(4, "fossilize=mid", TEACHER))  # nothing in mid to fossilize
    assert _decide(policy, epoch=4) == LifecycleCommand(LifecycleOp.GERMINATE, "late", "norm", GROW_BLEND)
    own = _build(deviation_spec(4, "germinate=norm@late", TEACHER))
    assert _decide(own, epoch=4).op == LifecycleOp.GERMINATE
    assert not policy.deviated and not own.deviated


class _Counting:
    """A teacher that counts the observations it was asked about (a stand-in: the registry builds only teachers that
    decide from the observation alone)."""

    name = "counting"

    def __init__(self) -> None:
        self.seen: list[int] = []

    def decide(self, obs: EnvObservation) -> TamiyoDecision:
        self.seen.append(obs.epoch)
        return TamiyoDecision.from_command(LifecycleCommand(LifecycleOp.WAIT), space=obs.action_space,
                                           reason="count", confidence=1.0)


def test_the_teacher_decides_at_the_overruled_epoch_too_so_its_state_advances_as_in_its_own_episode() -> None:
    teacher = _Counting()
    policy = DeviatingPolicy(1, LifecycleCommand(LifecycleOp.GERMINATE, "mid", "norm", GROW_BLEND), teacher)
    for epoch in range(3):
        policy.decide(make_obs(epoch=epoch))
    assert teacher.seen == [0, 1, 2]


@pytest.mark.parametrize(("spec", "message"), [
    ("deviate:3:wait", "is not deviate:EPOCH:ACTION:TEACHER"),
    ("deviate:x:wait:grow:norm@late", "EPOCH 'x' is not a whole number"),
    ("deviate:25:wait:grow:norm@late", "EPOCH 25 is no decision's epoch: .* from 1 to 24"),
    ("deviate:0:wait:grow:norm@late", "EPOCH 0 is no decision's epoch"),
    ("deviate:3:jump:grow:norm@late", "'jump' is not an action"),
    ("deviate:3:germinate=norm:grow:norm@late", r"germinate one module, germinate=BLUEPRINT@SLOT\[/BLEND\]"),
    ("deviate:3:germinate=norm@mid,norm@early:grow:norm@late", "germinate one module"),
    ("deviate:3:germinate=norm@mid/:grow:norm@late", "germinate one module"),
    ("deviate:3:germinate=nothing@mid:grow:norm@late", "unknown blueprint 'nothing' for topology 'cnn'"),
    ("deviate:3:germinate=norm@mid/spiral:grow:norm@late", "unknown blend 'spiral'"),
    ("deviate:3:cull=top:grow:norm@late", "slot 'top' is not enabled"),
    ("deviate:3:wait:fixed:norm@late", "is not a grow: rule or static"),
    ("deviate:3:wait:heuristic", "is not a grow: rule or static, the controllers that decide from the observation"),
    ("deviate:3:wait:random", "is not a grow: rule or static"),
    ("deviate:3:wait:behavior:baseline", "is not a grow: rule or static"),
    ("deviate:3:wait:static:2", "is a widened host"),
    ("deviate:3:wait:deviate:2:wait:grow:norm@late", "is not a grow: rule or static"),
    ("deviate:3:wait:grow:nothing@late", "unknown blueprint 'nothing'"),
])
def test_a_bad_spec_is_refused_naming_the_fix(spec: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        _build(spec)


def test_its_state_carries_the_module_it_is_finishing_over_a_resume() -> None:
    policy = _build(deviation_spec(2, "germinate=attention@mid", TEACHER))
    _decide(policy, epoch=2)
    resumed = _build(deviation_spec(2, "germinate=attention@mid", TEACHER))
    resumed.load_state_dict(policy.state_dict())
    ready = make_report("mid", SeedStage.PROBATIONARY, blueprint_id="attention", counterfactual=2.0)
    assert _decide(resumed, ready, epoch=8) == LifecycleCommand(LifecycleOp.FOSSILIZE, "mid")
    assert resumed.deviated


def test_a_deviation_of_the_static_host_is_a_growth_rule() -> None:
    policy = _build(deviation_spec(2, "germinate=norm@early", "static"))
    assert _decide(policy, epoch=1).op == LifecycleOp.WAIT
    assert _decide(policy, epoch=2) == LifecycleCommand(LifecycleOp.GERMINATE, "early", "norm", GROW_BLEND)


ACTIONS = ["wait", "germinate=norm@early", "germinate=attention@mid/gated", "fossilize=late", "cull=late",
           "cull=early", "fossilize=mid"]


@given(st.integers(1, 5), st.sampled_from(ACTIONS),
       st.lists(st.dictionaries(st.sampled_from(ALL), st.sampled_from(
           [SeedStage.TRAINING, SeedStage.BLENDING, SeedStage.PROBATIONARY, SeedStage.FOSSILIZED]), max_size=3),
           min_size=6, max_size=6),
       st.booleans())
def test_every_decision_is_valid_and_the_teachers_except_at_its_epoch_or_to_finish_its_module(
        epoch: int, action: str, histories: list[dict[str, SeedStage]], ready: bool) -> None:
    policy = _build(deviation_spec(epoch, action, "grow:norm@late,conv_light@mid"))
    teacher = CONTROLLERS.build("grow:norm@late,conv_light@mid", ControllerContext(space=space_of("cnn"), slots=ALL))
    assert isinstance(teacher, GrowPolicy)
    for t, stages in enumerate(histories):
        reports = [make_report(s, stage, counterfactual=2.0 if ready else 0.0) for s, stage in stages.items()]
        finishing = policy.finishing
        command = _decide(policy, *reports, epoch=t)
        if command != _decide(teacher, *reports, epoch=t):
            assert t == epoch or (command.op == LifecycleOp.FOSSILIZE and command.slot_id == finishing)
