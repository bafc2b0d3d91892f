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
`germinate=BLUEPRINT@SLOT/BLEND`, `fossilize=SLOT` or `cull=SLOT`.
"""

from __future__ import annotations

from esper.leyline import BLEND_IDS, EnvObservation, LifecycleCommand, LifecycleOp
from esper.leyline.errors import UserInputError
from esper.tamiyo.fixed import host_variant, parse_fixed_modules
from esper.tamiyo.grow import GROW_BLEND
from esper.tamiyo.protocol import TamiyoDecision, TamiyoPolicy
from esper.tamiyo.registry import CONTROLLERS, ControllerContext, register_controller

__all__ = ["DEVIATE", "DeviatingPolicy", "deviation_spec", "parse_action"]

DEVIATE = "deviate"
_USAGE = ("deviate:EPOCH:ACTION:TEACHER, ACTION one of wait, germinate=BLUEPRINT@SLOT[/BLEND], fossilize=SLOT, "
          "cull=SLOT (e.g. deviate:5:germinate=conv_light@mid:grow:conv_light@late)")
_SLOT_OPS = {"fossilize": LifecycleOp.FOSSILIZE, "cull": LifecycleOp.CULL}


def deviation_spec(epoch: int, action: str, teacher: str) -> str:
    """The controller text of `teacher` overruled by `action` at `epoch`."""
    return f"{DEVIATE}:{epoch}:{action}:{teacher}"


def parse_action(text: str, context: ControllerContext) -> LifecycleCommand:
    """ACTION as the command it executes; an unknown op, blueprint, slot or blend is refused naming the fix."""
    op, sep, target = text.partition("=")
    if op == "wait" and not sep:
        return LifecycleCommand(LifecycleOp.WAIT)
    if op == "germinate" and target:
        module, _, blend = target.partition("/")
        ((slot, blueprint),) = parse_fixed_modules(module, context.space, context.slots, kind=f"{DEVIATE} germinate")
        blend = blend or GROW_BLEND
        if blend not in BLEND_IDS:
            raise UserInputError(f"'{DEVIATE}' action '{text}': unknown blend '{blend}'; choose one of "
                                 f"{', '.join(BLEND_IDS)}")
        return LifecycleCommand(LifecycleOp.GERMINATE, slot, blueprint, blend)
    if op in _SLOT_OPS and target:
        if target not in context.slots:
            raise UserInputError(f"'{DEVIATE}' action '{text}': slot '{target}' is not enabled in this run; choose "
                                 f"one of {', '.join(context.slots)}")
        return LifecycleCommand(_SLOT_OPS[op], target)
    raise UserInputError(f"'{DEVIATE}' action '{text}' is not an action: write {_USAGE}")


class DeviatingPolicy:
    """TEACHER everywhere but one epoch, then the deviation's own module finished at the first chance.

    The teacher decides at every epoch, the overruled one included, so its per-episode state (embargoes, a rotation,
    a random stream) advances exactly as in the teacher's own episode; until the overruled epoch the two episodes
    are the same bit for bit. Where the action is illegal at that epoch, or is the teacher's own choice, the episode
    stays the teacher's throughout (`deviated` stays False).
    """

    name = DEVIATE

    def __init__(self, epoch: int, command: LifecycleCommand, teacher: TamiyoPolicy, label: str) -> None:
        self.epoch = epoch
        self.command = command
        self.teacher = teacher
        self.label = label
        self.deviated = False
        self.finishing: str | None = None  # the slot of the module the deviation germinated, until it is fossilized

    def decide(self, obs: EnvObservation) -> TamiyoDecision:
        chosen = self.teacher.decide(obs)
        if obs.epoch == self.epoch and chosen.command != self.command and obs.validity.is_valid_command(self.command):
            self.deviated = True
            if self.command.op == LifecycleOp.GERMINATE:
                self.finishing = self.command.slot_id
            return self._decision(obs, self.command, f"Deviate from {self.teacher.name} at epoch {self.epoch}")
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

    def _decision(self, obs: EnvObservation, command: LifecycleCommand, reason: str) -> TamiyoDecision:
        return TamiyoDecision.from_command(command, space=obs.action_space, reason=reason, confidence=1.0,
                                           info={"deviated": self.deviated})


@register_controller(DEVIATE, argument="EPOCH:ACTION:TEACHER",
                     summary="a controller that needs no training, overruled by one action at one epoch")
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
    if teacher_spec.split(":", 1)[0] == DEVIATE:
        raise UserInputError(f"'{DEVIATE}:{argument}': its teacher is itself a deviation; overrule a controller at "
                             f"one epoch only")
    teacher = CONTROLLERS.build(teacher_spec, context)
    if host_variant(teacher) != (1.0, ()):
        raise UserInputError(f"'{DEVIATE}:{argument}': {teacher_spec} does not grow the plain host (a fixed or "
                             f"widened network), so no deviation of it is a growth decision; deviate from a "
                             f"controller that starts from the plain host")
    return DeviatingPolicy(epoch, command, teacher, f"{DEVIATE}:{argument}")

