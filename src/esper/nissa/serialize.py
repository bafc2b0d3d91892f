"""Strict-JSON serialization of telemetry events.

Output is always valid strict JSON (`allow_nan=False`), so `events.jsonl` can be read by any JSON parser: non-finite
floats become the strings "NaN"/"Infinity"/"-Infinity", enums their names, datetimes ISO-8601, dataclasses dicts,
array-likes (anything with `tolist()`, e.g. numpy arrays and tensors) lists, and everything else `str()`.
"""

from __future__ import annotations

import dataclasses
import json
import math
from datetime import date, datetime
from enum import Enum
from pathlib import PurePath
from typing import Any

from esper.leyline.strict_config import StrictConfig
from esper.leyline.telemetry import TelemetryEvent

__all__ = ["EVENT_KEYS", "event_to_dict", "event_to_json", "to_json_safe"]

EVENT_KEYS: tuple[str, ...] = (
    "event_id",
    "event_type",
    "timestamp",
    "env_id",
    "seed_id",
    "slot_id",
    "epoch",
    "message",
    "data",
    "severity",
)


def _float(value: float) -> float | str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    return value


def to_json_safe(value: Any) -> Any:
    """Recursively convert `value` into something `json.dumps(..., allow_nan=False)` accepts."""
    if value is None or isinstance(value, bool | str):
        return value
    if isinstance(value, Enum):
        return value.name
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return _float(float(value))
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, dict):
        return {str(to_json_safe(k)): to_json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [to_json_safe(v) for v in value]
    if isinstance(value, StrictConfig):
        return value.to_dict()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_json_safe(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, PurePath):
        return str(value)
    tolist = getattr(value, "tolist", None)
    if callable(tolist):
        try:
            return to_json_safe(tolist())
        except Exception:  # an odd object with a tolist attribute: fall back to its text form
            return str(value)
    return str(value)


def event_to_dict(event: TelemetryEvent) -> dict[str, Any]:
    """Field-by-field like `dataclasses.asdict` (keys in `EVENT_KEYS` order), with the conversions of `to_json_safe`."""
    names = [*EVENT_KEYS, *(f.name for f in dataclasses.fields(event) if f.name not in EVENT_KEYS)]
    return {name: to_json_safe(getattr(event, name)) for name in names}


def event_to_json(event: TelemetryEvent) -> str:
    """One line of `events.jsonl` (no trailing newline)."""
    return json.dumps(event_to_dict(event), allow_nan=False, ensure_ascii=False)
