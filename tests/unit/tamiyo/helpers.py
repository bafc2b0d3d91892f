"""Hand-built Leyline objects for controller tests: seed reports, slot states and observations.

Plain functions (not fixtures) so Hypothesis strategies and other packages' tests can call them directly.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from esper.leyline import (
    CANONICAL_SLOTS,
    UNRECORDED_HEADS,
    ActionSpace,
    EnvObservation,
    MaskSeedInfo,
    SeedMetrics,
    SeedStage,
    SeedStateReport,
    TelemetryEvent,
    TelemetryEventType,
    TrainingMetrics,
    TrainingSignals,
    compute_action_validity,
    ordered_slots,
)

MIN_FOSSILIZE_CONTRIBUTION = 1.0
SPACES = {"cnn": ActionSpace("cnn", UNRECORDED_HEADS["cnn"], others=("conv_heavy",)),
          "transformer": ActionSpace("transformer", UNRECORDED_HEADS["transformer"])}
"""The built-in action spaces (what the blueprint registry derives with no plugin loaded)."""
PLUGIN_SPACE = ActionSpace("cnn", (*UNRECORDED_HEADS["cnn"], "pointwise"), others=("conv_heavy",))
"""The CNN space with a plugin's blueprint in its head."""


def space_of(topology: str) -> ActionSpace:
    return SPACES[topology]
_DEFAULT_ALPHA = {SeedStage.BLENDING: 0.5, SeedStage.PROBATIONARY: 1.0, SeedStage.FOSSILIZED: 1.0}
_PREVIOUS = {
    SeedStage.TRAINING: SeedStage.GERMINATED,
    SeedStage.BLENDING: SeedStage.TRAINING,
    SeedStage.PROBATIONARY: SeedStage.BLENDING,
    SeedStage.FOSSILIZED: SeedStage.PROBATIONARY,
}


def make_report(
    slot: str,
    stage: SeedStage,
    *,
    seed_id: str | None = None,
    blueprint_id: str = "conv_light",
    epochs_in_stage: int = 1,
    epochs_total: int | None = None,
    counterfactual: float | None = None,
    improvement: float = 0.0,
    alpha: float | None = None,
    healthy: bool = True,
) -> SeedStateReport:
    """A report for a seed in `slot`; `improvement` is improvement_since_stage_start, alpha follows the stage."""
    metrics = SeedMetrics(
        epochs_total=epochs_in_stage if epochs_total is None else epochs_total,
        epochs_in_current_stage=epochs_in_stage,
        improvement_since_stage_start=improvement,
        counterfactual_contribution=counterfactual,
        current_alpha=_DEFAULT_ALPHA.get(stage, 0.0) if alpha is None else alpha,
    )
    return SeedStateReport(
        seed_id=seed_id if seed_id is not None else f"seed-{slot}",
        slot_id=slot,
        blueprint_id=blueprint_id,
        blend_id="sigmoid",
        stage=stage,
        previous_stage=_PREVIOUS.get(stage, SeedStage.DORMANT),
        previous_epochs_in_stage=0,
        stage_entered_epoch=0,
        metrics=metrics,
        is_healthy=healthy,
        is_improving=improvement > 0,
    )


def slot_states(reports: Mapping[str, SeedStateReport], enabled: Iterable[str]) -> dict[str, MaskSeedInfo | None]:
    """Validity input for `enabled` slots, derived from reports like Simic's `build_slot_states`."""
    states: dict[str, MaskSeedInfo | None] = {}
    for slot in ordered_slots(enabled):
        report = reports.get(slot)
        if report is None:
            states[slot] = None
            continue
        c = report.metrics.counterfactual_contribution
        ready = c is not None and c >= MIN_FOSSILIZE_CONTRIBUTION and report.is_healthy
        states[slot] = MaskSeedInfo(int(report.stage), report.metrics.epochs_total, ready)
    return states


def make_obs(
    reports: Iterable[SeedStateReport] = (),
    *,
    enabled: Iterable[str] = CANONICAL_SLOTS,
    epoch: int = 10,
    plateau: int = 0,
    stabilized: bool = True,
    max_seeds: int = 0,
    topology: str = "cnn",
    max_epochs: int = 25,
    env_id: int = 0,
    space: ActionSpace | None = None,
) -> EnvObservation:
    """An observation whose validity is computed by Leyline from the given reports (keyed by their slot_id), in
    `space` (default: the topology's built-in space)."""
    by_slot = {r.slot_id: r for r in reports}
    enabled_slots = ordered_slots(enabled)
    unknown = set(by_slot) - set(enabled_slots)
    if unknown:
        raise ValueError(f"Reports for disabled slots: {sorted(unknown)}")
    validity = compute_action_validity(
        slot_states(by_slot, enabled_slots), total_seeds=len(by_slot), max_seeds=max_seeds,
        space=space if space is not None else space_of(topology),
    )
    signals = TrainingSignals(
        metrics=TrainingMetrics(epoch=epoch, plateau_epochs=plateau, host_stabilized=int(stabilized)),
        active_seeds=tuple(by_slot[s].seed_id for s in enabled_slots if s in by_slot),
        available_slots=tuple(s for s in enabled_slots if s not in by_slot),
    )
    return EnvObservation(
        env_id=env_id,
        epoch=epoch,
        max_epochs=max_epochs,
        task="synthetic" if topology == "cnn" else "synthetic_text",
        topology=topology,
        enabled_slots=enabled_slots,
        signals=signals,
        slot_reports={s: by_slot[s] for s in enabled_slots if s in by_slot},
        validity=validity,
        host_param_count=1000,
        total_param_count=1000 + 100 * len(by_slot),
        seeds_present=len(by_slot),
        max_seeds=max_seeds,
        random_guess_loss=2.302585,
        batches_per_epoch=10,
    )


class RecordingSink:
    """A `TelemetrySink` that keeps every event it receives; `wanted` answers `wants`."""

    def __init__(self, wanted: bool = True) -> None:
        self.wanted = wanted
        self.events: list[TelemetryEvent] = []

    def emit(self, event: TelemetryEvent) -> None:
        self.events.append(event)

    def wants(self, event_type: TelemetryEventType) -> bool:
        return self.wanted

    def escalate(self, epochs: int) -> None:
        """Escalation is irrelevant to these tests."""

    def tick(self) -> None:
        """Ticks are irrelevant to these tests."""
