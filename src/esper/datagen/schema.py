"""The episode file format: version, crash-safe JSON files, and the structural check every episode passes
before it is written.

Episode files are strict JSON (non-finite floats are written as null, which readers and the health checks treat
as "not a number"). Every file is written to a temporary name in the same directory, flushed to disk and renamed
over the target, so a reader (or a killed run) only ever sees a complete old file or a complete new one.
"""

from __future__ import annotations

import contextlib
import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from esper.datagen.configs import OP_NAMES
from esper.env.features import obs_dim
from esper.leyline import UNRECORDED_HEADS, ActionSpace
from esper.leyline.atomic import TEMP_SUFFIX, atomic_write
from esper.leyline.errors import UserInputError

__all__ = [
    "READABLE_SCHEMA_VERSIONS",
    "SCHEMA_VERSION",
    "finite_or_none",
    "read_json",
    "recorded_space",
    "remove_stale_temp_files",
    "validate_episode",
    "write_strict_json",
]

SCHEMA_VERSION = "2.1.0"
READABLE_SCHEMA_VERSIONS: tuple[str, ...] = ("2.0.0", "2.1.0")


def finite_or_none(value: Any) -> Any:
    """A copy of a JSON-like value with every non-finite float replaced by None (strict JSON has no NaN)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {str(k): finite_or_none(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [finite_or_none(v) for v in value]
    return value


def write_strict_json(path: Path, obj: Any, *, indent: int | None = 2) -> None:
    """Write `obj` as strict JSON (non-finite floats as null), all or nothing (`esper.leyline.atomic`)."""
    text = json.dumps(finite_or_none(obj), indent=indent, allow_nan=False) + "\n"
    atomic_write(path, lambda f: f.write(text))


def remove_stale_temp_files(directory: Path) -> int:
    """Delete temp files a killed writer left behind (only this module's naming pattern); returns the count."""
    removed = 0
    for tmp in directory.glob(f"*.json{TEMP_SUFFIX}"):
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
            removed += 1
    return removed


def read_json(path: Path) -> Any | None:
    """The parsed file, or None when it is missing or not valid JSON (e.g. written by something else)."""
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (FileNotFoundError, json.JSONDecodeError, UnicodeDecodeError):
        return None


def recorded_space(episode: Mapping[str, Any]) -> ActionSpace:
    """The action space an episode was generated in: its topology and the blueprint head its feature schema records
    (an episode written before heads were recorded has its topology's built-in head, the only one there was)."""
    topology = episode.get("topology")
    schema = episode.get("feature_schema")
    head = schema.get("blueprints") if isinstance(schema, Mapping) else None
    if not isinstance(topology, str):
        raise UserInputError("the episode names no topology; regenerate it with this esper version")
    if head is None:
        if topology not in UNRECORDED_HEADS:
            raise UserInputError(f"the episode's feature schema records no blueprint head for topology {topology!r}; "
                                 f"regenerate it with this esper version")
        return ActionSpace(topology, UNRECORDED_HEADS[topology])
    if not isinstance(head, list) or not all(isinstance(b, str) for b in head):
        raise UserInputError("feature_schema.blueprints must be a list of blueprint names")
    return ActionSpace(topology, tuple(head))


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _check_vector(problems: list[str], where: str, value: Any, length: int) -> None:
    """A list of `length` numbers (null allowed: non-finite values are the health check's business)."""
    if not isinstance(value, list) or len(value) != length:
        problems.append(f"{where} must be a list of {length} numbers")
    elif not all(v is None or _is_number(v) for v in value):
        problems.append(f"{where} holds non-numeric entries")


def _check_decision(problems: list[str], i: int, decision: Any, space: ActionSpace, *, gap: bool) -> None:
    where = f"decisions[{i}]"
    if not isinstance(decision, Mapping):
        problems.append(f"{where} is not an object")
        return
    observation, action, outcome = decision.get("observation"), decision.get("action"), decision.get("outcome")
    if not isinstance(observation, Mapping):
        problems.append(f"{where}.observation is missing")
    else:
        _check_vector(problems, f"{where}.observation.features", observation.get("features"), obs_dim(space))
    if not isinstance(action, Mapping):
        problems.append(f"{where}.action is missing")
        return
    if action.get("action") not in OP_NAMES:
        problems.append(f"{where}.action.action must be one of {list(OP_NAMES)}")
    index, joint = action.get("joint_index"), space.num_joint_actions
    if not isinstance(index, int) or not 0 <= index < joint:
        problems.append(f"{where}.action.joint_index must be an int in [0, {joint})")
    for key in ("action_probabilities", "reward_components"):
        if not isinstance(action.get(key), Mapping):
            problems.append(f"{where}.action.{key} is missing")
    for key in ("joint_behavior_prob", "joint_behavior_logp"):
        if key not in action:
            problems.append(f"{where}.action.{key} is missing")
    mask = decision.get("valid_joint_actions")
    if not isinstance(mask, list) or len(mask) != joint or not all(isinstance(v, bool) for v in mask):
        problems.append(f"{where}.valid_joint_actions must be {joint} booleans")
    if not isinstance(outcome, Mapping) or "reward" not in outcome:
        problems.append(f"{where}.outcome.reward is missing")
        return
    components = action.get("reward_components")
    if gap and isinstance(components, Mapping):
        if "gap" not in components:
            problems.append(f"{where}.action.reward_components.gap is missing")
        elif outcome["reward"] != components["gap"]:
            problems.append(f"{where}.outcome.reward differs from the stored (gap) reward component")


def validate_episode(episode: Any, schema_version: str = SCHEMA_VERSION) -> list[str]:
    """Structural problems of an episode of `schema_version` (empty when it is well formed).

    Checks what every reader relies on: identity, configs, per-step features, the executed joint action with its
    behaviour probabilities and validity mask; from 2.1.0 on also the twin, the final features and that the stored
    reward is the `gap` component. Statistical quality (coverage, entropy, finiteness) is the health checks' job.
    """
    if schema_version not in READABLE_SCHEMA_VERSIONS:
        raise UserInputError(f"Unknown schema version {schema_version!r}; readable: {list(READABLE_SCHEMA_VERSIONS)}")
    if not isinstance(episode, Mapping):
        return ["the episode is not a JSON object"]
    problems: list[str] = []
    with_gap = schema_version != "2.0.0"
    if episode.get("schema_version") != schema_version:
        problems.append(f"schema_version must be '{schema_version}', got {episode.get('schema_version')!r}")
    for key in ("episode_id", "task"):
        if not isinstance(episode.get(key), str):
            problems.append(f"{key} must be a string")
    for key in ("random_seed", "max_epochs", "episode_length"):
        if not isinstance(episode.get(key), int):
            problems.append(f"{key} must be an int")
    for key, id_key in (("behavior_policy", "policy_id"), ("environment", "config_id")):
        block = episode.get(key)
        if not isinstance(block, Mapping) or not isinstance(block.get(id_key), str):
            problems.append(f"{key}.{id_key} is missing")
    try:
        space = recorded_space(episode)
    except UserInputError as error:
        problems.append(str(error))
        return problems
    if with_gap:
        _check_twin(problems, episode, space)
    decisions = episode.get("decisions")
    if not isinstance(decisions, list) or not decisions:
        problems.append("decisions must be a non-empty list")
        return problems
    if episode.get("episode_length") != len(decisions):
        problems.append(f"episode_length {episode.get('episode_length')} != {len(decisions)} decisions")
    for i, decision in enumerate(decisions):
        _check_decision(problems, i, decision, space, gap=with_gap)
    return problems


def _check_twin(problems: list[str], episode: Mapping[str, Any], space: ActionSpace) -> None:
    twin = episode.get("twin")
    if not isinstance(twin, Mapping) or not isinstance(twin.get("twin_id"), str):
        problems.append("twin.twin_id is missing")
    else:
        for key in ("val_accuracy_curve", "val_loss_curve"):
            if not isinstance(twin.get(key), list):
                problems.append(f"twin.{key} must be a list")
    _check_vector(problems, "final_features", episode.get("final_features"), obs_dim(space))
