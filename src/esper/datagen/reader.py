"""Reading datagen directories: every episode file parsed, version-checked and structurally validated, or one error.

Loaders, exporters, reports and health checks all read through here, so a directory holding a truncated file, an
episode of another schema version (older files are never converted), or features of another observation schema fails
at once, naming the file and what to do, instead of producing a dataset that is silently missing episodes.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from esper.datagen.schema import SCHEMA_VERSION, validate_episode
from esper.leyline import OBS_SCHEMA
from esper.leyline.errors import UserInputError
from esper.storage.rundir import recorded_command

__all__ = ["MANIFEST_FILE", "NOT_EPISODES", "EpisodeFormatError", "check_resumable", "episode_files",
           "read_episode_file", "read_episodes", "require_not_run_directory"]

MANIFEST_FILE = "manifest.json"
NOT_EPISODES = frozenset({MANIFEST_FILE, "health_report.json"})


class EpisodeFormatError(UserInputError):
    """An episode file that cannot be read as a datagen episode of a readable schema."""


def episode_files(directory: Path) -> list[Path]:
    """The episode files of a datagen directory (top-level JSON files other than its manifest and reports)."""
    return sorted(p for p in directory.glob("*.json") if not p.name.startswith(".") and p.name not in NOT_EPISODES)


def require_not_run_directory(directory: Path, fix: str) -> None:
    """Refuse the run directory of another esper command (its config.json and results.json are no episodes), saying
    what it is and `fix`, instead of failing on its first JSON file."""
    command = recorded_command(directory)
    if command is not None and not (directory / MANIFEST_FILE).is_file():
        raise UserInputError(f"{directory} is the run directory of `esper {command}`, not a datagen dataset: {fix}")


def read_episode_file(path: Path) -> dict[str, Any]:
    """One episode, checked: valid JSON, this esper's schema version, its observation features, and the structure
    the schema promises."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise EpisodeFormatError(f"{path} is not valid JSON ({error}); remove or regenerate it") from None
    if not isinstance(data, dict):
        raise EpisodeFormatError(f"{path} is not a datagen episode (not a JSON object); move it out of the directory")
    version = data.get("schema_version")
    if version != SCHEMA_VERSION:
        raise EpisodeFormatError(f"{path} has episode schema {version!r}; this esper reads schema {SCHEMA_VERSION} "
                                 "only: regenerate the dataset into a new directory with `esper datagen --output-dir "
                                 "DIR` (or read it with the esper version that wrote it)")
    schema = data.get("feature_schema")
    name = schema.get("name") if isinstance(schema, dict) else None
    if name is not None and name != OBS_SCHEMA:
        raise EpisodeFormatError(f"{path} holds observation features '{name}', this esper uses '{OBS_SCHEMA}'; "
                                 "regenerate the data with this version")
    problems = validate_episode(data)
    if problems:
        shown = "; ".join(problems[:3]) + ("; …" if len(problems) > 3 else "")
        raise EpisodeFormatError(f"{path} is a malformed schema-{SCHEMA_VERSION} episode: {shown}")
    return data


def read_episodes(directories: Path | str | Sequence[Path | str]) -> list[dict[str, Any]]:
    """Every episode of one or more datagen directories, in (directory, file name) order; an empty selection is
    an error, and so is an episode id that appears twice (the same data loaded twice would be double-counted)."""
    dirs = [Path(directories)] if isinstance(directories, str | Path) else [Path(d) for d in directories]
    if not dirs:
        raise UserInputError("No datagen directory given")
    episodes: list[dict[str, Any]] = []
    seen: dict[str, Path] = {}
    for directory in dirs:
        if not directory.is_dir():
            raise FileNotFoundError(f"Datagen directory {directory} does not exist")
        require_not_run_directory(directory, "pass a directory written by `esper datagen --output-dir DIR`")
        files = episode_files(directory)
        if not files:
            raise UserInputError(f"{directory} holds no episode files; generate some with `esper datagen --output-dir "
                                 f"{directory}`")
        for path in files:
            episode = read_episode_file(path)
            episode_id = str(episode["episode_id"])
            if episode_id in seen:
                raise UserInputError(f"Episode {episode_id} appears in both {seen[episode_id]} and {directory}; load "
                                     "each dataset once")
            seen[episode_id] = directory
            episodes.append(episode)
    return episodes


def check_resumable(directory: Path) -> None:
    """Generation writes into a directory only if every episode file there is one it could have written itself:
    it never silently overwrites a foreign, truncated or older-schema file."""
    if directory.is_dir():
        require_not_run_directory(directory, "choose another --output-dir for the dataset")
        for path in episode_files(directory):
            read_episode_file(path)
