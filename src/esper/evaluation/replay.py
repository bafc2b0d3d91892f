"""`replay:RUN`, the open-loop control of a learned policy: its most frequent action at each epoch, replayed blind.

A policy that reads its observations should beat a schedule that ignores them. `replay:RUN` takes the run directory
of a comparison in which the policy ran on some paired seeds (a study's `replay-source/run-<r>/`, or any
`esper compare` run of one controller), or a directory of such run directories (a family study's
`replay-source/run-<r>/`: one per training type), and builds the schedule: for each epoch, the action (op, slot,
blueprint, blend) the policy took most often at that epoch over those episodes (ties go to the action seen first).
Replayed on other seeds, an action the env does not allow at that moment (a slot already occupied, a seed not ready
to fossilize) becomes WAIT. A policy that does not beat its replay has learned a schedule, not a controller.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from esper.env.logs import StepRow
from esper.leyline import EnvObservation, LifecycleCommand, LifecycleOp
from esper.leyline.errors import UserInputError
from esper.storage.rows import read_rows
from esper.tamiyo import ControllerContext, TamiyoDecision, register_controller

__all__ = ["REPLAY", "ReplayPolicy", "replay_schedule"]

REPLAY = "replay"

Action = tuple[str, str | None, str | None, str | None]
"""(op, slot, blueprint, blend) as steps.jsonl logs them."""


def _command(action: Action) -> LifecycleCommand:
    op, slot, blueprint, blend = action
    return LifecycleCommand(LifecycleOp[op], slot, blueprint, blend)


def replay_schedule(rows: Sequence[StepRow]) -> dict[int, LifecycleCommand]:
    """Epoch → the command taken most often at that epoch over the rows' episodes (the first seen wins a tie)."""
    controllers = sorted({r.controller for r in rows})
    if len(controllers) > 1:
        raise UserInputError(f"a replay source must hold one controller's episodes, found {controllers}: run "
                             f"esper compare with that controller alone on the seeds to replay")
    by_epoch: dict[int, Counter[Action]] = {}
    for r in rows:
        by_epoch.setdefault(r.epoch, Counter())[(r.op, r.slot, r.blueprint, r.blend)] += 1
    return {epoch: _command(counts.most_common(1)[0][0]) for epoch, counts in sorted(by_epoch.items())}


@dataclass
class ReplayPolicy:
    """Takes its schedule's command at each epoch when the env allows it, else WAIT; never looks at anything else."""

    schedule: Mapping[int, LifecycleCommand]
    source: str
    name: str = REPLAY

    def decide(self, obs: EnvObservation) -> TamiyoDecision:
        command = self.schedule.get(obs.epoch, LifecycleCommand(LifecycleOp.WAIT))
        if command.op != LifecycleOp.WAIT and not obs.validity.is_valid_command(command):
            return TamiyoDecision.from_command(LifecycleCommand(LifecycleOp.WAIT), space=obs.action_space,
                                               reason=f"Replay: {command.describe()} not allowed now", confidence=1.0)
        return TamiyoDecision.from_command(command, space=obs.action_space, reason=f"Replay of {self.source}",
                                           confidence=1.0)


def _steps_files(path: Path) -> list[Path]:
    """A run directory's steps.jsonl, a steps.jsonl itself, or those of the run directories a directory holds (a
    family study's replay source: one per training type)."""
    if not path.is_dir():
        return [path]
    if (path / StepRow.FILE).is_file():
        return [path / StepRow.FILE]
    return sorted(path.glob(f"*/{StepRow.FILE}"))


def load_replay(path: Path, context: ControllerContext) -> ReplayPolicy:
    """The replay of the policy whose episodes `path` (a run directory, its steps.jsonl, or a directory of run
    directories) holds."""
    rows = [row for steps in _steps_files(path) for row in read_rows(steps, StepRow)]
    if not rows:
        raise UserInputError(f"replay:{path}: no {StepRow.FILE} with decisions there; name the run directory of an "
                             f"esper compare run of the policy to replay")
    last = max(r.epoch for r in rows) + 1
    if context.max_epochs is not None and last != context.max_epochs:
        raise UserInputError(f"replay:{path} holds {last}-epoch episodes, not {context.max_epochs}: replay it in "
                             f"episodes of its own length (--max-epochs {last})")
    return ReplayPolicy(replay_schedule(rows), str(path))


@register_controller(REPLAY, argument="RUN", summary="a policy's most frequent action per epoch in RUN, replayed open "
                                                     "loop (a masked action becomes WAIT)")
def _replay(argument: str | None, context: ControllerContext) -> ReplayPolicy:
    assert argument is not None  # the registry rejects `replay` without a run
    return load_replay(Path(argument), context)
