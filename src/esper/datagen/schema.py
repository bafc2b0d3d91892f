"""The episode file format: version, crash-safe JSON files, and the structural check every episode passes
before it is written.

Schema 3.0.0 records each decision's reward in every reward family of the episode layer (`rewards`, keyed by family:
the family's components and total), the episode's `reward_family` naming the one stored as the outcome's `reward`
(with its `return_to_go`). Only this version is read: older files are refused naming the fix, regenerating them
with `esper datagen`.

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
from esper.env.rewards import RewardFamily
from esper.leyline import ActionSpace
from esper.leyline.atomic import TEMP_SUFFIX, atomic_write
from esper.leyline.errors import UserInputError

__all__ = [
    "REWARD_FAMILIES",
    "SCHEMA_VERSION",
    "finite_or_none",
    "read_json",
    "recorded_space",
    "remove_stale_temp_files",
    "validate_episode",
    "write_strict_json",
]

SCHEMA_VERSION = "3.0.0"
REWARD_FAMILIES: tuple[str, ...] = tuple(f.value for f in RewardFamily)


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
    """The action space an episode was generated in: its topology and the blueprint head its feature schema
    records."""
    topology = episode.get("topology")
    schema = episode.get("feature_schema")
    head = schema.get("blueprints") if isinstance(schema, Mapping) else None
    if not isinstance(topology, str):
        raise UserInputError("the episode names no topology")
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


def _check_rewards(problems: list[str], where: str, rewards: Any, outcome: Mapping[str, Any], stored: Any) -> None:
    """Every family's components with their total; the outcome's reward is the stored family's total."""
    if not isinstance(rewards, Mapping):
        problems.append(f"{where}.rewards is missing")
        return
    families = {family: c for family, c in rewards.items() if isinstance(c, Mapping)}
    for family in REWARD_FAMILIES:
        if "total" not in families.get(family, {}):
            problems.append(f"{where}.rewards.{family}.total is missing")
    for key in ("reward", "return_to_go"):
        if key not in outcome:
            problems.append(f"{where}.outcome.{key} is missing")
    if stored in families and "reward" in outcome and outcome["reward"] != families[stored].get("total"):
        problems.append(f"{where}.outcome.reward differs from the stored ({stored}) family's total")


def _check_decision(problems: list[str], i: int, decision: Any, space: ActionSpace, stored: Any) -> None:
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
    if not isinstance(action.get("action_probabilities"), Mapping):
        problems.append(f"{where}.action.action_probabilities is missing")
    for key in ("joint_behavior_prob", "joint_behavior_logp"):
        if key not in action:
            problems.append(f"{where}.action.{key} is missing")
    mask = decision.get("valid_joint_actions")
    if not isinstance(mask, list) or len(mask) != joint or not all(isinstance(v, bool) for v in mask):
        problems.append(f"{where}.valid_joint_actions must be {joint} booleans")
    if not isinstance(outcome, Mapping):
        problems.append(f"{where}.outcome is missing")
        return
    _check_rewards(problems, where, decision.get("rewards"), outcome, stored)


def validate_episode(episode: Any) -> list[str]:
    """Structural problems of an episode (empty when it is well formed).

    Checks what every reader relies on: identity, configs, the twin, per-step and final features, the executed joint
    action with its behaviour probabilities and validity mask, and every reward family's total with the stored one
    as the outcome's reward. Statistical quality (coverage, entropy, finiteness) is the health checks' job.
    """
    if not isinstance(episode, Mapping):
        return ["the episode is not a JSON object"]
    problems: list[str] = []
    if episode.get("schema_version") != SCHEMA_VERSION:
        problems.append(f"schema_version must be '{SCHEMA_VERSION}', got {episode.get('schema_version')!r}")
    for key in ("episode_id", "task"):
        if not isinstance(episode.get(key), str):
            problems.append(f"{key} must be a string")
    for key in ("random_seed", "max_epochs", "episode_length"):
        if not isinstance(episode.get(key), int):
            problems.append(f"{key} must be an int")
    stored = episode.get("reward_family")
    if stored not in REWARD_FAMILIES:
        problems.append(f"reward_family must be one of {list(REWARD_FAMILIES)}, got {stored!r}")
    for key, id_key in (("behavior_policy", "policy_id"), ("environment", "config_id")):
        block = episode.get(key)
        if not isinstance(block, Mapping) or not isinstance(block.get(id_key), str):
            problems.append(f"{key}.{id_key} is missing")
    try:
        space = recorded_space(episode)
    except UserInputError as error:
        problems.append(str(error))
        return problems
    _check_twin(problems, episode, space)
    decisions = episode.get("decisions")
    if not isinstance(decisions, list) or not decisions:
        problems.append("decisions must be a non-empty list")
        return problems
    if episode.get("episode_length") != len(decisions):
        problems.append(f"episode_length {episode.get('episode_length')} != {len(decisions)} decisions")
    for i, decision in enumerate(decisions):
        _check_decision(problems, i, decision, space, stored)
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
