"""The telemetry hub: level filtering, temporary escalation and fan-out to backends.

The CLI constructs one `NissaHub` per run and passes it explicitly to components as their `TelemetrySink`; there is
no process-wide hub, so two trainings in one process never share backends or escalation state.
"""

from __future__ import annotations

import sys
from types import TracebackType
from typing import Protocol, runtime_checkable

from esper.leyline.errors import UserInputError
from esper.leyline.telemetry import EVENT_MIN_LEVEL, TelemetryEvent, TelemetryEventType, TelemetryLevel

__all__ = ["Backend", "NissaHub", "always_of"]


@runtime_checkable
class Backend(Protocol):
    """An output of the hub. Backends receive the events that passed the hub's level filter, plus the event types of
    their optional `always` attribute at every level (see `always_of`)."""

    def emit(self, event: TelemetryEvent) -> None: ...

    def close(self) -> None: ...


def always_of(backend: Backend) -> frozenset[TelemetryEventType]:
    """The event types a backend receives whatever the level: TensorBoard curves and progress displays are outputs
    of the run, not telemetry detail, so `--telemetry-level` must never switch them off."""
    return frozenset(getattr(backend, "always", frozenset()))


class NissaHub:
    """Implements `TelemetrySink`: forwards an event iff its minimum level is ≤ the effective level.

    Escalation raises the effective level to DEBUG for a number of `tick()`s (the env runner ticks once per epoch),
    so an anomaly yields detailed telemetry for a short window only. Level OFF drops everything, escalation included.
    A backend that raises never stops the others; its first error is reported once on stderr. Event types listed in
    a backend's `always` reach that backend at every level, OFF included (and only that backend).
    """

    def __init__(self, level: TelemetryLevel = TelemetryLevel.NORMAL) -> None:
        self._level = TelemetryLevel(level)
        self._backends: list[Backend] = []
        self._always: frozenset[TelemetryEventType] = frozenset()
        self._failed: set[int] = set()
        self._escalation_left = 0
        self._closed = False

    @property
    def level(self) -> TelemetryLevel:
        """The configured (non-escalated) level."""
        return self._level

    @property
    def effective_level(self) -> TelemetryLevel:
        if self._level == TelemetryLevel.OFF:
            return TelemetryLevel.OFF
        return TelemetryLevel.DEBUG if self._escalation_left > 0 else self._level

    @property
    def backends(self) -> tuple[Backend, ...]:
        return tuple(self._backends)

    def add_backend(self, backend: Backend) -> None:
        if self._closed:
            raise RuntimeError("cannot add a backend to a closed NissaHub")
        self._backends.append(backend)
        self._always |= always_of(backend)

    def passes_level(self, event_type: TelemetryEventType) -> bool:
        """Whether the (effective) level lets this event type through to every backend."""
        level = self.effective_level
        return level != TelemetryLevel.OFF and EVENT_MIN_LEVEL[event_type] <= level

    def wants(self, event_type: TelemetryEventType) -> bool:
        """Whether an event of this type would be forwarded now; lets producers skip building payloads."""
        return self.passes_level(event_type) or event_type in self._always

    def emit(self, event: TelemetryEvent) -> None:
        if self._closed or not self.wants(event.event_type):
            return
        level_ok = self.passes_level(event.event_type)
        for backend in self._backends:
            if not level_ok and event.event_type not in always_of(backend):
                continue
            try:
                backend.emit(event)
            except Exception as exc:  # isolation: one broken backend must not stop training or other backends
                self._report_failure(backend, "emit", exc)

    def escalate(self, epochs: int, *, reason: str = "") -> None:
        """Effective level DEBUG for the next `epochs` ticks (extends, never shortens, a running escalation)."""
        if epochs < 1:
            raise UserInputError(f"escalate needs epochs >= 1, got {epochs}")
        self._escalation_left = max(self._escalation_left, epochs)
        suffix = f": {reason}" if reason else ""
        self.emit(
            TelemetryEvent(
                event_type=TelemetryEventType.TELEMETRY_ESCALATED,
                message=f"telemetry escalated to DEBUG for {epochs} epochs{suffix}",
                data={"epochs": epochs, "reason": reason},
                severity="warning",
            )
        )

    def tick(self) -> None:
        """One epoch passed: consume one escalation step."""
        if self._escalation_left > 0:
            self._escalation_left -= 1

    def close(self) -> None:
        """Close every backend once (errors isolated like emit); later events are dropped."""
        if self._closed:
            return
        self._closed = True
        for backend in self._backends:
            try:
                backend.close()
            except Exception as exc:
                self._report_failure(backend, "close", exc)

    def __enter__(self) -> NissaHub:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _report_failure(self, backend: Backend, what: str, exc: Exception) -> None:
        key = id(backend)
        if key in self._failed:
            return
        self._failed.add(key)
        name = type(backend).__name__
        print(
            f"nissa: backend {name} failed in {what}: {type(exc).__name__}: {exc} (further errors suppressed)",
            file=sys.stderr,
        )
