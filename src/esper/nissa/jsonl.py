"""JSONL backend: `run_dir/events.jsonl`, one strict-JSON event per line.

Lines are buffered (10) to keep per-epoch events cheap, and flushed at natural checkpoints of a run (a finished rollout
batch, a finished episode, the end of the run) and on error/critical events, so a crash loses at most a few routine
lines and never the context of the failure. The file is opened in append mode so `--resume` continues the log.
"""

from __future__ import annotations

from pathlib import Path

from esper.leyline.telemetry import TelemetryEvent, TelemetryEventType
from esper.nissa.serialize import event_to_json

__all__ = ["FLUSH_EVENT_TYPES", "JSONL_BUFFER_LINES", "JsonlBackend"]

JSONL_BUFFER_LINES = 10
FLUSH_EVENT_TYPES: frozenset[TelemetryEventType] = frozenset(
    {
        TelemetryEventType.BATCH_COMPLETED,
        TelemetryEventType.EPISODE_COMPLETED,
        TelemetryEventType.RUN_COMPLETED,
    }
)
_FLUSH_SEVERITIES = frozenset({"error", "critical"})


class JsonlBackend:
    """Appends events to `path` (parent directories are created)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = self.path.open("a", encoding="utf-8")
        self._buffer: list[str] = []

    def emit(self, event: TelemetryEvent) -> None:
        if self._file.closed:
            raise RuntimeError(f"JsonlBackend for {self.path} is closed")
        self._buffer.append(event_to_json(event) + "\n")
        if (
            len(self._buffer) >= JSONL_BUFFER_LINES
            or event.event_type in FLUSH_EVENT_TYPES
            or event.severity in _FLUSH_SEVERITIES
        ):
            self.flush()

    def flush(self) -> None:
        if self._buffer:
            self._file.write("".join(self._buffer))
            self._buffer.clear()
        self._file.flush()

    def close(self) -> None:
        if self._file.closed:
            return
        self.flush()
        self._file.close()
