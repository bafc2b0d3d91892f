"""What two runs of the same study share: their results and episode rows without wall-clock times (the one thing no
two runs share). Imported by the tests that compare a stopped-and-resumed study with an uninterrupted one."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def untimed(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The episode rows without `wall_seconds`."""
    return [{k: v for k, v in row.items() if k != "wall_seconds"} for row in rows]


def untimed_results(path: Path) -> dict[str, Any]:
    """A study's results.json without the study's settings and without wall-clock times (the episodes' and their
    means)."""
    data: dict[str, Any] = json.loads((path / "results.json").read_text())
    data.pop("study")
    data["episodes"] = untimed(data["episodes"])
    data["per_controller"] = {c: {k: v for k, v in s.items() if k != "wall_seconds"}
                              for c, s in data["per_controller"].items()}
    return data
