"""Behaviour policies: rule-based controllers with ε-greedy exploration that log exactly how likely each action was.

Offline RL reweights logged data by the behaviour policy's probabilities, so the probabilities logged here are the
ones the actions were actually drawn with. Each valid op gets a score (invalid ops are excluded, never scored); the
greedy policy is softmax(scores / temperature) over the valid ops, and each op has one greedy target (slot,
blueprint, blend). With probability ε the whole factored action is drawn uniformly instead (op, then slot, then for
GERMINATE blueprint and blend). The joint probability of the executed factored action is therefore

    (1 − ε)·π_greedy(op)·[targets are the greedy ones] + ε·(1/|ops|)·(1/|slots|)·(1/|blueprints|)·(1/|blends|)

(the blueprint and blend factors only for GERMINATE, the slot factor not for WAIT).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from esper.datagen.configs import OP_TIE_ORDER, ActionProbabilities, BehaviorPolicyConfig
from esper.leyline import (
    ActionSpace,
    BlendAction,
    EnvObservation,
    FactoredAction,
    LifecycleOp,
    SeedStateReport,
    SlotAction,
)
from esper.leyline.errors import UserInputError
from esper.leyline.seeding import derive_seed
from esper.tamiyo import ControllerContext, TamiyoDecision, register_controller

__all__ = ["BehaviorPolicy", "DecisionAnalysis", "create_policy", "parse_behavior_spec"]

_UNSCORED = -10.0  # an op whose rule does not fire
_PREFERRED_BLEND = BlendAction.SIGMOID
_NOOP = 0  # the noop blueprint's head index: the placeholder of every non-GERMINATE action
_WAIT_ACTION = FactoredAction(SlotAction.EARLY, _NOOP, BlendAction.LINEAR, LifecycleOp.WAIT)


def _slot_action(op: LifecycleOp, slot: SlotAction) -> FactoredAction:
    return FactoredAction(slot, _NOOP, BlendAction.LINEAR, op)


@dataclass(frozen=True)
class DecisionAnalysis:
    """Everything a decision's distribution depends on, computed once per observation (no randomness)."""

    ops: tuple[LifecycleOp, ...]  # valid ops, in LifecycleOp order
    scores: dict[LifecycleOp, float]
    greedy_probs: dict[LifecycleOp, float]
    greedy_targets: dict[LifecycleOp, FactoredAction]
    slots: dict[LifecycleOp, tuple[SlotAction, ...]]  # valid slots per non-WAIT valid op
    blueprints: dict[SlotAction, tuple[int, ...]]  # valid blueprint head indices per germinable slot
    blends: tuple[BlendAction, ...]
    epsilon: float

    def exploration_prob(self, action: FactoredAction) -> float:
        """Probability of `action` under the uniform dependent draw (0 when the draw cannot produce it)."""
        if action.op not in self.ops:
            return 0.0
        p = 1.0 / len(self.ops)
        if action.op == LifecycleOp.WAIT:
            return p if action == _WAIT_ACTION else 0.0
        slots = self.slots[action.op]
        if action.slot not in slots:
            return 0.0
        p /= len(slots)
        if action.op != LifecycleOp.GERMINATE:
            return p if action == _slot_action(action.op, action.slot) else 0.0
        blueprints = self.blueprints[action.slot]
        if action.blueprint not in blueprints or action.blend not in self.blends:
            return 0.0
        return p / (len(blueprints) * len(self.blends))

    def joint_prob(self, action: FactoredAction) -> float:
        """Behaviour probability of one factored action (0 for invalid ones)."""
        greedy = self.greedy_probs[action.op] if action == self.greedy_targets.get(action.op) else 0.0
        return (1.0 - self.epsilon) * greedy + self.epsilon * self.exploration_prob(action)

    def op_probabilities(self, sampled: LifecycleOp, *, explored: bool) -> ActionProbabilities:
        return ActionProbabilities.from_decision(
            {op.name: p for op, p in self.greedy_probs.items()}, sampled.name, self.epsilon, was_exploratory=explored
        )


def _softmax(scores: dict[LifecycleOp, float], temperature: float) -> dict[LifecycleOp, float]:
    top = max(scores.values())
    weights = {op: math.exp((s - top) / temperature) for op, s in scores.items()}
    total = sum(weights.values())
    return {op: w / total for op, w in weights.items()}


class BehaviorPolicy:
    """A datagen behaviour policy (implements tamiyo's controller protocol) for one action space.

    Its randomness comes from its own `random.Random`, so it is reproducible from its seed and never touches the
    global RNG. Keep one instance per environment: the blueprint rotation is per-episode state.
    """

    def __init__(self, config: BehaviorPolicyConfig, seed: int = 0, *, space: ActionSpace) -> None:
        head = space.head[1:]
        preference = config.blueprint_preference if config.blueprint_preference is not None else head[:1]
        outside = [b for b in preference if b not in head]
        if outside:
            raise UserInputError(
                f"Behaviour policy '{config.policy_id}' prefers {outside}, which are not {space.topology} head "
                f"blueprints {list(head)}; use head blueprints so every action has a joint index"
            )
        self.config = config
        self.space = space
        self.topology = space.topology
        self._preference = tuple(space.head.index(b) for b in preference)
        self._rng = random.Random(seed)
        self._rotation = 0

    @property
    def name(self) -> str:
        return f"behavior:{self.config.policy_id}"

    # -- distribution ------------------------------------------------------------------------------------------

    def analyse(self, obs: EnvObservation) -> DecisionAnalysis:
        """Scores, greedy targets and the exploration support of `obs` (pure: no state changes)."""
        if obs.topology != self.topology:
            raise ValueError(f"Behaviour policy built for '{self.topology}' got a '{obs.topology}' observation")
        validity = obs.validity
        ops = tuple(op for op in LifecycleOp if validity.op[op])
        slots: dict[LifecycleOp, tuple[SlotAction, ...]] = {
            op: tuple(s for s in SlotAction if validity.op_slot[op][s]) for op in ops if op != LifecycleOp.WAIT
        }
        germinable = slots.get(LifecycleOp.GERMINATE, ())
        blueprints = {s: tuple(b for b, ok in enumerate(validity.slot_blueprint[s]) if ok) for s in germinable}
        blends = tuple(b for b in BlendAction if validity.blend[b])
        scores: dict[LifecycleOp, float] = {}
        targets: dict[LifecycleOp, FactoredAction] = {}
        for op, (score, target) in self._score_ops(obs, slots, blueprints, blends).items():
            scores[op], targets[op] = score, target
        others_negative = all(s < 0 for s in scores.values())
        scores[LifecycleOp.WAIT], targets[LifecycleOp.WAIT] = (2.0 if others_negative else 0.0), _WAIT_ACTION
        ordered = {op: scores[op] for op in ops}
        return DecisionAnalysis(
            ops=ops,
            scores=ordered,
            greedy_probs=_softmax(ordered, self.config.temperature),
            greedy_targets={op: targets[op] for op in ops},
            slots=slots,
            blueprints=blueprints,
            blends=blends,
            epsilon=self.config.epsilon,
        )

    def _score_ops(
        self,
        obs: EnvObservation,
        slots: dict[LifecycleOp, tuple[SlotAction, ...]],
        blueprints: dict[SlotAction, tuple[int, ...]],
        blends: tuple[BlendAction, ...],
    ) -> dict[LifecycleOp, tuple[float, FactoredAction]]:
        """Score and greedy target of every valid non-WAIT op."""
        scored: dict[LifecycleOp, tuple[float, FactoredAction]] = {}
        if LifecycleOp.GERMINATE in slots:
            slot = slots[LifecycleOp.GERMINATE][0]  # the first free slot in canonical order
            blend = _PREFERRED_BLEND if _PREFERRED_BLEND in blends else blends[0]
            target = FactoredAction(slot, self._preferred_blueprint(blueprints[slot]), blend, LifecycleOp.GERMINATE)
            scored[LifecycleOp.GERMINATE] = (self._germinate_score(obs), target)
        if LifecycleOp.FOSSILIZE in slots:
            scored[LifecycleOp.FOSSILIZE] = self._fossilize_choice(obs, slots[LifecycleOp.FOSSILIZE])
        if LifecycleOp.CULL in slots:
            scored[LifecycleOp.CULL] = self._cull_choice(obs, slots[LifecycleOp.CULL])
        return scored

    def _preferred_blueprint(self, valid: tuple[int, ...]) -> int:
        """The next preferred blueprint in rotation that the slot accepts, else the slot's first valid one."""
        n = len(self._preference)
        for k in range(n):
            candidate = self._preference[(self._rotation + k) % n]
            if candidate in valid:
                return candidate
        return valid[0]

    def _germinate_score(self, obs: EnvObservation) -> float:
        cfg, epoch = self.config, obs.epoch
        plateau = obs.signals.metrics.plateau_epochs
        ripe = epoch >= cfg.min_epochs_before_germinate and plateau >= cfg.plateau_epochs_to_germinate
        fires = {"threshold": ripe, "inverted": not ripe, "periodic": epoch % cfg.germinate_period == 0}
        return 5.0 + 0.5 * plateau if fires[cfg.strategy] else _UNSCORED

    def _fossilize_choice(self, obs: EnvObservation, slots: tuple[SlotAction, ...]) -> tuple[float, FactoredAction]:
        best = max(slots, key=lambda s: (_improvement(obs, s), -int(s)))
        score = _UNSCORED if self.config.strategy == "inverted" else 3.0 + _improvement(obs, best)
        return score, _slot_action(LifecycleOp.FOSSILIZE, best)

    def _cull_choice(self, obs: EnvObservation, slots: tuple[SlotAction, ...]) -> tuple[float, FactoredAction]:
        """Threshold: the worst seed stuck for `cull_after` epochs without improvement; inverted: the most helpful."""
        cfg = self.config
        target: SlotAction | None = None
        if cfg.strategy == "threshold":
            stuck = [
                s for s in slots
                if _epochs_in_stage(obs, s) >= cfg.cull_after_epochs_without_improvement and _improvement(obs, s) <= 0
            ]
            target = min(stuck, key=lambda s: (_improvement(obs, s), int(s)), default=None)
        elif cfg.strategy == "inverted":
            helpful = [s for s in slots if _improvement(obs, s) > 0]
            target = min(helpful, key=lambda s: (-_improvement(obs, s), int(s)), default=None)
        if target is None:
            return _UNSCORED, _slot_action(LifecycleOp.CULL, slots[0])
        return 4.0 + 0.3 * _epochs_in_stage(obs, target), _slot_action(LifecycleOp.CULL, target)

    # -- decision ----------------------------------------------------------------------------------------------

    def decide(self, obs: EnvObservation) -> TamiyoDecision:
        analysis = self.analyse(obs)
        explored = self._rng.random() < analysis.epsilon
        action = self._explore(analysis) if explored else self._exploit(analysis)
        p = analysis.joint_prob(action)
        if action.is_germinate and action.blueprint in self._preference:
            # The rotation moves on whenever a preferred blueprint is planted, whichever branch chose it.
            self._rotation = (self._preference.index(action.blueprint) + 1) % len(self._preference)
        probabilities = analysis.op_probabilities(action.op, explored=explored)
        command = action.to_command(self.space)
        branch = "explore" if explored else f"score {analysis.scores[action.op]:+.2f}"
        return TamiyoDecision(
            command=command,
            factored=action,
            reason=f"{self.config.policy_id}: {command.describe()} ({branch})",
            confidence=p,
            info={
                "action_probabilities": probabilities.to_dict(),
                "joint_behavior_prob": p,
                "joint_behavior_logp": math.log(p),
                "joint_index": self.space.joint_index(action),
            },
        )

    def _exploit(self, analysis: DecisionAnalysis) -> FactoredAction:
        u, cumulative = self._rng.random(), 0.0
        for op in analysis.ops:
            cumulative += analysis.greedy_probs[op]
            if u < cumulative:
                return analysis.greedy_targets[op]
        # Rounding can leave the cumulative sum a hair below 1: fall back to the most probable op.
        best = min(analysis.ops, key=lambda op: (-analysis.greedy_probs[op], OP_TIE_ORDER.index(op.name)))
        return analysis.greedy_targets[best]

    def _explore(self, analysis: DecisionAnalysis) -> FactoredAction:
        op = self._rng.choice(analysis.ops)
        if op == LifecycleOp.WAIT:
            return _WAIT_ACTION
        slot = self._rng.choice(analysis.slots[op])
        if op != LifecycleOp.GERMINATE:
            return _slot_action(op, slot)
        blueprint = self._rng.choice(analysis.blueprints[slot])
        return FactoredAction(slot, blueprint, self._rng.choice(analysis.blends), op)


def _report(obs: EnvObservation, slot: SlotAction) -> SeedStateReport | None:
    return obs.slot_reports.get(slot.to_slot_id())


def _improvement(obs: EnvObservation, slot: SlotAction) -> float:
    """The seed's counterfactual contribution when measured, else its improvement since its stage began."""
    report = _report(obs, slot)
    return 0.0 if report is None else report.improvement


def _epochs_in_stage(obs: EnvObservation, slot: SlotAction) -> int:
    report = _report(obs, slot)
    return 0 if report is None else report.metrics.epochs_in_current_stage


def create_policy(preset_id: str, epsilon: float | None = None, *, seed: int = 0, space: ActionSpace) -> BehaviorPolicy:
    """A behaviour policy from a preset, optionally as its ε-greedy variant (`{preset}-eps{ε}`)."""
    config = BehaviorPolicyConfig.from_preset(preset_id)
    if epsilon is not None:
        config = config.with_epsilon(epsilon)
    return BehaviorPolicy(config, seed, space=space)


_EPS_MARK = "-eps"


def parse_behavior_spec(argument: str) -> tuple[str, float | None]:
    """`PRESET` or `PRESET-epsE` (e.g. `aggressive`, `baseline-eps0.2`) → (preset id, ε or None)."""
    preset, mark, tail = argument.rpartition(_EPS_MARK)
    if not mark:
        return argument, None
    try:
        epsilon = float(tail)
    except ValueError:
        raise UserInputError(f"Cannot read ε from '{argument}': write PRESET-epsE, e.g. baseline-eps0.2") from None
    if not 0.0 <= epsilon <= 1.0:
        raise UserInputError(f"ε must be in [0, 1], got {epsilon} in '{argument}'")
    return preset, epsilon


@register_controller(
    "behavior",
    argument="PRESET[-epsE]",
    summary="a datagen behaviour policy preset, optionally ε-greedy (behavior:aggressive, behavior:baseline-eps0.2)",
)
def _behavior(argument: str | None, context: ControllerContext) -> BehaviorPolicy:
    if argument is None:
        raise UserInputError("behavior needs a preset: behavior:PRESET[-epsE]")
    preset, epsilon = parse_behavior_spec(argument)
    seed = derive_seed(context.seed, "controller", context.index)
    return create_policy(preset, epsilon, seed=seed, space=context.space)
