"""JSONL backend and event serialization: schema, strict JSON, buffering and flushing."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from esper.kasmina.state import LifecycleConfig
from esper.leyline.stages import SeedStage
from esper.leyline.telemetry import TelemetryEvent, TelemetryEventType
from esper.nissa import JsonlBackend, event_to_dict, to_json_safe, trim_event_log
from esper.nissa.jsonl import JSONL_BUFFER_LINES

E = TelemetryEventType
KEYS = ["event_id", "event_type", "timestamp", "env_id", "seed_id", "slot_id", "epoch", "message", "data", "severity"]


def _strict_loads(line: str) -> Any:
    def reject(name: str) -> Any:
        raise ValueError(f"non-strict JSON constant {name}")

    return json.loads(line, parse_constant=reject)


def _lines(path: Path) -> list[dict[str, Any]]:
    return [_strict_loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


@dataclass
class _Point:
    x: float
    y: float


def test_line_schema(tmp_path: Path) -> None:
    path = tmp_path / "run" / "events.jsonl"
    backend = JsonlBackend(path)
    event = TelemetryEvent(
        E.SEED_GERMINATED,
        env_id=3,
        seed_id="seed-1",
        slot_id="mid",
        epoch=4,
        message="germinated",
        data={"blueprint_id": "conv_light", "params": 1234},
    )
    backend.emit(event)
    backend.close()
    (line,) = _lines(path)
    assert list(line) == KEYS
    assert line["event_type"] == "SEED_GERMINATED"
    assert datetime.fromisoformat(line["timestamp"]) == event.timestamp
    assert line["event_id"] == event.event_id
    assert (line["env_id"], line["seed_id"], line["slot_id"], line["epoch"]) == (3, "seed-1", "mid", 4)
    assert line["data"] == {"blueprint_id": "conv_light", "params": 1234}
    assert line["severity"] == "info"


def test_non_finite_and_odd_values_are_strict_json() -> None:
    data = {
        "nan": math.nan,
        "nested": [math.inf, {"deep": -math.inf, "ok": 1.5}],
        "tuple": (1, 2),
        "stage": SeedStage.TRAINING,
        "point": _Point(0.5, math.nan),
        7: "int key",
        "obj": object(),
        "path": Path("/tmp/x"),
    }
    out = event_to_dict(TelemetryEvent(E.EPOCH_COMPLETED, data=data))
    text = json.dumps(out, allow_nan=False)
    d = _strict_loads(text)["data"]
    assert d["nan"] == "NaN"
    assert d["nested"] == ["Infinity", {"deep": "-Infinity", "ok": 1.5}]
    assert d["tuple"] == [1, 2]
    assert d["stage"] == "TRAINING"
    assert d["point"] == {"x": 0.5, "y": "NaN"}
    assert d["7"] == "int key"
    assert d["obj"].startswith("<object object")
    assert d["path"] == "/tmp/x"


def test_array_likes_become_lists() -> None:
    class ArrayLike:
        def tolist(self) -> list[float]:
            return [1.0, math.nan]

    assert to_json_safe(ArrayLike()) == [1.0, "NaN"]
    assert to_json_safe(True) is True


def test_a_config_in_an_event_is_its_fields() -> None:
    assert to_json_safe({"lifecycle": LifecycleConfig(blending_steps=4)})["lifecycle"]["blending_steps"] == 4


def test_buffers_ten_lines(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    backend = JsonlBackend(path)
    for _ in range(JSONL_BUFFER_LINES - 1):
        backend.emit(TelemetryEvent(E.EPOCH_COMPLETED))
    assert path.read_text() == ""
    backend.emit(TelemetryEvent(E.EPOCH_COMPLETED))
    assert len(_lines(path)) == JSONL_BUFFER_LINES
    backend.close()


@pytest.mark.parametrize("etype", [E.BATCH_COMPLETED, E.EPISODE_COMPLETED, E.RUN_COMPLETED])
def test_flushes_on_run_milestones(tmp_path: Path, etype: TelemetryEventType) -> None:
    path = tmp_path / "events.jsonl"
    backend = JsonlBackend(path)
    backend.emit(TelemetryEvent(E.EPOCH_COMPLETED))
    assert path.read_text() == ""
    backend.emit(TelemetryEvent(etype))
    assert [line["event_type"] for line in _lines(path)] == ["EPOCH_COMPLETED", etype.name]
    backend.close()


def test_flushes_on_critical_and_on_close(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    backend = JsonlBackend(path)
    backend.emit(TelemetryEvent(E.GOVERNOR_ROLLBACK, severity="critical"))
    assert len(_lines(path)) == 1
    backend.emit(TelemetryEvent(E.SEED_CULLED))
    backend.close()
    backend.close()
    assert len(_lines(path)) == 2
    with pytest.raises(RuntimeError, match="closed"):
        backend.emit(TelemetryEvent(E.SEED_CULLED))


def test_appends_to_an_existing_log(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    for _ in range(2):
        backend = JsonlBackend(path)
        backend.emit(TelemetryEvent(E.RUN_COMPLETED))
        backend.close()
    assert len(_lines(path)) == 2


def _log(path: Path, events: list[tuple[str, dict[str, Any]]], torn: str = "") -> None:
    path.write_text("".join(json.dumps({"event_type": t, "data": d}) + "\n" for t, d in events) + torn)


def _batch_done(n: int) -> Any:
    def completed(event: dict[str, Any]) -> bool | None:
        batch = event["data"].get("batch")
        if batch is None:
            return None
        return batch <= n if event["event_type"].startswith("CHECKPOINT") else batch < n
    return completed


def test_trim_cuts_after_the_last_finished_event_and_keeps_session_events(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    _log(path, [
        ("TRAINING_STARTED", {}), ("SEED_GERMINATED", {}), ("EPOCH_COMPLETED", {"batch": 0}),
        ("BATCH_COMPLETED", {"batch": 0}), ("PLATEAU_DETECTED", {"batch": 0}), ("CHECKPOINT_SAVED", {"batch": 1}),
        # the interrupted batch 1: an unstamped seed event first, then stamped epochs
        ("SEED_GERMINATED", {}), ("EPOCH_COMPLETED", {"batch": 1}), ("RUN_COMPLETED", {"batch": None}),
    ], torn='{"event_type": "EPOCH_COMP')
    dropped = trim_event_log(path, _batch_done(1))
    types = [json.loads(line)["event_type"] for line in path.read_text().splitlines()]
    assert types == ["TRAINING_STARTED", "SEED_GERMINATED", "EPOCH_COMPLETED", "BATCH_COMPLETED",
                     "PLATEAU_DETECTED", "CHECKPOINT_SAVED", "RUN_COMPLETED"]
    assert dropped == 3  # two events of batch 1 and the torn line
    assert trim_event_log(path, _batch_done(1)) == 0  # idempotent
    assert trim_event_log(tmp_path / "missing.jsonl", _batch_done(1)) == 0


def test_trim_with_nothing_finished_keeps_only_session_events(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    _log(path, [("TRAINING_STARTED", {}), ("EPOCH_COMPLETED", {"batch": 0}), ("SEED_CULLED", {})])
    trim_event_log(path, _batch_done(0))
    assert [json.loads(line)["event_type"] for line in path.read_text().splitlines()] == ["TRAINING_STARTED"]
