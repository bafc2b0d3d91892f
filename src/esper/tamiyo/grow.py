"""The `grow:` rule: grow given modules at the first chance the lifecycle allows, the grown twin of `fixed:`.

`fixed:norm@early` has the module from epoch 0; `grow:norm@early` germinates the same module in the same slot at the
first epoch GERMINATE is valid there and fossilizes it at the first epoch FOSSILIZE is, never culling it. No
controller can give that module an earlier lifecycle, so the gap between the two is what growing a module costs
over building it in. Its single-module variants are scripted rules, so a study's best-rule is chosen among them too.
"""

from __future__ import annotations

from collections.abc import Sequence

from esper.leyline import ActionSpace, EnvObservation, LifecycleCommand, LifecycleOp
from esper.tamiyo.fixed import FixedModules, fixed_spec, parse_fixed_modules
from esper.tamiyo.heuristic import HeuristicPolicyConfig
from esper.tamiyo.protocol import TamiyoDecision
from esper.tamiyo.registry import ControllerContext, register_controller

__all__ = ["GROW", "GROW_BLEND", "GrowPolicy"]

GROW = "grow"
GROW_BLEND = HeuristicPolicyConfig().blend_id
"""The heuristic's blend, so `grow:` and the heuristic differ only in what they grow and when."""


class GrowPolicy:
    """Each epoch: FOSSILIZE the first of its modules that may be fossilized, else GERMINATE the first of its
    modules whose slot is empty and open, else WAIT. A module the env culls (its safety rules) is germinated again."""

    name = GROW

    def __init__(self, argument: str, *, space: ActionSpace, slots: Sequence[str]) -> None:
        self.topology = space.topology
        self.modules: FixedModules = parse_fixed_modules(argument, space, slots, kind=GROW)
        self.label = fixed_spec(self.modules, kind=GROW)

    def decide(self, obs: EnvObservation) -> TamiyoDecision:
        if obs.topology != self.topology:
            raise ValueError(f"{self.label} was built for '{self.topology}', got a '{obs.topology}' observation")
        for slot, _ in self.modules:
            fossilize = LifecycleCommand(LifecycleOp.FOSSILIZE, slot)
            if slot in obs.slot_reports and obs.validity.is_valid_command(fossilize):
                return self._decision(obs, fossilize, f"Grow: fossilize {slot} at the first chance")
        for slot, blueprint in self.modules:
            germinate = LifecycleCommand(LifecycleOp.GERMINATE, slot, blueprint, GROW_BLEND)
            if slot not in obs.slot_reports and obs.validity.is_valid_command(germinate):
                return self._decision(obs, germinate, f"Grow: germinate {blueprint} in {slot} at the first chance")
        return self._decision(obs, LifecycleCommand(LifecycleOp.WAIT), f"Grow: {self.label} under way")

    @staticmethod
    def _decision(obs: EnvObservation, command: LifecycleCommand, reason: str) -> TamiyoDecision:
        return TamiyoDecision.from_command(command, space=obs.action_space, reason=reason, confidence=1.0)


@register_controller(GROW, argument="BLUEPRINT@SLOT[,...]",
                     summary="germinate those blueprint modules at the first chance and fossilize them at the first")
def _grow(argument: str | None, context: ControllerContext) -> GrowPolicy:
    assert argument is not None  # the registry rejects `grow` without modules
    return GrowPolicy(argument, space=context.space, slots=context.slots)
