"""A real training run on `synthetic` with a scripted controller (the documented stage lengths).

One seed goes GERMINATED -> TRAINING -> BLENDING -> PROBATIONARY -> FOSSILIZED; another is never fossilized and is
culled automatically by Kasmina (probation timeout or non-positive counterfactual).
"""

from __future__ import annotations

import torch

from esper.data.tasks import DataCache, DataOptions, get_task_spec
from esper.env import EnvStep, EpochData, run_episodes
from esper.env.env import EnvSpec, MorphoEnv
from esper.env.rewards import make_reward_fn
from esper.leyline import EnvObservation, LifecycleCommand, LifecycleOp, SeedStage, TelemetryEvent, TelemetryEventType
from esper.tamiyo import TamiyoDecision


class ScriptedPolicy:
    """Germinate mid at epoch 2 and late at epoch 3; fossilize mid as soon as it may; never touch late again."""

    name = "scripted"

    def decide(self, obs: EnvObservation) -> TamiyoDecision:
        cmd = LifecycleCommand(LifecycleOp.WAIT)
        if obs.epoch == 2:
            cmd = LifecycleCommand(LifecycleOp.GERMINATE, "mid", "conv_light", "linear")
        elif obs.epoch == 3:
            cmd = LifecycleCommand(LifecycleOp.GERMINATE, "late", "norm", "sigmoid")
        elif "mid" in obs.validity.valid_slots(LifecycleOp.FOSSILIZE):
            cmd = LifecycleCommand(LifecycleOp.FOSSILIZE, "mid")
        return TamiyoDecision.from_command(cmd, space=obs.action_space, reason="script", confidence=1.0)


class CullRecorder:
    """A telemetry sink that keeps (slot, reason, epoch) of every cull."""

    def __init__(self) -> None:
        self.culls: list[tuple[str, str, int]] = []

    def wants(self, event_type: TelemetryEventType) -> bool:
        return event_type == TelemetryEventType.SEED_CULLED

    def emit(self, event: TelemetryEvent) -> None:
        assert event.slot_id is not None and event.epoch is not None
        self.culls.append((event.slot_id, event.data["reason"], event.epoch))

    def escalate(self, epochs: int) -> None:
        """Escalation is irrelevant here."""

    def tick(self) -> None:
        """Ticks are irrelevant here."""


def test_real_run_takes_one_seed_to_fossilized_and_culls_another() -> None:
    task = get_task_spec("synthetic")
    device = torch.device("cpu")
    data = EpochData.build(task, DataCache(DataOptions()), [device], batch_size=128, seed=3,
                           max_train_samples=1024, max_val_samples=512)
    recorder = CullRecorder()
    env = MorphoEnv(EnvSpec(task, ("early", "mid", "late"), 25, env_seed=11, device=device, sink=recorder),
                    "scripted")
    histories: dict[str, list[tuple[SeedStage, int]]] = {}

    def on_step(steps: list[EnvStep]) -> None:
        for s in env.model.slots():
            if s.state is not None:
                histories[s.slot_id] = list(s.state.stage_history)
        # alpha used by the forward is exactly the state's alpha, and within [0, 1]
        for s in env.model.slots():
            if s.state is not None:
                assert 0.0 <= s.state.alpha <= 1.0

    [result] = run_episodes([env], [ScriptedPolicy()], data, make_reward_fn("contribution", task, 0.995),
                            on_step=on_step)

    mid = histories["mid"]
    stages = [stage for stage, _ in mid]
    assert stages == [SeedStage.GERMINATED, SeedStage.TRAINING, SeedStage.BLENDING, SeedStage.PROBATIONARY,
                      SeedStage.FOSSILIZED]
    epochs = dict((stage, epoch) for stage, epoch in mid)
    assert epochs[SeedStage.GERMINATED] == epochs[SeedStage.TRAINING] == 2  # no dwell in GERMINATED
    assert epochs[SeedStage.BLENDING] - epochs[SeedStage.TRAINING] >= task.lifecycle.min_training_epochs
    assert epochs[SeedStage.PROBATIONARY] - epochs[SeedStage.BLENDING] == task.lifecycle.blending_steps
    assert 1 <= epochs[SeedStage.FOSSILIZED] - epochs[SeedStage.PROBATIONARY] <= task.lifecycle.max_probation_epochs
    assert env.model.slot("mid").state is not None and env.model.slot("mid").state.alpha == 1.0  # type: ignore[union-attr]

    assert [(slot, reason) for slot, reason, _ in recorder.culls] in (
        [("late", "probation_timeout")], [("late", "negative_counterfactual")])
    assert env.model.slot("late").state is None
    assert (result.seeds_created, result.seeds_fossilized, result.seeds_culled) == (2, 1, 1)
    assert result.params_added == env.model.seed_param_count_total > 0
