"""Run directories: every command leaves a self-describing folder.

Small files are written atomically (temp file + rename); line logs are append-only JSONL flushed per write, so an
interrupted run never corrupts what it already wrote.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import platform
import re
import shutil
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

import torch

import esper
from esper.leyline.atomic import TEMP_SUFFIX, atomic_write
from esper.leyline.errors import UserInputError
from esper.storage.rows import jsonl_lines


class RunDirectoryError(UserInputError):
    """The run directory cannot be used as asked (exists without --resume, or is missing for a resume)."""


ARTIFACTS = frozenset({"config.json", "events.jsonl", "steps.jsonl", "episodes.jsonl", "history.jsonl",
                       "results.json", "results.csv", "summary.md", "tb", "checkpoints", "report", "train",
                       "selection", "eval"})
"""What esper writes at the top of a run directory (a study nests run directories as train/, selection/, eval/)."""


def is_run_directory(path: Path) -> bool:
    """An esper run directory: it has config.json, or holds nothing but esper's files (an attempt that died before
    writing config.json). Only such a directory may be reused or replaced; anything else is the user's."""
    names = {p.name for p in path.iterdir()}
    return "config.json" in names or all(n in ARTIFACTS or n.endswith(TEMP_SUFFIX) for n in names)


def checkpoints_dir(run: Path) -> Path:
    """Where a run directory keeps its checkpoints."""
    return run / "checkpoints"


_NOT_RUNS = frozenset({"checkpoints", "tb", "report"})
"""Directories inside a run directory that never hold a run of their own."""


def holds_results(path: Path) -> bool:
    """Whether a run directory holds finished work: a checkpoint other than the untrained init.pt, a completed
    episode or rollout batch, or comparison results (also in any directory below it: a study's phases)."""
    checkpoints = checkpoints_dir(path)
    if checkpoints.is_dir() and any(p.suffix == ".pt" and p.name != "init.pt" for p in checkpoints.iterdir()):
        return True
    if (path / "results.json").exists() or read_jsonl(path / "episodes.jsonl") or read_jsonl(path / "history.jsonl"):
        return True
    return any(sub.is_dir() and sub.name not in _NOT_RUNS and holds_results(sub) for sub in path.iterdir())


def clear_run_directory(path: Path) -> None:
    """Delete a run directory's contents (refusing anything that is not an esper run directory)."""
    if not is_run_directory(path):
        raise RunDirectoryError(f"{path} is not an esper run directory (no config.json): refusing to delete it; "
                                f"choose another --run-dir")
    try:
        shutil.rmtree(path)
        path.mkdir(parents=True)
    except OSError as exc:
        raise RunDirectoryError(f"Cannot clear run directory {path} ({exc.strerror or exc}): check its permissions "
                                f"or choose another --run-dir") from exc


def recorded_config(path: Path) -> dict[str, Any]:
    """A run directory's config.json "config" object (the arguments it was started with)."""
    try:
        record = json.loads((path / "config.json").read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise RunDirectoryError(f"Cannot read {path / 'config.json'} ({exc}): choose another --run-dir or pass "
                                f"--overwrite") from exc
    config = record.get("config") if isinstance(record, dict) else None
    if not isinstance(config, dict):
        raise RunDirectoryError(f"{path / 'config.json'} has no \"config\" object: is it an esper run directory? "
                                f"Choose another --run-dir or pass --overwrite")
    return config


def recorded_command(path: Path) -> str | None:
    """The command a run directory's config.json records, if it can be read."""
    try:
        record = json.loads((path / "config.json").read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None
    return record.get("command") if isinstance(record, dict) and isinstance(record.get("command"), str) else None


def _changes(before: dict[str, Any], after: dict[str, Any], prefix: str = "") -> dict[str, list[Any]]:
    """[before, after] of every value `after` changed, by dotted key through the dicts both hold."""
    out: dict[str, list[Any]] = {}
    for key, value in after.items():
        old = before.get(key)
        if isinstance(old, dict) and isinstance(value, dict):
            out.update(_changes(old, value, f"{prefix}{key}."))
        elif old != value:
            out[f"{prefix}{key}"] = [old, value]
    return out


def json_safe(value: Any) -> Any:
    """Plain JSON values: non-finite floats become "NaN"/"Infinity"/"-Infinity", unknown objects their str()."""
    if isinstance(value, float):
        if math.isnan(value):
            return "NaN"
        if math.isinf(value):
            return "Infinity" if value > 0 else "-Infinity"
        return value
    if isinstance(value, bool | int | str) or value is None:
        return value
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    return str(value)


def write_text_atomic(path: Path, text: str) -> None:
    """Replace `path` with `text`, all or nothing (`esper.leyline.atomic`)."""
    atomic_write(path, lambda f: f.write(text))


def write_json_atomic(path: Path, obj: Any) -> None:
    write_text_atomic(path, json.dumps(json_safe(obj), indent=2) + "\n")


def read_jsonl(path: Path) -> list[Any]:
    """The values of every complete line of a JSONL file (`esper.storage.rows.jsonl_lines`: a torn last line is left
    out, any other invalid line is an error naming it and the fix)."""
    return [line.value for line in jsonl_lines(path)]


def rewrite_jsonl(path: Path, rows: list[dict[str, Any]]) -> None:
    """Atomically replace a JSONL file's content."""
    atomic_write(path, lambda f: f.writelines(json.dumps(json_safe(row)) + "\n" for row in rows))


def checkpoint_file(path: Path, name: str) -> Path:
    """A checkpoint file as given, or a run directory meaning its `checkpoints/<name>`."""
    return checkpoints_dir(path) / name if path.is_dir() else path


def run_dir_of(path: Path) -> Path:
    """A run directory as given, or the run directory a checkpoint file (`RUN/checkpoints/NAME.pt`) belongs to."""
    return path if path.is_dir() else path.parent.parent


RUN_DIR_NAME = "{command}_{task}_s{seed}_{digest}"
"""A default run directory's name (the command line's help spells it from this pattern too)."""


def default_run_dir(runs_root: Path, command: str, task: str, seed: int, settings: dict[str, Any]) -> Path:
    """`runs_root/<command>_<task>_s<seed>_<digest>`, the digest naming every setting of the command: rerunning the
    same command finds its own directory (and continues it, or shows its finished results), while a command with
    any other setting gets a directory of its own."""
    text = json.dumps(json_safe(settings), sort_keys=True)
    digest = hashlib.sha256(text.encode()).hexdigest()[:8]
    return runs_root / RUN_DIR_NAME.format(command=command, task=task_slug(task), seed=seed, digest=digest)


def task_slug(task: str) -> str:
    """A task's name as a file name: a task on files (`npz:data/digits.npz`) is its form, file stem and a digest of
    the whole name (`npz-digits-1c2f3a4b`), so two files of one stem never share a run directory or a cache file."""
    form, sep, argument = task.partition(":")
    if not sep:
        return task
    digest = hashlib.sha256(task.encode()).hexdigest()[:8]
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", f"{form}-{Path(argument).stem}-{digest}")


class RunDirectory:
    """A run's folder: config.json, JSONL logs and checkpoints/."""

    def __init__(self, path: Path, *, resume: bool = False) -> None:
        self.path = Path(path)
        if self.path.exists() and not self.path.is_dir():
            raise RunDirectoryError(f"Run directory {self.path} is a file, not a directory: choose another --run-dir")
        if resume:
            if not (self.path / "config.json").exists():
                raise RunDirectoryError(f"Cannot resume: {self.path} has no config.json (is it an esper run "
                                        f"directory?); choose another --run-dir")
        elif self.path.exists() and any(self.path.iterdir()):
            raise RunDirectoryError(
                f"Run directory {self.path} already exists and is not empty: choose another --run-dir "
                f"(or pass --overwrite to replace it)."
            )
        missing = [p for p in (self.path, *self.path.parents) if not p.exists()]
        self.created_root: Path | None = missing[-1] if missing else None  # what removing a failed start removes
        try:
            self.path.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise RunDirectoryError(f"Cannot create run directory {self.path} ({exc.strerror or exc}"
                                    f"{': ' + str(exc.filename) if exc.filename else ''}): choose a writable "
                                    f"--run-dir or --runs-root") from exc
        if not os.access(self.path, os.W_OK | os.X_OK):
            raise RunDirectoryError(f"Run directory {self.path} is not writable: check its permissions or choose "
                                    f"another --run-dir")
        self._logs: dict[str, TextIO] = {}

    @property
    def checkpoints(self) -> Path:
        """checkpoints/ (created on first use, so an aborted start leaves the directory reusable)."""
        path = checkpoints_dir(self.path)
        path.mkdir(exist_ok=True)
        return path

    def write_config(self, command: str, argv: list[str], config: dict[str, Any], runtime: dict[str, Any]) -> None:
        write_json_atomic(self.path / "config.json", {
            "command": command,
            "argv": argv,
            "config": config,
            "runtime": runtime,
            "versions": {"esper": esper.__version__, "torch": torch.__version__, "python": platform.python_version()},
            "started_at": datetime.now(UTC).isoformat(),
            "python_executable": sys.executable,
        })

    def record_resume(self, argv: list[str], config: dict[str, Any], resumed_at: dict[str, Any]) -> None:
        """Keep config.json the effective config after a resume that changed resumable fields; log each resume
        (`resumed_at` says where it continued, e.g. {"from_batch": 3}) with what it changed, by dotted key where the
        config nests (`ppo.n_episodes`)."""
        path = self.path / "config.json"
        record = json.loads(path.read_text(encoding="utf-8"))
        changed = _changes(record["config"], json_safe(config))
        record["config"] = config
        record.setdefault("resumes", []).append(
            {"argv": argv, "at": datetime.now(UTC).isoformat(), **resumed_at, "changed": changed})
        write_json_atomic(path, record)

    def append(self, name: str, row: dict[str, Any]) -> None:
        """Append one JSON line to `name` (e.g. "steps.jsonl") and flush it."""
        f = self._logs.get(name)
        if f is None:
            f = self._logs[name] = open(self.path / name, "a", encoding="utf-8")  # noqa: SIM115
        f.write(json.dumps(json_safe(row)) + "\n")
        f.flush()

    def sync(self) -> None:
        """Force every line appended so far onto the disk (a checkpoint that counts them is saved after this)."""
        for f in self._logs.values():
            f.flush()
            os.fsync(f.fileno())

    def write_json(self, name: str, obj: Any) -> None:
        write_json_atomic(self.path / name, obj)

    def close(self) -> None:
        for f in self._logs.values():
            f.close()
        self._logs = {}
