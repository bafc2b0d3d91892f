"""The two trivial controllers: static (the host alone, optionally widened) and random."""

from __future__ import annotations

import random
from typing import Any

from esper.leyline import (
    BlendAction,
    EnvObservation,
    FactoredAction,
    LifecycleCommand,
    LifecycleOp,
    SlotAction,
)
from esper.leyline.errors import UserInputError
from esper.leyline.seeding import derive_seed
from esper.tamiyo.protocol import TamiyoDecision
from esper.tamiyo.registry import ControllerContext, register_controller

__all__ = ["MATCHED", "MAX_HOST_WIDTH", "RandomPolicy", "StaticPolicy"]


_WAIT = LifecycleCommand(LifecycleOp.WAIT)
MAX_HOST_WIDTH = 8.0
MATCHED = "matched"


class StaticPolicy:
    """Always WAIT: the host-only baseline, on a host whose widths are multiplied by `host_width`.

    A widened static host is the baseline growth must beat at equal parameters: better than static may otherwise
    only mean "more parameters".
    """

    name = "static"

    def __init__(self, host_width: float = 1.0) -> None:
        if not 0.0 < host_width <= MAX_HOST_WIDTH:
            raise UserInputError(f"A static host width must be in (0, {MAX_HOST_WIDTH}], got {host_width}")
        self.host_width = host_width

    def decide(self, obs: EnvObservation) -> TamiyoDecision:
        return TamiyoDecision.from_command(
            _WAIT, space=obs.action_space, reason="Static policy: host only", confidence=1.0
        )


@register_controller("static", argument=f"WIDTH|{MATCHED}", optional=True,
                     summary="always WAIT, on the host (or one widened by WIDTH, or param-matched to the grown ones)")
def _static(argument: str | None, context: ControllerContext) -> StaticPolicy:
    if argument is None:
        return StaticPolicy()
    if argument == MATCHED:
        raise UserInputError("static:matched gets its width from the other controllers: resolve it in a comparison")
    try:
        width = float(argument)
    except ValueError:
        raise UserInputError(f"static:{argument}: WIDTH must be a number (e.g. static:1.5) or '{MATCHED}'") from None
    return StaticPolicy(width)


class RandomPolicy:
    """Uniform dependent sampling over valid actions (op, then slot, then blueprint and blend for GERMINATE).

    It draws from its own `random.Random`, so it is deterministic given its seed and never touches global RNG state.
    The probability of the sampled action is reported as `confidence` and `info["behavior_prob"]`.
    """

    name = "random"

    def __init__(self, seed: int = 0) -> None:
        self._rng = random.Random(seed)

    def state_dict(self) -> dict[str, Any]:
        """Where the random stream is (plain values)."""
        version, internal, gauss = self._rng.getstate()
        return {"version": version, "internal": list(internal), "gauss": gauss}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._rng.setstate((state["version"], tuple(state["internal"]), state["gauss"]))

    def decide(self, obs: EnvObservation) -> TamiyoDecision:
        validity = obs.validity
        ops = [op for op in LifecycleOp if validity.op[op]]
        op = self._rng.choice(ops)
        prob = 1.0 / len(ops)
        if op == LifecycleOp.WAIT:
            return TamiyoDecision.from_command(
                _WAIT, space=obs.action_space, reason="Random: WAIT", confidence=prob, info={"behavior_prob": prob}
            )
        slots = [s for s in SlotAction if validity.op_slot[op][s]]
        slot = self._rng.choice(slots)
        prob /= len(slots)
        blueprint, blend = 0, BlendAction.LINEAR
        if op == LifecycleOp.GERMINATE:
            blueprints = [b for b, ok in enumerate(validity.slot_blueprint[slot]) if ok]
            blends = [b for b in BlendAction if validity.blend[b]]
            blueprint, blend = self._rng.choice(blueprints), self._rng.choice(blends)
            prob /= len(blueprints) * len(blends)
        factored = FactoredAction(slot=slot, blueprint=blueprint, blend=blend, op=op)
        command = factored.to_command(obs.action_space)
        return TamiyoDecision(command, factored, f"Random: {command.describe()}", prob, {"behavior_prob": prob})


@register_controller("random", summary="uniform over the valid actions (its own seeded stream per episode)")
def _random(argument: str | None, context: ControllerContext) -> RandomPolicy:
    return RandomPolicy(derive_seed(context.seed, "controller", context.index))
