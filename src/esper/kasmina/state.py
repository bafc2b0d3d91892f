"""Seed lifecycle state: metric mechanics, the stage machine and the quality gates.

`SeedState.alpha` is the single source of truth for the blend weight: the slot's forward reads it and only the
slot's `step_epoch` writes it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, ClassVar

from pydantic import Field, StrictFloat

from esper.leyline import (
    GateLevel,
    GateResult,
    SeedMetrics,
    SeedStage,
    SeedStateReport,
    SeedTelemetry,
    is_valid_transition,
)
from esper.leyline.constants import (
    DEFAULT_ALPHA_COMPLETE_THRESHOLD,
    DEFAULT_BLENDING_TOTAL_STEPS,
    DEFAULT_GRADIENT_EMA_DECAY,
    DEFAULT_GRADIENT_RATIO_THRESHOLD,
    DEFAULT_MAX_PROBATION_EPOCHS,
    DEFAULT_MIN_BLENDING_EPOCHS,
    DEFAULT_MIN_FOSSILIZE_CONTRIBUTION,
    DEFAULT_MIN_PROBE_CONTRIBUTION,
    DEFAULT_MIN_TRAINING_EPOCHS,
    MAX_GRADIENT_RATIO,
    MAX_WEIGHT,
)
from esper.leyline.errors import UserInputError
from esper.leyline.strict_config import EpochCount, PositiveEpochCount, StrictConfig, Weight

STAGE_HISTORY_CAP = 100


class LifecycleConfig(StrictConfig):
    """Per-task lifecycle thresholds (LM tasks train seeds longer before blending)."""

    KIND: ClassVar[str] = "lifecycle config"
    min_training_epochs: EpochCount = DEFAULT_MIN_TRAINING_EPOCHS
    min_probe_contribution: Weight = DEFAULT_MIN_PROBE_CONTRIBUTION
    min_seed_gradient_ratio: StrictFloat = Field(default=DEFAULT_GRADIENT_RATIO_THRESHOLD, ge=0.0, le=MAX_WEIGHT)
    blending_steps: PositiveEpochCount = DEFAULT_BLENDING_TOTAL_STEPS
    min_blending_epochs: EpochCount = DEFAULT_MIN_BLENDING_EPOCHS
    alpha_complete_threshold: StrictFloat = Field(default=DEFAULT_ALPHA_COMPLETE_THRESHOLD, gt=0.0, le=1.0)
    max_probation_epochs: PositiveEpochCount = DEFAULT_MAX_PROBATION_EPOCHS
    min_fossilize_contribution: Weight = DEFAULT_MIN_FOSSILIZE_CONTRIBUTION


# The `SeedMetrics` fields a seed does not measure: the derived ones follow from the measured ones on every update;
# the blending schedule's are `SeedState`'s own fields (`alpha`, `blending_steps_*`), copied in by `to_report`.
_DERIVED = frozenset({"total_improvement", "improvement_since_stage_start", "blending_delta"})
_SCHEDULE = frozenset({"current_alpha", "blending_steps_done", "blending_steps_total"})
_MEASURED = tuple(f.name for f in dataclasses.fields(SeedMetrics) if f.name not in _DERIVED | _SCHEDULE)


def _with_derived(m: SeedMetrics) -> SeedMetrics:
    acc, blend_start = m.current_val_accuracy, m.accuracy_at_blending_start
    return dataclasses.replace(
        m,
        total_improvement=acc - m.initial_val_accuracy,
        improvement_since_stage_start=acc - m.accuracy_at_stage_start,
        blending_delta=0.0 if blend_start is None else acc - blend_start,
    )


@dataclass(kw_only=True, slots=True)
class SeedState:
    """One seed's lifecycle. Transitions only through `transition`, which records history and resets baselines.

    `metrics` is the report's frozen value, replaced by `update_metrics` and the measuring methods below (which keep
    its derived fields current); its blending-schedule fields stay at their defaults until `to_report`.
    """

    seed_id: str
    blueprint_id: str
    slot_id: str = ""
    blend_id: str = "sigmoid"
    stage: SeedStage = SeedStage.DORMANT
    previous_stage: SeedStage = SeedStage.UNKNOWN
    previous_epochs_in_stage: int = 0
    stage_entered_epoch: int = 0
    alpha: float = 0.0
    metrics: SeedMetrics = field(default_factory=SeedMetrics)
    blending_steps_done: int = 0
    blending_steps_total: int = 0
    is_healthy: bool = True
    stage_history: list[tuple[SeedStage, int]] = field(default_factory=list)
    gradient_ratio_seen: bool = False
    gradient_norm_seen: bool = False
    telemetry: SeedTelemetry = field(init=False)

    def __post_init__(self) -> None:
        self.telemetry = SeedTelemetry(seed_id=self.seed_id, blueprint_id=self.blueprint_id, layer_id=self.slot_id)

    def can_transition_to(self, stage: SeedStage) -> bool:
        return is_valid_transition(self.stage, stage)

    def transition(self, stage: SeedStage, epoch: int) -> bool:
        if not self.can_transition_to(stage):
            return False
        self.previous_stage = self.stage
        self.previous_epochs_in_stage = self.metrics.epochs_in_current_stage
        self.stage = stage
        self.stage_entered_epoch = epoch
        self.stage_history.append((stage, epoch))
        del self.stage_history[:-STAGE_HISTORY_CAP]
        self.update_metrics(accuracy_at_stage_start=self.metrics.current_val_accuracy, epochs_in_current_stage=0)
        return True

    def update_metrics(self, **measured: Any) -> None:
        """Replace measured fields of `metrics`; the derived ones follow. Derived or schedule fields are refused."""
        refused = set(measured) - set(_MEASURED)
        if refused:
            raise ValueError(f"Not measured by a seed: {sorted(refused)}")
        self.metrics = _with_derived(dataclasses.replace(self.metrics, **measured))

    def record_accuracy(self, acc: Any) -> None:
        """Record one epoch's validation accuracy (float or 0-dim tensor); the only clock of the epoch counters."""
        value, m = float(acc), self.metrics
        self.update_metrics(current_val_accuracy=value, best_val_accuracy=max(m.best_val_accuracy, value),
                            epochs_total=m.epochs_total + 1, epochs_in_current_stage=m.epochs_in_current_stage + 1)

    def update_gradient_ratio(self, ratio: float) -> None:
        """Fold a seed/host gradient-norm ratio into its EMA (the first one is taken as is), clamped."""
        old = self.metrics.seed_gradient_norm_ratio
        value = ratio if not self.gradient_ratio_seen else (
            DEFAULT_GRADIENT_EMA_DECAY * old + (1 - DEFAULT_GRADIENT_EMA_DECAY) * ratio
        )
        self.update_metrics(seed_gradient_norm_ratio=min(max(value, 0.0), MAX_GRADIENT_RATIO))
        self.gradient_ratio_seen = True

    def update_gradient_norm(self, norm: float) -> None:
        """Fold a gradient norm into its EMA (the first one is taken as is)."""
        decay, old = DEFAULT_GRADIENT_EMA_DECAY, self.metrics.gradient_norm_avg
        self.update_metrics(gradient_norm_avg=decay * old + (1 - decay) * norm if self.gradient_norm_seen else norm)
        self.gradient_norm_seen = True

    def sync_telemetry(
        self,
        gradient_norm: float,
        gradient_health: float,
        has_vanishing: bool,
        has_exploding: bool,
        epoch: int = 0,
        max_epochs: int = 25,
    ) -> None:
        t = self.telemetry
        t.accuracy = self.metrics.current_val_accuracy
        t.accuracy_delta = self.metrics.improvement_since_stage_start
        t.epochs_in_stage = self.metrics.epochs_in_current_stage
        t.stage = int(self.stage)
        t.alpha = self.alpha
        t.gradient_norm = gradient_norm
        t.gradient_health = gradient_health
        t.has_vanishing = has_vanishing
        t.has_exploding = has_exploding
        t.epoch = epoch
        t.max_epochs = max_epochs
        t.layer_id = self.slot_id
        t.captured_at = datetime.now(UTC)

    def to_report(self) -> SeedStateReport:
        return SeedStateReport(
            seed_id=self.seed_id,
            slot_id=self.slot_id,
            blueprint_id=self.blueprint_id,
            blend_id=self.blend_id,
            stage=self.stage,
            previous_stage=self.previous_stage,
            previous_epochs_in_stage=self.previous_epochs_in_stage,
            stage_entered_epoch=self.stage_entered_epoch,
            metrics=dataclasses.replace(
                self.metrics,
                current_alpha=self.alpha,
                blending_steps_done=self.blending_steps_done,
                blending_steps_total=self.blending_steps_total,
            ),
            telemetry=dataclasses.replace(self.telemetry),
            is_healthy=self.is_healthy,
            is_improving=self.metrics.improvement_since_stage_start > 0,
        )

    def to_dict(self) -> dict[str, Any]:
        """Plain values only (checkpoints load with weights_only=True)."""
        return {
            "seed_id": self.seed_id,
            "blueprint_id": self.blueprint_id,
            "slot_id": self.slot_id,
            "blend_id": self.blend_id,
            "stage": int(self.stage),
            "previous_stage": int(self.previous_stage),
            "previous_epochs_in_stage": self.previous_epochs_in_stage,
            "stage_entered_epoch": self.stage_entered_epoch,
            "alpha": self.alpha,
            "metrics": {**{name: getattr(self.metrics, name) for name in _MEASURED},
                        "_ratio_seen": self.gradient_ratio_seen, "_norm_seen": self.gradient_norm_seen},
            "blending_steps_done": self.blending_steps_done,
            "blending_steps_total": self.blending_steps_total,
            "is_healthy": self.is_healthy,
            "stage_history": [[int(s), int(e)] for s, e in self.stage_history],
            "telemetry": {**{f.name: getattr(self.telemetry, f.name) for f in dataclasses.fields(self.telemetry)
                             if f.name != "captured_at"}, "captured_at": self.telemetry.captured_at.isoformat()},
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> SeedState:
        state = cls(
            seed_id=d["seed_id"],
            blueprint_id=d["blueprint_id"],
            slot_id=d["slot_id"],
            blend_id=d["blend_id"],
            stage=SeedStage(d["stage"]),
            previous_stage=SeedStage(d["previous_stage"]),
            previous_epochs_in_stage=int(d["previous_epochs_in_stage"]),
            stage_entered_epoch=int(d["stage_entered_epoch"]),
            alpha=float(d["alpha"]),
            metrics=_metrics_from_dict(dict(d["metrics"])),
            gradient_ratio_seen=bool(d["metrics"].get("_ratio_seen", False)),
            gradient_norm_seen=bool(d["metrics"].get("_norm_seen", False)),
            blending_steps_done=int(d["blending_steps_done"]),
            blending_steps_total=int(d["blending_steps_total"]),
            is_healthy=bool(d["is_healthy"]),
            stage_history=[(SeedStage(s), int(e)) for s, e in d["stage_history"]],
        )
        telemetry = dict(d["telemetry"])
        telemetry["captured_at"] = datetime.fromisoformat(telemetry["captured_at"])
        state.telemetry = SeedTelemetry(**telemetry)
        return state


def _metrics_from_dict(d: dict[str, Any]) -> SeedMetrics:
    """The measured metrics of a checkpoint's seed (`SeedState.to_dict` stores them beside the gradient EMAs'
    first-value flags `_ratio_seen`, `_norm_seen`), derived fields recomputed."""
    unknown = set(d) - {*_MEASURED, "_ratio_seen", "_norm_seen"}
    if unknown:
        raise UserInputError(f"Unknown seed metrics fields: {sorted(unknown)}")
    return _with_derived(SeedMetrics(**{name: d[name] for name in _MEASURED if name in d}))


class QualityGates:
    """The quality gate of each stage transition. Any target without a gate raises: no silent pass."""

    def __init__(self, config: LifecycleConfig) -> None:
        self.config = config

    def check_gate(self, state: SeedState, target: SeedStage) -> GateResult:
        checks = {
            SeedStage.GERMINATED: self._g0,
            SeedStage.TRAINING: self._g1,
            SeedStage.BLENDING: self._g2,
            SeedStage.PROBATIONARY: self._g3,
            SeedStage.FOSSILIZED: self._g5,
        }
        if target not in checks:
            raise ValueError(f"No quality gate guards a transition to {SeedStage(target).name}")
        return checks[target](state)

    @staticmethod
    def _result(gate: GateLevel, checks: list[tuple[bool, str]], score: float) -> GateResult:
        passed = tuple(name for ok, name in checks if ok)
        failed = tuple(name for ok, name in checks if not ok)
        verdict = "passed" if not failed else "failed: " + ", ".join(failed)
        return GateResult(gate, not failed, score, passed, failed, f"{gate.name} {verdict}")

    def _g0(self, s: SeedState) -> GateResult:
        checks = [
            (bool(s.seed_id), "seed_id_present" if s.seed_id else "seed_id_missing"),
            (bool(s.blueprint_id), "blueprint_id_present" if s.blueprint_id else "blueprint_id_missing"),
        ]
        return self._result(GateLevel.G0, checks, 1.0 if all(ok for ok, _ in checks) else 0.0)

    def _g1(self, s: SeedState) -> GateResult:
        ok = s.stage == SeedStage.GERMINATED
        return self._result(GateLevel.G1, [(ok, "germinated" if ok else "not_germinated")], 1.0 if ok else 0.0)

    def _g2(self, s: SeedState) -> GateResult:
        """Blend a seed once it has trained long enough, still learns, and would not hurt if it replaced the slot.

        The probe measures the seed itself; the global accuracy cannot, since an isolated seed does not touch the
        forward. A missing probe (never measured) fails: nothing vouches for the seed yet.
        """
        cfg, m = self.config, s.metrics
        ratio, probe = m.seed_gradient_norm_ratio, m.probe_contribution
        ready = m.epochs_in_current_stage >= cfg.min_training_epochs
        active = ratio >= cfg.min_seed_gradient_ratio
        checks = [
            (ready, "seed_ready" if ready else "seed_not_ready"),
            (active, f"seed_gradient_active_{ratio:.2f}" if active else f"seed_gradient_low_{ratio:.2f}"),
        ]
        if probe is None:
            checks.append((False, "probe_not_available"))
            return self._result(GateLevel.G2, checks, 0.0)
        helps = probe >= cfg.min_probe_contribution
        checks.append((helps, f"probe_positive_{probe:.2f}" if helps else f"probe_negative_{probe:.2f}"))
        return self._result(GateLevel.G2, checks, min(1.0, probe / 5.0) if probe > 0 else 0.0)

    def _g3(self, s: SeedState) -> GateResult:
        cfg = self.config
        complete = s.blending_steps_done >= s.blending_steps_total
        alpha_high = s.alpha >= cfg.alpha_complete_threshold
        eis = s.metrics.epochs_in_current_stage
        dwelled = eis >= cfg.min_blending_epochs
        remaining = s.blending_steps_total - s.blending_steps_done
        checks = [
            (complete, "blending_complete" if complete else f"blending_incomplete_{remaining}"),
            (alpha_high, "alpha_high" if alpha_high else f"alpha_low_{s.alpha:.2f}"),
            (dwelled, "blending_epochs_met" if dwelled else f"blending_epochs_insufficient_{eis}"),
        ]
        return self._result(GateLevel.G3, checks, s.alpha)

    def _g5(self, s: SeedState) -> GateResult:
        c = s.metrics.counterfactual_contribution
        healthy = (s.is_healthy, "healthy" if s.is_healthy else "unhealthy")
        if c is None:
            return self._result(GateLevel.G5, [(False, "counterfactual_not_available"), healthy], 0.0)
        enough = c >= self.config.min_fossilize_contribution
        checks = [
            (enough, f"sufficient_contribution_{c:.2f}" if enough else f"insufficient_contribution_{c:.2f}"),
            healthy,
        ]
        return self._result(GateLevel.G5, checks, min(1.0, c / 10.0) if c > 0 else 0.0)
