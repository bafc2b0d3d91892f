"""Typed JSONL rows: each line log of a run directory has one dataclass, shared by its writer and its readers.

A reader gets fields, not guesses: a row whose keys differ from its schema is an error naming the file and line.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from esper.leyline.errors import UserInputError

__all__ = ["JsonlLine", "LogFormatError", "as_row", "jsonl_lines", "read_rows", "row_fields"]


class LogFormatError(UserInputError):
    """A line log does not match its schema (written by another esper version, or edited by hand)."""


R = TypeVar("R")

REPAIR = ("repair or delete that line, then rerun the command that wrote it: it recomputes what the line held, or says "
          "why it cannot")
"""What to do about a damaged line: every resumable command recomputes what a log lacks, or refuses naming the fix."""


@dataclass(frozen=True)
class JsonlLine:
    """One complete line of a JSONL file: its 1-based number, its text (without the newline) and its value."""

    number: int
    text: str
    value: Any


def jsonl_lines(path: Path) -> list[JsonlLine]:
    """Every complete line of `path` (a missing file has none).

    A last line that is not valid JSON is torn (the writer was killed mid-line) and left out: what it held was not
    finished, and whoever resumes decides whether it must be recomputed. Any other invalid line is damage, an error
    naming the line and the fix.
    """
    if not path.exists():
        return []
    texts = path.read_text(encoding="utf-8").splitlines()
    while texts and not texts[-1].strip():
        texts.pop()
    lines = []
    for number, text in enumerate(texts, start=1):
        if not text.strip():
            continue
        try:
            value = json.loads(text)
        except json.JSONDecodeError:
            if number == len(texts):
                break
            raise LogFormatError(f"{path}:{number} is not valid JSON: {REPAIR}") from None
        lines.append(JsonlLine(number, text, value))
    return lines


def row_fields(cls: type) -> tuple[set[str], set[str]]:
    """(all field names, required field names) of a row dataclass."""
    fields = dataclasses.fields(cls)
    required = {f.name for f in fields if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING}
    return {f.name for f in fields}, required


def as_row(data: Any, cls: type[R], where: str) -> R:
    """`data` (one parsed line, found at `where`) as a `cls`; a `from_dict` classmethod, when `cls` has one, converts
    nested values."""
    names, required = row_fields(cls)
    if not isinstance(data, dict) or not required <= set(data) or not set(data) <= names:
        got = sorted(data) if isinstance(data, dict) else type(data).__name__
        raise LogFormatError(f"{where} does not match the {cls.__name__} schema (fields {sorted(names)}, got {got}): "
                             f"read it with the esper version that wrote it, or, if it was edited, {REPAIR}")
    build = getattr(cls, "from_dict", None)
    row: R = build(data) if build is not None else cls(**data)
    return row


def read_rows(path: Path, cls: type[R]) -> list[R]:
    """Every complete line of `path` as a `cls` (a torn last line is left out; a missing file is empty)."""
    return [as_row(line.value, cls, f"{path}:{line.number}") for line in jsonl_lines(path)]
