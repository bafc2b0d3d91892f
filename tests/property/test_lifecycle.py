"""Random operation sequences through a SeedSlot never leave the lifecycle contract."""

from __future__ import annotations

import hypothesis.strategies as st
from hypothesis import given, settings

from esper.kasmina.slot import SeedSlot
from esper.kasmina.state import LifecycleConfig
from esper.leyline import VALID_TRANSITIONS, SeedStage, TelemetryEvent, TelemetryEventType

OPERATIONS = st.lists(
    st.one_of(
        st.tuples(st.just("germinate"), st.sampled_from(["conv_light", "norm", "attention", "depthwise"]),
                  st.sampled_from(["linear", "sigmoid", "gated"])),
        st.tuples(st.just("record"), st.floats(0.0, 100.0)),
        st.tuples(st.just("ratio"), st.floats(0.0, 1.0)),
        st.tuples(st.just("counterfactual"), st.one_of(st.none(), st.floats(-5.0, 5.0))),
        st.tuples(st.just("step")),
        st.tuples(st.just("fossilize")),
        st.tuples(st.just("cull")),
    ),
    min_size=1,
    max_size=60,
)


@settings(max_examples=60, deadline=None)
@given(OPERATIONS)
def test_random_sequences_respect_transitions_and_alpha(ops: list[tuple]) -> None:  # type: ignore[type-arg]
    events: list[TelemetryEvent] = []
    slot = SeedSlot("mid", 8, "cnn", lifecycle=LifecycleConfig(), on_event=events.append)
    epoch = 0
    for op in ops:
        epoch += 1
        kind = op[0]
        if kind == "germinate" and slot.state is None:
            slot.germinate(op[1], f"s{epoch}", blend_id=op[2], device="cpu", baseline_accuracy=50.0,
                           host_param_count=1000, epoch=epoch)
        elif kind == "record":
            slot.record_accuracy(op[1])
        elif kind == "ratio":
            slot.update_gradient_ratio(op[1])
        elif kind == "counterfactual" and slot.state is not None and slot.state.alpha > 0:
            slot.set_counterfactual(op[1])
        elif kind == "step":
            slot.step_epoch(epoch)
        elif kind == "fossilize":
            slot.fossilize(epoch)
        elif kind == "cull":
            slot.cull("test", epoch)
        state = slot.state
        if state is None:
            assert slot.seed is None and slot.gate is None
            continue
        assert slot.seed is not None
        assert 0.0 <= state.alpha <= 1.0
        if state.stage in (SeedStage.GERMINATED, SeedStage.TRAINING):
            assert state.alpha == 0.0
        if state.stage in (SeedStage.PROBATIONARY, SeedStage.FOSSILIZED):
            assert state.alpha == 1.0
        assert (state.blend_id == "gated") == (slot.gate is not None)
    for event in events:
        if event.event_type == TelemetryEventType.SEED_STAGE_CHANGED:
            before, after = SeedStage[event.data["from"]], SeedStage[event.data["to"]]
            assert after in VALID_TRANSITIONS[before], (before, after)
