"""SignalTracker: turns per-epoch host measurements and seed reports into `TrainingSignals`.

Every controller sees the same derived signals (deltas, plateau counter, stabilization latch, bests, short histories,
a multi-slot summary seed), so the tracker is the single place where these are defined.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable, Mapping
from typing import Any

from esper.leyline import (
    SeedStateReport,
    TelemetryEventType,
    TelemetrySink,
    TrainingMetrics,
    TrainingSignals,
    emit_if_wanted,
    ordered_slots,
)
from esper.leyline.constants import (
    DEFAULT_HISTORY_WINDOW,
    DEFAULT_PLATEAU_THRESHOLD,
    DEFAULT_STABILIZATION_EPOCHS,
    DEFAULT_STABILIZATION_THRESHOLD,
)
from esper.leyline.errors import UserInputError

__all__ = ["SignalTracker"]

_RECENT = 5  # length of the loss/accuracy views carried by TrainingSignals
_STABLE_LOSS_CEILING = 1.5  # an epoch whose val loss jumps above 1.5x the previous one is never "stable"


def _summary_key(report: SeedStateReport) -> tuple[int, float, float, str]:
    """Ordering of the summary seed: latest stage, then highest alpha, then lowest measured contribution, then id.

    A missing counterfactual counts as +inf, so a measured (possibly harmful) seed wins ties over an unmeasured one.
    """
    c = report.metrics.counterfactual_contribution
    return (int(report.stage), report.metrics.current_alpha, -c if c is not None else -math.inf, report.seed_id)


class SignalTracker:
    """Per-environment signal state; call `update` once per epoch and `reset` at the start of an episode."""

    def __init__(
        self,
        *,
        plateau_threshold: float = DEFAULT_PLATEAU_THRESHOLD,
        history_window: int = DEFAULT_HISTORY_WINDOW,
        stabilization_threshold: float = DEFAULT_STABILIZATION_THRESHOLD,
        stabilization_epochs: int = DEFAULT_STABILIZATION_EPOCHS,
        env_id: int | None = None,
        sink: TelemetrySink | None = None,
    ) -> None:
        if history_window < _RECENT:
            raise UserInputError(f"history_window must be >= {_RECENT}, got {history_window}")
        if stabilization_epochs < 1:
            raise UserInputError(f"stabilization_epochs must be >= 1, got {stabilization_epochs}")
        self.plateau_threshold = plateau_threshold
        self.history_window = history_window
        self.stabilization_threshold = stabilization_threshold
        self.stabilization_epochs = stabilization_epochs
        self.env_id = env_id
        self.sink = sink
        self._loss_history: deque[float] = deque(maxlen=history_window)
        self._accuracy_history: deque[float] = deque(maxlen=history_window)
        self.reset()

    def reset(self) -> None:
        """Forget the episode (histories, bests, counters, latch); the configuration is kept."""
        self._prev_val_loss: float | None = None
        self._prev_accuracy = 0.0
        self._plateau_count = 0
        self._stable_count = 0
        self._stabilized = False
        self._best_val_accuracy = 0.0
        self._best_val_loss = math.inf
        self._loss_history.clear()
        self._accuracy_history.clear()

    def state_dict(self) -> dict[str, Any]:
        """The episode so far (histories, bests, counters, latch) in plain values; the configuration is not state."""
        return {"prev_val_loss": self._prev_val_loss, "prev_accuracy": self._prev_accuracy,
                "plateau_count": self._plateau_count, "stable_count": self._stable_count,
                "stabilized": self._stabilized, "best_val_accuracy": self._best_val_accuracy,
                "best_val_loss": self._best_val_loss, "loss_history": list(self._loss_history),
                "accuracy_history": list(self._accuracy_history)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue the episode `state_dict` describes."""
        prev = state["prev_val_loss"]
        self._prev_val_loss = None if prev is None else float(prev)
        self._prev_accuracy = float(state["prev_accuracy"])
        self._plateau_count = int(state["plateau_count"])
        self._stable_count = int(state["stable_count"])
        self._stabilized = bool(state["stabilized"])
        self._best_val_accuracy = float(state["best_val_accuracy"])
        self._best_val_loss = float(state["best_val_loss"])
        self._loss_history.clear()
        self._loss_history.extend(float(x) for x in state["loss_history"])
        self._accuracy_history.clear()
        self._accuracy_history.extend(float(x) for x in state["accuracy_history"])

    @property
    def host_stabilized(self) -> bool:
        return self._stabilized

    @property
    def loss_history(self) -> tuple[float, ...]:
        """Validation losses of the last `history_window` updates, oldest first."""
        return tuple(self._loss_history)

    @property
    def accuracy_history(self) -> tuple[float, ...]:
        """Validation accuracies of the last `history_window` updates, oldest first."""
        return tuple(self._accuracy_history)

    def update(
        self,
        epoch: int,
        global_step: int,
        train_loss: float,
        train_accuracy: float,
        val_loss: float,
        val_accuracy: float,
        seed_reports: Mapping[str, SeedStateReport],
        available_slots: Iterable[str],
        grad_norm_host: float = 0.0,
        epoch_duration_ms: float = 0.0,
    ) -> TrainingSignals:
        """Record one epoch and return its signals. Non-finite inputs propagate as given (features sanitize them)."""
        slots = ordered_slots(seed_reports.keys())
        reports = [seed_reports[s] for s in slots]
        for slot, report in zip(slots, reports):
            if report.slot_id != slot:
                raise ValueError(f"Report for seed '{report.seed_id}' has slot_id '{report.slot_id}' but key '{slot}'")
        seed_ids = [r.seed_id for r in reports]
        if len(set(seed_ids)) != len(seed_ids):
            raise RuntimeError(f"Duplicate seed ids across slots: {dict(zip(slots, seed_ids))}")

        prev_loss = self._prev_val_loss
        # A diverged (non-finite) previous loss is no baseline: the epoch after a rollback reports no delta.
        loss_delta = 0.0 if prev_loss is None or not math.isfinite(prev_loss) else prev_loss - val_loss
        accuracy_delta = val_accuracy - self._prev_accuracy

        self._plateau_count = self._plateau_count + 1 if accuracy_delta < self.plateau_threshold else 0
        if prev_loss is not None and not self._stabilized:
            self._track_stabilization(epoch, prev_loss, val_loss, loss_delta)

        # Explicit comparisons so a NaN never becomes a best value.
        if val_accuracy > self._best_val_accuracy:
            self._best_val_accuracy = val_accuracy
        if val_loss < self._best_val_loss:
            self._best_val_loss = val_loss
        self._loss_history.append(val_loss)
        self._accuracy_history.append(val_accuracy)
        self._prev_val_loss = val_loss
        self._prev_accuracy = val_accuracy

        metrics = TrainingMetrics(
            epoch=epoch,
            global_step=global_step,
            train_loss=train_loss,
            val_loss=val_loss,
            loss_delta=loss_delta,
            train_accuracy=train_accuracy,
            val_accuracy=val_accuracy,
            accuracy_delta=accuracy_delta,
            plateau_epochs=self._plateau_count,
            host_stabilized=int(self._stabilized),
            best_val_accuracy=self._best_val_accuracy,
            best_val_loss=self._best_val_loss,
            grad_norm_host=grad_norm_host,
        )
        summary = max(reports, key=_summary_key, default=None)
        counterfactual = None if summary is None else summary.metrics.counterfactual_contribution
        return TrainingSignals(
            metrics=metrics,
            active_seeds=tuple(seed_ids),
            available_slots=ordered_slots(available_slots),
            seed_stage=0 if summary is None else int(summary.stage),
            seed_epochs_in_stage=0 if summary is None else summary.metrics.epochs_in_current_stage,
            seed_alpha=0.0 if summary is None else summary.metrics.current_alpha,
            seed_improvement=0.0 if summary is None else summary.metrics.improvement_since_stage_start,
            seed_counterfactual=0.0 if counterfactual is None else counterfactual,
            loss_history=tuple(self._loss_history)[-_RECENT:],
            accuracy_history=tuple(self._accuracy_history)[-_RECENT:],
            epoch_duration_ms=epoch_duration_ms,
        )

    def _track_stabilization(self, epoch: int, prev_loss: float, val_loss: float, loss_delta: float) -> None:
        """Count consecutive stable epochs (small relative improvement, no blow-up); latch and announce once."""
        # A non-positive previous loss has no relative improvement; such an epoch is not evidence of stability.
        stable = (
            prev_loss > 0
            and loss_delta / prev_loss < self.stabilization_threshold
            and val_loss < _STABLE_LOSS_CEILING * prev_loss
        )
        self._stable_count = self._stable_count + 1 if stable else 0
        if self._stable_count < self.stabilization_epochs:
            return
        self._stabilized = True
        emit_if_wanted(self.sink, TelemetryEventType.HOST_STABILIZED,
                       f"Host stabilized after {self._stable_count} stable epochs",
                       {"epoch": epoch, "stable_count": self._stable_count, "val_loss": val_loss},
                       env_id=self.env_id, epoch=epoch)
