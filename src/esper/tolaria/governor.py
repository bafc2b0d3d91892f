"""The governor: detects a diverging environment and rolls it back to its last healthy snapshot."""

from __future__ import annotations

import math
import statistics
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from esper.leyline import TelemetryEvent, TelemetryEventType
from esper.leyline.constants import (
    DEFAULT_GOVERNOR_ABSOLUTE_THRESHOLD,
    DEFAULT_GOVERNOR_HISTORY_WINDOW,
    DEFAULT_GOVERNOR_LOSS_MULTIPLIER,
    DEFAULT_GOVERNOR_SENSITIVITY,
    DEFAULT_MIN_PANICS_BEFORE_ROLLBACK,
    GOVERNOR_MIN_HISTORY,
    LOBOTOMY_MEAN_FRACTION,
    LOBOTOMY_TOLERANCE,
)
from esper.leyline.errors import UserInputError
from esper.storage.checkpoint import detached_copy
from esper.tolaria.trainer import TrainState


@dataclass(frozen=True)
class GovernorReport:
    reason: str
    loss_at_panic: float
    loss_threshold: float
    restored_epoch: int
    rollback_occurred: bool = True
    restored_bookkeeping: dict[str, Any] = field(default_factory=dict)


def export_train_state(ts: TrainState) -> dict[str, Any]:
    """Model (host + every seed with weights, gate and lifecycle) and all optimizer states, as clones on the model's
    device: a copy to the host would make it wait for an accelerator at every snapshot."""
    return detached_copy({
        "model": ts.model.export_state(),
        "host_optimizer": ts.host_optimizer.state_dict(),
        "seed_optimizers": {slot: (seed_id, opt.state_dict()) for slot, (seed_id, opt) in ts.seed_optimizers.items()},
        "fossil_order": list(ts.fossil_order),
        "scaler": ts.scaler.state_dict() if ts.scaler is not None else None,
    }, None)


def restore_train_state(ts: TrainState, snap: dict[str, Any]) -> None:
    """Make `ts` equal to an exported state: seeds re-instantiated, optimizers rebuilt in order, states loaded.

    Optimizers load copies: `load_state_dict` keeps a tensor already on the right device and dtype as it is, so the
    steps after a rollback would otherwise update the snapshot itself, and a second rollback to it would restore
    those updates."""
    ts.model.load_state(snap["model"])
    ts.fossil_order = list(snap["fossil_order"])
    ts.rebuild_optimizers()
    ts.host_optimizer.load_state_dict(detached_copy(snap["host_optimizer"], None))
    if set(ts.seed_optimizers) != set(snap["seed_optimizers"]):
        raise RuntimeError("Snapshot seed optimizers do not match the restored seeds")
    for slot, (seed_id, state) in snap["seed_optimizers"].items():
        restored_id, opt = ts.seed_optimizers[slot]
        if restored_id != seed_id:
            raise RuntimeError(f"Snapshot optimizer for slot '{slot}' belongs to seed {seed_id}, not {restored_id}")
        opt.load_state_dict(detached_copy(state, None))
    if ts.scaler is not None and snap["scaler"] is not None:
        ts.scaler.load_state_dict(snap["scaler"])


class TolariaGovernor:
    """Watches the validation loss; panics on NaN/Inf, lobotomy or statistical anomalies; restores snapshots."""

    def __init__(
        self,
        *,
        random_guess_loss: float,
        sensitivity: float = DEFAULT_GOVERNOR_SENSITIVITY,
        multiplier: float = DEFAULT_GOVERNOR_LOSS_MULTIPLIER,
        absolute_threshold: float = DEFAULT_GOVERNOR_ABSOLUTE_THRESHOLD,
        history_window: int = DEFAULT_GOVERNOR_HISTORY_WINDOW,
        min_panics_before_rollback: int = DEFAULT_MIN_PANICS_BEFORE_ROLLBACK,
        on_event: Callable[[TelemetryEvent], None] | None = None,
    ) -> None:
        if random_guess_loss <= 0:
            raise UserInputError("random_guess_loss must be > 0 (ln(num_classes) or ln(vocab_size))")
        self.random_guess_loss = random_guess_loss
        self.sensitivity = sensitivity
        self.multiplier = multiplier
        self.absolute_threshold = absolute_threshold
        self.min_panics_before_rollback = min_panics_before_rollback
        self.on_event = on_event
        self.loss_history: deque[float] = deque(maxlen=history_window)
        self.consecutive_panics = 0
        self._pending: tuple[str, float, float] | None = None
        self._snapshot: dict[str, Any] | None = None
        # Whether the latest vital check passed; a fresh environment is unmeasured and is the reference state.
        self._healthy = True

    def _emit(self, event_type: TelemetryEventType, message: str, data: dict[str, Any], severity: str,
              epoch: int | None = None) -> None:
        if self.on_event is not None:
            self.on_event(TelemetryEvent(event_type=event_type, epoch=epoch, message=message, data=data,
                                         severity=severity))  # type: ignore[arg-type]

    def _panic(self, reason: str, loss: float, threshold: float) -> None:
        self._healthy = False
        self._pending = (reason, loss, threshold)
        self._emit(TelemetryEventType.GOVERNOR_PANIC, f"governor panic: {reason} (loss {loss:.4g})",
                   {"loss": loss, "consecutive_panics": self.consecutive_panics, "reason": reason}, "warning")

    def check_vital_signs(self, loss: float) -> bool:
        """True means: roll back now. Any panic, even one below the rollback threshold, marks the state unhealthy."""
        L = self.random_guess_loss
        self._healthy = True
        if not math.isfinite(loss):
            self._panic("non_finite_loss", loss, math.nan)
            return True
        history = self.loss_history
        if (len(history) >= GOVERNOR_MIN_HISTORY and statistics.fmean(history) < LOBOTOMY_MEAN_FRACTION * L
                and abs(loss - L) < LOBOTOMY_TOLERANCE * L):
            self._panic("lobotomy", loss, L)
            return True
        if len(history) < GOVERNOR_MIN_HISTORY:
            history.append(loss)
            return False
        mean = statistics.fmean(history)
        sigma = statistics.pstdev(history)
        statistical = mean + self.sensitivity * sigma
        if loss > self.absolute_threshold and loss > statistical and loss > self.multiplier * mean:
            self.consecutive_panics += 1
            self._panic("loss_spike", loss, max(self.absolute_threshold, statistical, self.multiplier * mean))
            return self.consecutive_panics >= self.min_panics_before_rollback
        history.append(loss)
        self.consecutive_panics = 0
        return False

    def snapshot(self, ts: TrainState, *, epoch: int, bookkeeping: dict[str, Any] | None = None) -> bool:
        """Remember a known-good state: model, seeds, optimizers and the env's per-slot bookkeeping.

        Refused (returns False, the previous snapshot is kept) when the latest vital check panicked: a panic that
        has not yet reached the rollback threshold still means the model may be diverging, and a later rollback to
        that state would restore the divergence instead of undoing it.
        """
        if not self._healthy:
            return False
        self._snapshot = {"train_state": export_train_state(ts), "epoch": epoch,
                          "bookkeeping": detached_copy(bookkeeping or {}, None)}
        self._emit(TelemetryEventType.GOVERNOR_SNAPSHOT, f"snapshot at epoch {epoch}", {"epoch": epoch}, "debug",
                   epoch=epoch)
        return True

    def execute_rollback(self, ts: TrainState) -> GovernorReport:
        """Restore the last snapshot exactly and clear the panic state."""
        if self._snapshot is None:
            raise RuntimeError("No snapshot to roll back to: call snapshot() when the environment is created")
        restore_train_state(ts, self._snapshot["train_state"])
        reason, loss, threshold = self._pending or ("manual", math.nan, math.nan)
        self.loss_history.clear()
        self.consecutive_panics = 0
        self._pending = None
        self._healthy = True  # the model now equals a snapshot, and only healthy states are snapshotted
        report = GovernorReport(reason, loss, threshold, self._snapshot["epoch"],
                                restored_bookkeeping=detached_copy(self._snapshot["bookkeeping"], None))
        self._emit(TelemetryEventType.GOVERNOR_ROLLBACK, f"rolled back to epoch {report.restored_epoch} ({reason})", {
            "reason": reason, "loss_at_panic": loss, "loss_threshold": threshold,
            "restored_epoch": report.restored_epoch}, "critical")
        return report
