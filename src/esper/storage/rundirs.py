"""Which run directory a command writes to, and whether it starts, reuses, replaces or resumes it.

Rules, the same for every command:
* a missing or empty directory is created;
* `--overwrite` replaces an esper run directory (never anything else: a folder without config.json that holds
  other files is the user's);
* a directory of this command that holds nothing the command can continue from (an attempt that failed at startup
  or was killed before its first checkpoint or episode) is reused as if it were new;
* a directory the command can continue from is resumed when the arguments match, and refused with the differing
  arguments named when they do not;
* a directory holding another command's finished work is refused.
A command that fails on bad input before finishing anything removes what it created (`discard_on_error`), so the
same command can be rerun as is; any other failure is esper's, and leaves its traceback in the run directory.
"""

from __future__ import annotations

import shutil
import traceback
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal

from esper.leyline.errors import UserInputError
from esper.leyline.sectioned_config import dotted_leaves
from esper.storage.rundir import (
    RunDirectory,
    RunDirectoryError,
    clear_run_directory,
    holds_results,
    is_run_directory,
    json_safe,
    recorded_command,
    write_text_atomic,
)

__all__ = ["TRACEBACK_FILE", "USER_ERRORS", "check_same_arguments", "discard_on_error", "prepare_run_dir",
           "save_traceback", "saved_traceback"]

Claim = Literal["new", "existing"]
TRACEBACK_FILE = "traceback.txt"
_SAVED_AT = "esper traceback saved at "
USER_ERRORS = (UserInputError, OSError)
"""Bad input: a clear message (exit 2 on the command line). OSError covers the file system saying no (a path that is
a file, a directory without write permission, a full disk), which the user fixes, not the code. Anything else is a
fault of esper's: exit 1, its traceback saved (in the run directory when there is one) and named."""


def save_traceback(exc: BaseException, path: Path) -> Path:
    """Write `exc`'s traceback to `path` and note the path on the exception, so the command line can point to it."""
    write_text_atomic(path, "".join(traceback.format_exception(exc)))
    exc.add_note(f"{_SAVED_AT}{path}")
    return path


def saved_traceback(exc: BaseException) -> Path | None:
    """Where `save_traceback` put `exc`'s traceback, if it did."""
    for note in getattr(exc, "__notes__", ()):
        if note.startswith(_SAVED_AT):
            return Path(note.removeprefix(_SAVED_AT))
    return None


def prepare_run_dir(path: Path, *, command: str, overwrite: bool, resumable: Callable[[Path], bool]) -> Claim:
    """"new" when the command starts from scratch in `path` (emptied if needed), "existing" when `path` holds work
    of `command` that `resumable` says it can continue; raises RunDirectoryError otherwise."""
    if path.exists() and not path.is_dir():
        raise RunDirectoryError(f"Run directory {path} is a file, not a directory: choose another --run-dir")
    try:
        empty = not path.exists() or not any(path.iterdir())
    except OSError as exc:
        raise RunDirectoryError(f"Cannot read run directory {path} ({exc.strerror or exc}): check its permissions "
                                f"or choose another --run-dir") from exc
    if empty:
        return "new"
    if not is_run_directory(path):
        raise RunDirectoryError(f"{path} already exists and is not an esper run directory (no config.json): choose "
                                f"another --run-dir")
    if overwrite:
        clear_run_directory(path)
        return "new"
    recorded = recorded_command(path)
    if recorded not in (None, command) and holds_results(path):
        raise RunDirectoryError(f"{path} holds a finished '{recorded}' run, not a '{command}' run: choose another "
                                f"--run-dir, or pass --overwrite to replace it")
    if recorded == command and resumable(path):
        return "existing"
    clear_run_directory(path)  # nothing finished in it: the leftovers of an attempt that died early
    return "new"


_SAME_ARGUMENTS_FIX = ("rerun with the same arguments to resume it, or pass --overwrite (or another --run-dir) to "
                       "start over")


def check_same_arguments(path: Path, recorded: Mapping[str, Any], requested: Mapping[str, Any], *,
                         may_differ: tuple[str, ...] = (), fix: str = _SAME_ARGUMENTS_FIX) -> None:
    """A rerun continues a run only with the arguments it was started with (`may_differ` excepted); otherwise it is
    refused, naming each differing argument (a nested one by its dotted key: `training.ppo.lr`) and `fix`."""
    old, new = (dotted_leaves({k: v for k, v in json_safe(dict(c)).items() if k not in may_differ})
                for c in (recorded, requested))
    differing = sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))
    if differing:
        changes = "; ".join(f"{k}: {old.get(k)!r} then, {new.get(k)!r} now" for k in differing)
        raise RunDirectoryError(f"{path} holds a run started with other arguments ({changes}): {fix}")


@contextmanager
def discard_on_error(run_dir: RunDirectory, *, fresh: bool, errors: tuple[type[BaseException], ...]
                     ) -> Iterator[RunDirectory]:
    """Remove a freshly started run directory again when one of `errors` (bad input) ends the command before it
    finished anything; a resumed directory, and one holding finished work, are always kept. Any other exception is a
    fault of esper's: its traceback is saved in the run directory for a bug report."""
    try:
        yield run_dir
    except errors:
        run_dir.close()
        if fresh and run_dir.path.is_dir() and not holds_results(run_dir.path):
            if run_dir.created_root is not None:  # created here, with any parents it needed
                shutil.rmtree(run_dir.created_root, ignore_errors=True)
            else:
                clear_run_directory(run_dir.path)
        raise
    except Exception as exc:
        if run_dir.path.is_dir():
            save_traceback(exc, run_dir.path / TRACEBACK_FILE)
        raise
