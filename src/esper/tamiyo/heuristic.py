"""HeuristicTamiyo: the rule-based controller that manages every enabled slot.

One action per epoch, by priority: fossilize a proven seed, cull a failing one, germinate, else wait.
It only ever proposes actions that `obs.validity` allows, and only blueprints from its topology's rotation.

Germination is early on purpose. A seed must train, blend and pass probation before it can be fossilized, which takes
most of a short episode, and growing a network while it still learns works better than growing it at a plateau. So,
from `min_epochs_before_germinate` on, the heuristic germinates as soon as the host is learning (a validation loss in
its recent history is below the oldest one) or has stalled on a short plateau (the case growth is meant for), but never
after `latest_germination_epoch`, the last epoch from which a seed can still reach its first chance to fossilize
within the episode. Germinations are `min_epochs_between_germinations` apart so each seed's effect shows on its own.

Early germination is safe because the culls stay strict: a seed is culled on a sustained accuracy drop, on stalling in
TRAINING, or on a non-positive counterfactual in probation; a culled slot is embargoed; a slot holds one live seed.

Culls made by Kasmina on its own (probation timeout, negative counterfactual) are treated like the heuristic's own
culls: a live seed that vanishes from its slot between two decisions embargoes that slot and penalizes its
blueprint exactly as if the heuristic had culled it at the previous decision. The embargo exists to stop
germinate/cull thrash in a slot, which does not depend on who removed the seed. (A governor rollback that drops a
seed germinated after the snapshot is observed the same way, which is the conservative choice.)
"""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import Field, StrictFloat, StrictInt, field_validator

from esper.leyline import (
    BLEND_IDS,
    EnvObservation,
    LifecycleCommand,
    LifecycleOp,
    SeedStage,
    SeedStateReport,
    is_live_stage,
)
from esper.leyline.constants import (
    DEFAULT_BLENDING_TOTAL_STEPS,
    DEFAULT_BLUEPRINT_PENALTY_DECAY,
    DEFAULT_BLUEPRINT_PENALTY_ON_CULL,
    DEFAULT_BLUEPRINT_PENALTY_THRESHOLD,
    DEFAULT_CULL_AFTER_EPOCHS_WITHOUT_IMPROVEMENT,
    DEFAULT_CULL_IF_ACCURACY_DROPS_BY,
    DEFAULT_EMBARGO_EPOCHS_AFTER_CULL,
    DEFAULT_MIN_BLENDING_EPOCHS,
    DEFAULT_MIN_EPOCHS_BEFORE_GERMINATE,
    DEFAULT_MIN_TRAINING_EPOCHS,
    DEFAULT_PLATEAU_EPOCHS_TO_GERMINATE,
    MAX_EPISODE_LENGTH,
    MAX_WEIGHT,
)
from esper.leyline.errors import UserInputError
from esper.leyline.strict_config import EpochCount, PositiveEpochCount, StrictConfig, Weight
from esper.tamiyo.protocol import TamiyoDecision

__all__ = ["DEFAULT_BLUEPRINT_ROTATION", "HeuristicPolicyConfig", "HeuristicTamiyo"]

DEFAULT_BLUEPRINT_ROTATION: dict[str, tuple[str, ...]] = {
    "cnn": ("conv_light", "conv_heavy", "attention", "norm", "depthwise"),
    # On synthetic_text, norm seeds are the ones that pass probation within 25 epochs (mlp and attention end near a
    # zero counterfactual), and a LoRA seed, a zero-output adapter, stalls in TRAINING: norm first, lora last.
    "transformer": ("norm", "mlp", "attention", "lora"),
}
_PENALTY_FLOOR = 0.1  # decayed penalties below this are forgotten


class HeuristicPolicyConfig(StrictConfig):
    """Thresholds of the heuristic. `max_concurrent_seeds` None means one live seed per enabled slot.

    `min_epochs_before_germinate` defaults to 2, the first decision at which the host's loss can have come down.
    `seed_training_epochs` and `seed_blending_epochs` are the fewest epochs a seed spends in TRAINING and BLENDING (the
    task's `min_training_epochs`, at least 1, and the larger of its `blending_steps` and `min_blending_epochs`); with
    the episode length they set the latest useful germination (`HeuristicTamiyo.latest_germination_epoch`). A
    controller sees no lifecycle config, so they default to Kasmina's default lifecycle; a task that trains seeds
    longer (the LM tasks: 5 epochs) needs its own value.
    """

    KIND: ClassVar[str] = "heuristic config"
    min_epochs_before_germinate: EpochCount = DEFAULT_MIN_EPOCHS_BEFORE_GERMINATE
    plateau_epochs_to_germinate: EpochCount = DEFAULT_PLATEAU_EPOCHS_TO_GERMINATE
    min_epochs_between_germinations: EpochCount = 3
    seed_training_epochs: PositiveEpochCount = DEFAULT_MIN_TRAINING_EPOCHS
    seed_blending_epochs: PositiveEpochCount = max(DEFAULT_BLENDING_TOTAL_STEPS, DEFAULT_MIN_BLENDING_EPOCHS)
    cull_after_epochs_without_improvement: PositiveEpochCount = DEFAULT_CULL_AFTER_EPOCHS_WITHOUT_IMPROVEMENT
    cull_if_accuracy_drops_by: StrictFloat = Field(default=DEFAULT_CULL_IF_ACCURACY_DROPS_BY, ge=0.0, le=100.0)
    stall_training_epochs: PositiveEpochCount = 10
    embargo_epochs_after_cull: EpochCount = DEFAULT_EMBARGO_EPOCHS_AFTER_CULL
    max_concurrent_seeds: StrictInt | None = Field(default=None, ge=1, le=MAX_EPISODE_LENGTH)  # 1 germination/epoch
    blend_id: str = "sigmoid"
    blueprint_rotation: dict[str, tuple[str, ...]] = Field(default_factory=lambda: dict(DEFAULT_BLUEPRINT_ROTATION))
    blueprint_penalty_on_cull: StrictFloat = Field(default=DEFAULT_BLUEPRINT_PENALTY_ON_CULL, ge=0.0, le=MAX_WEIGHT)
    blueprint_penalty_decay: StrictFloat = Field(default=DEFAULT_BLUEPRINT_PENALTY_DECAY, gt=0.0, lt=1.0)
    blueprint_penalty_threshold: Weight = DEFAULT_BLUEPRINT_PENALTY_THRESHOLD

    @field_validator("blend_id")
    @classmethod
    def _known_blend(cls, blend_id: str) -> str:
        if blend_id not in BLEND_IDS:
            raise ValueError(f"Unknown blend '{blend_id}'. Available: {list(BLEND_IDS)}")
        return blend_id

    @field_validator("blueprint_rotation")
    @classmethod
    def _usable_rotations(cls, rotations: dict[str, tuple[str, ...]]) -> dict[str, tuple[str, ...]]:
        for topology, rotation in rotations.items():
            if not rotation or len(set(rotation)) != len(rotation) or "noop" in rotation:
                raise ValueError(f"Rotation for '{topology}' must be non-empty, unique and without noop: {rotation}")
        return rotations


class HeuristicTamiyo:
    """Deterministic rule-based controller for one topology; keep one instance per environment."""

    name = "heuristic"

    def __init__(self, config: HeuristicPolicyConfig | None = None, *, topology: str) -> None:
        self.config = config if config is not None else HeuristicPolicyConfig()
        if topology not in self.config.blueprint_rotation:
            raise UserInputError(f"No blueprint rotation configured for topology '{topology}': give "
                                 f"HeuristicPolicyConfig.blueprint_rotation one (configured: "
                                 f"{sorted(self.config.blueprint_rotation)})")
        self.topology = topology
        self._rotation = self.config.blueprint_rotation[topology]
        # Per-episode state (a heuristic is built for one episode): rotation, penalties, embargoes and counters.
        self._rotation_index = 0
        self._penalties: dict[str, float] = {}
        self._cull_epoch: dict[str, int] = {}  # slot -> epoch of its latest cull
        self._last_germination: int | None = None
        self._live: dict[str, tuple[str, str]] = {}  # slot -> (seed_id, blueprint_id) expected at the next decision
        self._live_epoch: int | None = None

    @property
    def penalties(self) -> dict[str, float]:
        """Current blueprint penalties (a copy)."""
        return dict(self._penalties)

    def latest_germination_epoch(self, max_epochs: int) -> int:
        """The last decision epoch whose seed can still be fossilized within an episode of `max_epochs` epochs.

        A seed germinated at decision e is TRAINING at decisions e+1 .. e+`seed_training_epochs`, then BLENDING for
        `seed_blending_epochs` decisions, and first PROBATIONARY (its first chance to fossilize) at the next one,
        which must come no later than the episode's last decision, max_epochs - 1.
        """
        cfg = self.config
        return max_epochs - 2 - cfg.seed_training_epochs - cfg.seed_blending_epochs

    def state_dict(self) -> dict[str, Any]:
        """The per-episode state (rotation, penalties, embargoes, the seeds expected live), in plain values."""
        return {"rotation_index": self._rotation_index, "penalties": dict(self._penalties),
                "cull_epoch": dict(self._cull_epoch), "last_germination": self._last_germination,
                "live": {slot: list(ids) for slot, ids in self._live.items()}, "live_epoch": self._live_epoch}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue an episode from `state_dict`'s values."""
        self._rotation_index = int(state["rotation_index"])
        self._penalties = {str(b): float(p) for b, p in state["penalties"].items()}
        self._cull_epoch = {str(s): int(e) for s, e in state["cull_epoch"].items()}
        self._last_germination = None if state["last_germination"] is None else int(state["last_germination"])
        self._live = {str(s): (str(ids[0]), str(ids[1])) for s, ids in state["live"].items()}
        self._live_epoch = None if state["live_epoch"] is None else int(state["live_epoch"])

    def embargoed_slots(self, epoch: int) -> tuple[str, ...]:
        """Slots closed to germination at `epoch` (culled within the last `embargo_epochs_after_cull` epochs)."""
        limit = self.config.embargo_epochs_after_cull
        return tuple(s for s, culled in self._cull_epoch.items() if epoch - culled <= limit)

    def decide(self, obs: EnvObservation) -> TamiyoDecision:
        if obs.topology != self.topology:
            raise ValueError(f"Heuristic built for '{self.topology}' got a '{obs.topology}' observation")
        self._observe_external_culls(obs)
        decision = self._fossilize(obs) or self._cull(obs) or self._germinate(obs) or self._wait(obs)
        culled = decision.command.slot_id if decision.command.op == LifecycleOp.CULL else None
        self._live = {
            slot: (r.seed_id, r.blueprint_id)
            for slot, r in obs.slot_reports.items()
            if is_live_stage(r.stage) and slot != culled
        }
        self._live_epoch = obs.epoch
        return decision

    # -- bookkeeping -------------------------------------------------------------------------------------------

    def _observe_external_culls(self, obs: EnvObservation) -> None:
        if self._live_epoch is None:
            return
        for slot, (seed_id, blueprint_id) in self._live.items():
            report = obs.slot_reports.get(slot)
            if report is None or report.seed_id != seed_id:
                self._record_cull(slot, blueprint_id, self._live_epoch)

    def _record_cull(self, slot: str, blueprint_id: str, epoch: int) -> None:
        self._cull_epoch[slot] = epoch
        self._penalties[blueprint_id] = self._penalties.get(blueprint_id, 0.0) + self.config.blueprint_penalty_on_cull

    def _decay_penalties(self) -> None:
        """Penalties decay once per germination, so a blueprint culled repeatedly between germinations is skipped.

        (Decaying once per epoch instead, a penalty of 2.0 per cull can never reach the 3.0 threshold at
        a germination decision: the rule would never take effect.)
        """
        decayed = {b: p * self.config.blueprint_penalty_decay for b, p in self._penalties.items()}
        self._penalties = {b: p for b, p in decayed.items() if p >= _PENALTY_FLOOR}

    # -- priorities --------------------------------------------------------------------------------------------

    def _fossilize(self, obs: EnvObservation) -> TamiyoDecision | None:
        ready = [obs.slot_reports[s] for s in obs.validity.valid_slots(LifecycleOp.FOSSILIZE) if s in obs.slot_reports]
        if not ready:
            return None
        best = max(ready, key=lambda r: _contribution(r, missing=float("-inf")))
        c = _contribution(best, missing=float("nan"))
        return self._decision(
            obs, LifecycleCommand(LifecycleOp.FOSSILIZE, best.slot_id),
            f"Fossilizing {best.slot_id} ({best.blueprint_id}): counterfactual {c:+.2f} pp",
        )

    def _cull_rule(self, report: SeedStateReport) -> str | None:
        """Which cull rule a live seed meets, if any: (a) sustained drop, (b) stalled training, (c) harmful."""
        cfg, m = self.config, report.metrics
        eis = m.epochs_in_current_stage
        if (
            report.stage in (SeedStage.TRAINING, SeedStage.BLENDING)
            and eis >= cfg.cull_after_epochs_without_improvement
            and report.improvement < -cfg.cull_if_accuracy_drops_by
        ):
            return f"improvement {report.improvement:+.2f} pp after {eis} epochs in {report.stage.name}"
        if report.stage == SeedStage.TRAINING and eis >= cfg.stall_training_epochs:
            return f"stalled in TRAINING for {eis} epochs"
        c = m.counterfactual_contribution
        if report.stage == SeedStage.PROBATIONARY and c is not None and c <= 0.0:
            return f"counterfactual {c:+.2f} pp in PROBATIONARY"
        return None

    def _cull(self, obs: EnvObservation) -> TamiyoDecision | None:
        reports = [obs.slot_reports[s] for s in obs.validity.valid_slots(LifecycleOp.CULL) if s in obs.slot_reports]
        failing = [(r, rule) for r in reports if (rule := self._cull_rule(r)) is not None]
        if not failing:
            return None
        worst, rule = min(failing, key=lambda item: item[0].improvement)
        self._record_cull(worst.slot_id, worst.blueprint_id, obs.epoch)
        return self._decision(obs, LifecycleCommand(LifecycleOp.CULL, worst.slot_id),
                              f"Culling {worst.slot_id} ({worst.blueprint_id}): {rule}")

    def _germination_trigger(self, obs: EnvObservation) -> str | None:
        """Why the host is ready for a seed at this epoch (see the module docstring), or None."""
        cfg, metrics = self.config, obs.signals.metrics
        if not cfg.min_epochs_before_germinate <= obs.epoch <= self.latest_germination_epoch(obs.max_epochs):
            return None
        losses = obs.signals.loss_history
        if len(losses) > 1 and min(losses[1:]) < losses[0]:
            return f"host learning (val loss {losses[0]:.3f} -> {min(losses[1:]):.3f})"
        if metrics.plateau_epochs >= cfg.plateau_epochs_to_germinate:
            return f"plateau of {metrics.plateau_epochs} epochs"
        return None

    def _germinate(self, obs: EnvObservation) -> TamiyoDecision | None:
        cfg = self.config
        live = sum(is_live_stage(r.stage) for r in obs.slot_reports.values())
        capacity = cfg.max_concurrent_seeds if cfg.max_concurrent_seeds is not None else len(obs.enabled_slots)
        if live >= capacity or (
            self._last_germination is not None
            and obs.epoch - self._last_germination < cfg.min_epochs_between_germinations
        ):
            return None
        trigger = self._germination_trigger(obs)
        if trigger is None:
            return None
        embargoed = self.embargoed_slots(obs.epoch)
        open_slots = [s for s in obs.validity.valid_slots(LifecycleOp.GERMINATE) if s not in embargoed]
        for slot in open_slots:
            command = self._next_germination(obs, slot)
            if command is not None:
                self._last_germination = obs.epoch
                self._decay_penalties()
                return self._decision(obs, command, f"Germinating {command.blueprint_id} in {slot}: {trigger}")
        return None

    def _next_germination(self, obs: EnvObservation, slot: str) -> LifecycleCommand | None:
        """Walk the rotation from the current index, skipping heavily penalized blueprints (else the least penalized).

        Only commands valid for `slot` are considered; the rotation index moves past the chosen blueprint.
        """
        n = len(self._rotation)
        candidates: list[tuple[int, LifecycleCommand]] = []
        for k in range(n):
            i = (self._rotation_index + k) % n
            cmd = LifecycleCommand(LifecycleOp.GERMINATE, slot, self._rotation[i], self.config.blend_id)
            if obs.validity.is_valid_command(cmd):
                candidates.append((i, cmd))
        if not candidates:
            return None
        threshold = self.config.blueprint_penalty_threshold
        unpenalized = [c for c in candidates if self._penalties.get(self._rotation[c[0]], 0.0) < threshold]
        i, cmd = unpenalized[0] if unpenalized else min(candidates, key=lambda c: self._penalties[self._rotation[c[0]]])
        self._rotation_index = (i + 1) % n
        return cmd

    def _wait(self, obs: EnvObservation) -> TamiyoDecision:
        live = any(is_live_stage(r.stage) for r in obs.slot_reports.values())
        reason = "Seeds progressing normally" if live else "Training progressing normally"
        return self._decision(obs, LifecycleCommand(LifecycleOp.WAIT), reason)

    @staticmethod
    def _decision(obs: EnvObservation, command: LifecycleCommand, reason: str) -> TamiyoDecision:
        return TamiyoDecision.from_command(command, space=obs.action_space, reason=reason, confidence=1.0)


def _contribution(report: SeedStateReport, *, missing: float) -> float:
    c = report.metrics.counterfactual_contribution
    return missing if c is None else c
