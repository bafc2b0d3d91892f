"""JSONL backend: `run_dir/events.jsonl`, one strict-JSON event per line.

Lines are buffered (10) to keep per-epoch events cheap, and flushed at natural checkpoints of a run (a finished rollout
batch, a finished episode, the end of the run) and on error/critical events, so a crash loses at most a few routine
lines and never the context of the failure. The file is opened in append mode so `--resume` continues the log.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from esper.leyline.atomic import atomic_write
from esper.leyline.telemetry import TelemetryEvent, TelemetryEventType
from esper.nissa.serialize import event_to_json

__all__ = ["FLUSH_EVENT_TYPES", "JSONL_BUFFER_LINES", "SESSION_EVENT_TYPES", "JsonlBackend", "trim_event_log"]

SESSION_EVENT_TYPES = frozenset({"TRAINING_STARTED", "CHECKPOINT_LOADED", "RUN_COMPLETED"})
"""Events about a session (its start, its resume point, its end) rather than about the work: a trim keeps them, so
the log still shows every attempt of a resumed run."""

JSONL_BUFFER_LINES = 10
FLUSH_EVENT_TYPES: frozenset[TelemetryEventType] = frozenset(
    {
        TelemetryEventType.BATCH_COMPLETED,
        TelemetryEventType.EPISODE_COMPLETED,
        TelemetryEventType.RUN_COMPLETED,
        TelemetryEventType.CHECKPOINT_SAVED,
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


def trim_event_log(path: Path, completed: Callable[[dict[str, Any]], bool | None]) -> int:
    """Drop the events of work a resumed run will redo; returns how many lines were dropped.

    Events are written in order, and the work a resume repeats (an interrupted batch or episode) is the tail. So the
    log is cut after the last event that `completed` marks as belonging to finished work (True); later events
    (False: stamped with unfinished work; None: not stamped, such as a seed germinating in the interrupted batch)
    are dropped, except session events (start, resume, end), which stay. A torn last line (a kill mid-write) is
    dropped too. Call this before the run's JsonlBackend opens the file.
    """
    path = Path(path)
    if not path.exists():
        return 0
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    events: list[dict[str, Any] | None] = []
    for line in lines:
        try:
            event = json.loads(line)
        except json.JSONDecodeError:
            event = None
        events.append(event if isinstance(event, dict) and line.endswith("\n") else None)
    cut = max((i for i, e in enumerate(events) if e is not None and completed(e) is True), default=-1)
    kept = [line for i, (line, e) in enumerate(zip(lines, events, strict=True))
            if e is not None and (i <= cut or e.get("event_type") in SESSION_EVENT_TYPES)]
    if len(kept) == len(lines):
        return 0
    atomic_write(path, lambda f: f.writelines(kept))
    return len(lines) - len(kept)
