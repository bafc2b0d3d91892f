"""Typed JSONL rows: each line log of a run directory has one dataclass, shared by its writer and its readers.

A reader gets fields, not guesses: a row whose keys differ from its schema is an error naming the file and line.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import TypeVar

from esper.leyline.errors import UserInputError

__all__ = ["LogFormatError", "read_rows", "row_fields"]


class LogFormatError(UserInputError):
    """A line log does not match its schema (written by another esper version, or edited by hand)."""


R = TypeVar("R")


def row_fields(cls: type) -> tuple[set[str], set[str]]:
    """(all field names, required field names) of a row dataclass."""
    fields = dataclasses.fields(cls)
    required = {f.name for f in fields if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING}
    return {f.name for f in fields}, required


def read_rows(path: Path, cls: type[R]) -> list[R]:
    """Every complete line of `path` as a `cls` (a torn last line from a crash is ignored; a missing file is empty).

    `cls` is a dataclass; a `from_dict` classmethod, when it has one, converts nested values.
    """
    if not path.exists():
        return []
    names, required = row_fields(cls)
    build = getattr(cls, "from_dict", None)
    rows: list[R] = []
    lines = path.read_text(encoding="utf-8").splitlines()
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            data = json.loads(line)
        except json.JSONDecodeError:
            if number == len(lines):
                break  # the run was killed while writing this line
            raise LogFormatError(f"{path}:{number} is not valid JSON") from None
        if not isinstance(data, dict) or not required <= set(data) or not set(data) <= names:
            got = sorted(data) if isinstance(data, dict) else type(data).__name__
            raise LogFormatError(f"{path}:{number} does not match the {cls.__name__} schema (fields "
                                 f"{sorted(names)}, got {got}); was it written by another esper version?")
        rows.append(build(data) if build is not None else cls(**data))
    return rows
