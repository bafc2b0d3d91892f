"""The `deviate:` controller: a controller that needs no training, overruled at exactly one epoch.

`deviate:EPOCH:ACTION:TEACHER` decides as TEACHER at every epoch except EPOCH, where it takes ACTION (if ACTION is legal
there and is not what TEACHER chose). Controllers decide after each epoch but the last, so EPOCH runs from 1. Run beside
its teacher on the same paired seeds, the return difference of the pair is Q(s, a) − Q(s, π_T(s)) on that seed: the
exact value of overruling the teacher once, with no critic and no seed noise in it. Such a pair is how to measure
whether a teacher leaves room for a learned policy to improve on it, before spending a training budget on finding out.

A module the deviation germinates is fossilized at the first epoch the lifecycle allows (as `grow:` does), so a
germination is measured as a finished module rather than as a seed that a teacher which never planned it leaves to
be culled at the end of its probation.

ACTION is `wait`, `germinate=BLUEPRINT@SLOT` (in the blend `grow:` uses) or
`germinate=BLUEPRINT@SLOT/BLEND`, `fossilize=SLOT` or `cull=SLOT`. TEACHER is a `grow:` rule or `static`: a
controller that decides from the observation alone. One with a memory of its own decisions (the heuristic's
embargoes and rotation) would remember, after the overruled epoch, a decision that was never carried out, and one
with a random stream would draw another stream than its own episode's; either way the pair would measure more than
one overruled decision.
"""

from __future__ import annotations

from typing import Any

from esper.leyline import BLEND_IDS, EnvObservation, LifecycleCommand, LifecycleOp
from esper.leyline.errors import UserInputError, did_you_mean
from esper.tamiyo.grow import GROW, GROW_BLEND
from esper.tamiyo.policy import StaticPolicy
from esper.tamiyo.protocol import TamiyoDecision, TamiyoPolicy
from esper.tamiyo.registry import CONTROLLERS, ControllerContext, register_controller

__all__ = ["DEVIATE", "DeviatingPolicy", "deviation_spec", "parse_action"]

DEVIATE = "deviate"
DEVIATION_REASON = "Deviate from"
"""How a deviation's decision at its epoch begins its reason, so a run's steps say where it took place."""
_USAGE = ("deviate:EPOCH:ACTION:TEACHER, ACTION one of wait, germinate=BLUEPRINT@SLOT[/BLEND], fossilize=SLOT, "
          "cull=SLOT (e.g. deviate:5:germinate=conv_light@mid:grow:conv_light@late)")
_SLOT_OPS = {"fossilize": LifecycleOp.FOSSILIZE, "cull": LifecycleOp.CULL}
_TEACHERS = (StaticPolicy.name, GROW)
"""Controllers that decide from the observation alone: the teachers a deviation can overrule exactly once."""


def deviation_spec(epoch: int, action: str, teacher: str) -> str:
    """The controller text of `teacher` overruled by `action` at `epoch`."""
    return f"{DEVIATE}:{epoch}:{action}:{teacher}"


def _slot(text: str, slot: str, context: ControllerContext) -> str:
    if slot not in context.slots:
        raise UserInputError(f"'{DEVIATE}' action '{text}': slot '{slot}' is not enabled in this run; choose one of "
                             f"{', '.join(context.slots)}")
    return slot


def parse_action(text: str, context: ControllerContext) -> LifecycleCommand:
    """ACTION as the command it executes; an unknown op, blueprint, slot or blend is refused naming the fix."""
    op, sep, target = text.partition("=")
    if op == "wait" and not sep:
        return LifecycleCommand(LifecycleOp.WAIT)
    if op == "germinate" and target:
        module, has_blend, blend = target.partition("/")
        blueprint, at, slot = module.partition("@")
        if not blueprint or not at or not slot or "," in module or (has_blend and not blend):
            raise UserInputError(f"'{DEVIATE}' action '{text}': germinate one module, "
                                 f"germinate=BLUEPRINT@SLOT[/BLEND] (e.g. germinate=conv_light@mid/linear)")
        if blueprint not in context.space.buildable:
            raise UserInputError(f"'{DEVIATE}' action '{text}': unknown blueprint '{blueprint}'"
                                 f"{did_you_mean(blueprint, context.space.buildable)} for topology "
                                 f"'{context.topology}'; choose one of {', '.join(context.space.buildable)}")
        if (blend or GROW_BLEND) not in BLEND_IDS:
            raise UserInputError(f"'{DEVIATE}' action '{text}': unknown blend '{blend}'; choose one of "
                                 f"{', '.join(BLEND_IDS)}")
        return LifecycleCommand(LifecycleOp.GERMINATE, _slot(text, slot, context), blueprint, blend or GROW_BLEND)
    if op in _SLOT_OPS and target:
        return LifecycleCommand(_SLOT_OPS[op], _slot(text, target, context))
    raise UserInputError(f"'{DEVIATE}' action '{text}' is not an action: write {_USAGE}")


class DeviatingPolicy:
    """TEACHER everywhere but one epoch, then the deviation's own module finished at the first chance.

    The teacher decides from each observation alone, so until the overruled epoch the two episodes are the same bit
    for bit, and after it the teacher decides as it would in any episode that reached that state. Where the action
    is illegal at that epoch, or is the teacher's own choice, the episode stays the teacher's throughout (`deviated`
    stays False).
    """

    name = DEVIATE

    def __init__(self, epoch: int, command: LifecycleCommand, teacher: TamiyoPolicy) -> None:
        self.epoch = epoch
        self.command = command
        self.teacher = teacher
        self.deviated = False
        self.finishing: str | None = None  # the slot of the module the deviation germinated, until it is fossilized

    def decide(self, obs: EnvObservation) -> TamiyoDecision:
        chosen = self.teacher.decide(obs)
        if obs.epoch == self.epoch and chosen.command != self.command and obs.validity.is_valid_command(self.command):
            self.deviated = True
            if self.command.op == LifecycleOp.GERMINATE:
                self.finishing = self.command.slot_id
            return self._decision(obs, self.command, f"{DEVIATION_REASON} {self.teacher.name} at epoch {self.epoch}")
        if self.finishing is not None:
            if self.finishing not in obs.slot_reports:  # culled (by the env's safety rules or the teacher)
                self.finishing = None
            else:
                fossilize = LifecycleCommand(LifecycleOp.FOSSILIZE, self.finishing)
                if obs.validity.is_valid_command(fossilize):
                    self.finishing = None
                    return self._decision(obs, fossilize, "Deviate: fossilize the deviation's module at the first "
                                                          "chance")
        return chosen

    def state_dict(self) -> dict[str, Any]:
        """Whether it deviated and the module it is finishing: a run resumed mid-episode finishes that module."""
        return {"deviated": self.deviated, "finishing": self.finishing}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.deviated, self.finishing = bool(state["deviated"]), state["finishing"]

    @staticmethod
    def _decision(obs: EnvObservation, command: LifecycleCommand, reason: str) -> TamiyoDecision:
        return TamiyoDecision.from_command(command, space=obs.action_space, reason=reason, confidence=1.0)


@register_controller(DEVIATE, argument="EPOCH:ACTION:TEACHER",
                     summary="a grow: rule or static, overruled by one action at one epoch")
def _deviate(argument: str | None, context: ControllerContext) -> DeviatingPolicy:
    assert argument is not None  # the registry rejects `deviate` without an argument
    parts = argument.split(":", 2)
    if len(parts) != 3 or not all(parts):
        raise UserInputError(f"'{DEVIATE}:{argument}' is not {_USAGE}")
    epoch_text, action, teacher_spec = parts
    try:
        epoch = int(epoch_text)
    except ValueError:
        raise UserInputError(f"'{DEVIATE}:{argument}': EPOCH '{epoch_text}' is not a whole number of epochs") from None
    if epoch < 1 or (context.max_epochs is not None and epoch >= context.max_epochs):
        bound = "" if context.max_epochs is None else f" to {context.max_epochs - 1} (the episode's last decision)"
        raise UserInputError(f"'{DEVIATE}:{argument}': EPOCH {epoch} is no decision's epoch: controllers decide after "
                             f"each epoch but the last, so give an epoch from 1{bound}")
    command = parse_action(action, context)
    if teacher_spec.split(":", 1)[0] not in _TEACHERS:
        raise UserInputError(f"'{DEVIATE}:{argument}': its teacher {teacher_spec} is not a grow: rule or static, the "
                             f"controllers that decide from the observation alone, so the pair would measure more "
                             f"than one overruled decision; overrule one of those")
    teacher = CONTROLLERS.build(teacher_spec, context)
    if isinstance(teacher, StaticPolicy) and teacher.host_width != 1.0:
        raise UserInputError(f"'{DEVIATE}:{argument}': {teacher_spec} is a widened host, and deviations grow the plain "
                             f"host: overrule static or a grow: rule")
    return DeviatingPolicy(epoch, command, teacher)
