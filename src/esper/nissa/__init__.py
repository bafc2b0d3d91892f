"""Nissa: the telemetry hub and its backends (console, JSONL, TensorBoard, TUI).

`build_hub` is what the CLI calls; components never import this package, they receive the hub as a `TelemetrySink`.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rich.console import Console

from esper.leyline.errors import UserInputError
from esper.leyline.telemetry import TelemetryLevel
from esper.nissa.console import ConsoleBackend, summarize
from esper.nissa.hub import Backend, NissaHub
from esper.nissa.jsonl import JsonlBackend, trim_event_log
from esper.nissa.progress import ProgressBackend, ProgressSnapshot
from esper.nissa.serialize import event_to_dict, event_to_json, to_json_safe
from esper.nissa.tensorboard import TensorBoardBackend
from esper.nissa.tui import TuiBackend

__all__ = [
    "Backend",
    "ConsoleBackend",
    "JsonlBackend",
    "NissaHub",
    "ProgressBackend",
    "ProgressSnapshot",
    "TensorBoardBackend",
    "TuiBackend",
    "build_hub",
    "event_to_dict",
    "event_to_json",
    "summarize",
    "to_json_safe",
    "trim_event_log",
]


def build_hub(
    level: TelemetryLevel,
    run_dir: str | Path,
    *,
    console: bool,
    tui: bool,
    tensorboard: bool,
    hparams: Mapping[str, Any] | None = None,
    progress: ProgressBackend | None = None,
    screen: Console | None = None,
) -> NissaHub:
    """A hub with `run_dir/events.jsonl`, optionally `run_dir/tb`, the console or (started) TUI display, and the
    command's progress display (the TUI draws it in its header).

    The level filters events only: events.jsonl is created at every level (empty at OFF), and TensorBoard and the
    progress display receive their inputs whatever the level. The console and the TUI both draw on stdout (`screen`),
    so at most one of them may be requested.
    """
    if console and tui:
        raise UserInputError("console and tui are exclusive: the console backend is the TUI's non-TTY fallback")
    hub = NissaHub(level)
    run_dir = Path(run_dir)
    hub.add_backend(JsonlBackend(run_dir / "events.jsonl"))
    if tensorboard:
        hub.add_backend(TensorBoardBackend(run_dir / "tb", hparams))
    if progress is not None:
        hub.add_backend(progress)
    if console:
        hub.add_backend(ConsoleBackend(screen, level=level))
    if tui:
        display = TuiBackend(screen, progress=progress)
        display.start()
        hub.add_backend(display)
    return hub
