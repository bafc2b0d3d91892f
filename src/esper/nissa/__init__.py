"""Nissa: the telemetry hub and its backends (console, JSONL, TensorBoard, TUI).

`build_hub` is what the CLI calls; components never import this package, they receive the hub as a `TelemetrySink`.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from esper.leyline.telemetry import TelemetryLevel
from esper.nissa.console import ConsoleBackend, summarize
from esper.nissa.hub import Backend, NissaHub
from esper.nissa.jsonl import JsonlBackend
from esper.nissa.serialize import event_to_dict, event_to_json, to_json_safe
from esper.nissa.tensorboard import TensorBoardBackend
from esper.nissa.tui import TuiBackend

__all__ = [
    "Backend",
    "ConsoleBackend",
    "JsonlBackend",
    "NissaHub",
    "TensorBoardBackend",
    "TuiBackend",
    "build_hub",
    "event_to_dict",
    "event_to_json",
    "summarize",
    "to_json_safe",
]


def build_hub(
    level: TelemetryLevel,
    run_dir: str | Path,
    *,
    console: bool,
    tui: bool,
    tensorboard: bool,
    hparams: Mapping[str, Any] | None = None,
) -> NissaHub:
    """A hub with `run_dir/events.jsonl`, optionally `run_dir/tb`, and the console or (started) TUI display.

    At level OFF no backend is created, so no telemetry files appear (run artifacts are not Nissa's).
    The console and the TUI both draw on stdout, so at most one of them may be requested.
    """
    if console and tui:
        raise ValueError("console and tui are exclusive: the console backend is the TUI's non-TTY fallback")
    hub = NissaHub(level)
    if level == TelemetryLevel.OFF:
        return hub
    run_dir = Path(run_dir)
    hub.add_backend(JsonlBackend(run_dir / "events.jsonl"))
    if tensorboard:
        hub.add_backend(TensorBoardBackend(run_dir / "tb", hparams))
    if console:
        hub.add_backend(ConsoleBackend(level=level))
    if tui:
        display = TuiBackend()
        display.start()
        hub.add_backend(display)
    return hub
