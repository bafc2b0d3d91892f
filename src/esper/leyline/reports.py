"""Seed reports: the Kasmina → Tamiyo/Simic contract. Plain values only."""

from __future__ import annotations

from dataclasses import dataclass

from esper.leyline.stages import SeedStage
from esper.leyline.telemetry import SeedTelemetry


@dataclass(frozen=True, slots=True)
class SeedMetrics:
    epochs_total: int = 0
    epochs_in_current_stage: int = 0
    initial_val_accuracy: float = 0.0
    current_val_accuracy: float = 0.0
    best_val_accuracy: float = 0.0
    accuracy_at_stage_start: float = 0.0
    total_improvement: float = 0.0
    improvement_since_stage_start: float = 0.0
    accuracy_at_blending_start: float | None = None
    blending_delta: float = 0.0
    counterfactual_contribution: float | None = None
    contribution_at_fossilization: float | None = None
    probe_contribution: float | None = None
    seed_gradient_norm_ratio: float = 0.0
    seed_param_count: int = 0
    host_param_count: int = 0
    gradient_norm_avg: float = 0.0
    current_alpha: float = 0.0
    blending_steps_done: int = 0
    blending_steps_total: int = 0


@dataclass(frozen=True, slots=True)
class SeedStateReport:
    seed_id: str
    slot_id: str
    blueprint_id: str
    blend_id: str
    stage: SeedStage
    previous_stage: SeedStage
    previous_epochs_in_stage: int
    stage_entered_epoch: int
    metrics: SeedMetrics
    telemetry: SeedTelemetry | None = None
    is_healthy: bool = True
    is_improving: bool = False

    @property
    def improvement(self) -> float:
        """The seed's measured worth (features, heuristic), best evidence first.

        A blended seed's ablation counterfactual; for a TRAINING seed (which does not yet touch the forward) its
        probe, the accuracy change if its output replaced the slot's; otherwise the global accuracy change since the
        stage began, which says more about the host than about the seed.
        """
        m = self.metrics
        if m.counterfactual_contribution is not None:
            return m.counterfactual_contribution
        if self.stage == SeedStage.TRAINING and m.probe_contribution is not None:
            return m.probe_contribution
        return m.improvement_since_stage_start
