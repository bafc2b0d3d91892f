"""The `fixed:` baseline: the host with blueprint modules built in from epoch 0, trained exactly like `static`.

A growth result must beat simply building the right module in from the start. `fixed:BLUEPRINT@SLOT[,...]` is that
network; `fixed_variants` lists every single-module candidate and `module_extensions` every one-module-larger
variant of a spec, for searching the best one. The controller only
WAITs: the modules belong to the host its env builds, which `host_variant` tells the runner.
"""

from __future__ import annotations

from collections.abc import Sequence

from esper.leyline import (
    CANONICAL_SLOTS,
    NOOP_BLUEPRINT,
    ActionSpace,
    EnvObservation,
    LifecycleCommand,
    LifecycleOp,
    ordered_slots,
)
from esper.leyline.errors import UserInputError, did_you_mean
from esper.tamiyo.policy import StaticPolicy
from esper.tamiyo.protocol import TamiyoDecision, TamiyoPolicy
from esper.tamiyo.registry import ControllerContext, register_controller

__all__ = ["FIXED", "FixedModules", "FixedPolicy", "fixed_spec", "fixed_variants", "host_variant",
           "module_extensions", "parse_fixed_modules"]

FIXED = "fixed"
FixedModules = tuple[tuple[str, str], ...]
"""(slot, blueprint) pairs in canonical slot order."""


def _example(kind: str) -> str:
    return f"e.g. {kind}:norm@early or {kind}:conv_light@mid,attention@late"


def _searched(space: ActionSpace) -> tuple[str, ...]:
    """The blueprints a search for the best fixed network (or `grow:` rule) tries: those a policy can choose (the
    head's, less noop), so a search's candidates are networks a learned controller could have grown."""
    return space.head[1:]


def fixed_spec(modules: FixedModules, kind: str = FIXED) -> str:
    """The canonical controller text of `modules`: `fixed:BLUEPRINT@SLOT,...` (or `grow:...`) in slot order."""
    return f"{kind}:" + ",".join(f"{blueprint}@{slot}" for slot, blueprint in modules)


def parse_fixed_modules(argument: str, space: ActionSpace, slots: Sequence[str], kind: str = FIXED) -> FixedModules:
    """`BLUEPRINT@SLOT[,BLUEPRINT@SLOT...]` as (slot, blueprint) pairs in canonical slot order.

    Every blueprint registered for the topology (a plugin's included) and the run's enabled slots are accepted; each
    error names the problem and what to write instead. `kind` is the controller the argument belongs to (`fixed` or
    `grow`), for the messages.
    """
    where = f"'{kind}:{argument}'"
    topology, blueprints = space.topology, space.buildable
    pairs: dict[str, str] = {}
    for item in argument.split(","):
        blueprint, at, slot = item.strip().partition("@")
        if not at or not blueprint or not slot or "@" in slot:
            raise UserInputError(f"{where}: '{item}' is not BLUEPRINT@SLOT; write one BLUEPRINT@SLOT per module, "
                                 f"separated by commas ({_example(kind)})")
        if blueprint not in blueprints:
            hint = (" (noop builds nothing: use static)" if blueprint == NOOP_BLUEPRINT
                    else " (a plugin's blueprint needs --plugin MODULE)")
            raise UserInputError(f"{where}: unknown blueprint '{blueprint}'{did_you_mean(blueprint, blueprints)} "
                                 f"for topology '{topology}'{hint}; "
                                 f"choose one of {', '.join(blueprints)}")
        if slot not in slots:
            problem = (f"slot '{slot}' is not enabled in this run" if slot in CANONICAL_SLOTS
                       else f"unknown slot '{slot}'")
            raise UserInputError(f"{where}: {problem}; choose one of the enabled slots: {', '.join(slots)}")
        if slot in pairs:
            raise UserInputError(f"{where}: slot '{slot}' is given twice ({pairs[slot]} and {blueprint}); "
                                 "a slot holds one module, so name each slot once")
        pairs[slot] = blueprint
    return tuple((s, pairs[s]) for s in CANONICAL_SLOTS if s in pairs)


def fixed_variants(space: ActionSpace, slots: Sequence[str], kind: str = FIXED) -> list[str]:
    """Every single-module spec (each head blueprint of `space` at each enabled slot), for a best-fixed baseline
    (or, with `kind="grow"`, the rules best-rule is chosen from)."""
    return [fixed_spec(((slot, blueprint),), kind) for blueprint in _searched(space)
            for slot in ordered_slots(slots)]


def module_extensions(spec: str, space: ActionSpace, slots: Sequence[str]) -> list[str]:
    """Every spec of `spec`'s kind with one module more (each head blueprint at each enabled slot `spec` leaves
    free): the next step of a greedy search for the best fixed architecture or `grow:` rule."""
    kind, _, argument = spec.partition(":")
    modules = parse_fixed_modules(argument, space, slots, kind)
    taken = {slot for slot, _ in modules}
    return [fixed_spec(tuple(sorted((*modules, (slot, blueprint)), key=lambda m: CANONICAL_SLOTS.index(m[0]))), kind)
            for blueprint in _searched(space) for slot in ordered_slots(slots) if slot not in taken]


class FixedPolicy:
    """Always WAIT, on a host with `fixed_modules` built in as ordinary layers from epoch 0.

    Everything else is `static`'s (host optimizer, data, schedule), so comparing against growth isolates what growing
    a module buys over having it from the start.
    """

    name = FIXED

    def __init__(self, argument: str, *, space: ActionSpace, slots: Sequence[str]) -> None:
        self.topology = space.topology
        self.fixed_modules: FixedModules = parse_fixed_modules(argument, space, slots)
        self.label = fixed_spec(self.fixed_modules)

    def decide(self, obs: EnvObservation) -> TamiyoDecision:
        if obs.topology != self.topology:
            raise ValueError(f"{self.label} was built for '{self.topology}', got a '{obs.topology}' observation")
        return TamiyoDecision.from_command(LifecycleCommand(LifecycleOp.WAIT), space=obs.action_space,
                                           reason=f"Fixed: {self.label} built in", confidence=1.0)


@register_controller(FIXED, argument="BLUEPRINT@SLOT[,...]",
                     summary="always WAIT, on the host with those blueprint modules built in from the start")
def _fixed(argument: str | None, context: ControllerContext) -> FixedPolicy:
    assert argument is not None  # the registry rejects `fixed` without modules
    return FixedPolicy(argument, space=context.space, slots=context.slots)


def host_variant(controller: TamiyoPolicy) -> tuple[float, FixedModules]:
    """The host an env must build for `controller`: (width multiplier, fixed modules) for `EnvSpec`'s `host_width`
    and `fixed_modules`; (1.0, ()) is the plain host every growing controller starts from."""
    if isinstance(controller, StaticPolicy):
        return controller.host_width, ()
    if isinstance(controller, FixedPolicy):
        return 1.0, controller.fixed_modules
    return 1.0, ()
