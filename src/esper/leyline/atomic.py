"""Files replaced whole or never: the one way esper writes a file that a later run, a reader or a resume depends on.

A writer killed mid-write must leave the old file or the new one, never half of one, so every such file is written
to `<name>.tmp` beside it, flushed and fsynced, then renamed over the target (a rename within one directory is
atomic on POSIX and Windows). A write that fails removes its temp file; one killed outright leaves it behind, under a
name `TEMP_SUFFIX` lets a resume recognise and delete.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

__all__ = ["TEMP_SUFFIX", "atomic_write"]

TEMP_SUFFIX = ".tmp"


def atomic_write(path: str | Path, write: Callable[[IO[Any]], object], *, binary: bool = False) -> None:
    """Replace `path` with what `write(file)` writes (text in UTF-8, or bytes when `binary`), all or nothing."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + TEMP_SUFFIX)
    try:
        with open(tmp, "wb") if binary else open(tmp, "w", encoding="utf-8") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        raise
