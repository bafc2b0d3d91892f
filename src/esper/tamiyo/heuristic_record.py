"""The heuristic as a controller spec, with its thresholds from a record: `heuristic` (the defaults),
`heuristic:PATH.json` (a record's thresholds) and `heuristic:tuned` (the record the context names: the heuristic a
study tuned for itself).

A record is a small JSON file: every threshold, the setting they were chosen in and, when a search wrote it, how they
were chosen (objective, budget, trials, best score, seeds, command, commit). Running from a record searches nothing,
so its episodes are those of the search's best trial, bit for bit. Like a learned policy, a record runs only in the
setting it was tuned in unless the context allows a change: its epoch thresholds are tuned to one episode length.
A record naming an unknown threshold, holding a bad value or not being JSON is refused naming the file.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import Field, JsonValue, StrictFloat, StrictInt, ValidationError, field_validator, model_validator

from esper.leyline.constants import MAX_WEIGHT
from esper.leyline.errors import UserInputError
from esper.leyline.seeding import MAX_BASE_SEED
from esper.leyline.strict_config import (
    BatchSize,
    EpisodeLength,
    SampleCap,
    StrictConfig,
    Weight,
    validation_messages,
)
from esper.tamiyo.heuristic import HeuristicPolicyConfig, HeuristicTamiyo
from esper.tamiyo.registry import ControllerContext, check_trained_setting, register_controller

__all__ = ["RECORD_FORMAT", "THRESHOLD_FIELDS", "TUNED", "HeuristicRecord", "ObjectiveRecord", "TunedSetting",
           "TuningSummary", "heuristic_config", "read_heuristic_record"]

RecordFormat = Literal["esper-heuristic-record/1"]
RECORD_FORMAT: RecordFormat = "esper-heuristic-record/1"
TUNED = "tuned"
"""`heuristic:tuned`: the record `ControllerContext.tuned_heuristic` names (a file called `tuned` is `./tuned`)."""
LIFECYCLE_FIELDS = ("seed_training_epochs", "seed_blending_epochs")
"""Set from the task the heuristic runs on (the context), never from a record."""
THRESHOLD_FIELDS = tuple(f for f in HeuristicPolicyConfig.model_fields if f not in LIFECYCLE_FIELDS)
_FIX = "fix it in the record, or write a new one with `esper tune heuristic --output PATH.json`"
MAX_BUDGET = 10**12
MAX_GFLOPS = 1e15


class TunedSetting(StrictConfig):
    """The setting a record's thresholds were chosen in (the keys `check_trained_setting` compares)."""

    KIND: ClassVar[str] = "heuristic record setting"
    FIX: ClassVar[str] = _FIX
    task: str = Field(min_length=1)
    max_epochs: EpisodeLength
    max_train_samples: SampleCap | None
    max_val_samples: SampleCap | None
    batch_size: BatchSize
    lr_schedule: str = Field(min_length=1)
    augment: str = Field(min_length=1)  # the training batches' augmentation in force (none, crop, flip, crop,flip)


class ObjectiveRecord(StrictConfig):
    """What a search maximized: its name, and the charge and its cost when it charged one (e.g. compute, λ)."""

    KIND: ClassVar[str] = "heuristic record objective"
    FIX: ClassVar[str] = _FIX
    name: str = Field(min_length=1)
    charge: str | None = None
    cost: StrictFloat | None = Field(default=None, ge=0.0, le=MAX_WEIGHT)


class TuningSummary(StrictConfig):
    """How a search chose the thresholds: objective, env-epoch budget, trials run (trial 0 the default heuristic),
    the best trial and its score, the default's score, the selection seeds, the sampler, what the search cost to
    obtain, and the command and esper commit that ran it."""

    KIND: ClassVar[str] = "heuristic record tuning"
    FIX: ClassVar[str] = _FIX
    objective: ObjectiveRecord
    budget_env_epochs: StrictInt = Field(ge=1, le=MAX_BUDGET)
    trials: StrictInt = Field(ge=1, le=MAX_BUDGET)
    best_trial: StrictInt = Field(ge=0, le=MAX_BUDGET)
    best_score: Weight
    default_score: Weight
    seeds: StrictInt = Field(ge=1, le=MAX_BUDGET)
    seed: StrictInt = Field(ge=0, le=MAX_BASE_SEED)
    seed_stream: str = Field(min_length=1)
    sampler: str = Field(min_length=1)
    cost_env_epochs: StrictInt = Field(ge=0, le=MAX_BUDGET)
    cost_gflops: StrictFloat = Field(ge=0.0, le=MAX_GFLOPS)
    command: str
    esper_commit: str = Field(min_length=1)
    esper_version: str = Field(min_length=1)

    @model_validator(mode="after")
    def _best_is_a_trial(self) -> TuningSummary:
        if self.best_trial >= self.trials:
            raise ValueError(f"best_trial {self.best_trial} is not one of the {self.trials} trials")
        return self


class HeuristicRecord(StrictConfig):
    """A heuristic's thresholds (any subset of `THRESHOLD_FIELDS`, the rest at their defaults), the setting they
    were chosen in, and the search that chose them (None: a search's candidate, or thresholds set by hand)."""

    KIND: ClassVar[str] = "heuristic record"
    FIX: ClassVar[str] = _FIX
    format: RecordFormat = RECORD_FORMAT
    thresholds: dict[str, JsonValue]
    setting: TunedSetting
    tuning: TuningSummary | None = None

    @field_validator("thresholds")
    @classmethod
    def _known_thresholds(cls, thresholds: dict[str, JsonValue]) -> dict[str, JsonValue]:
        unknown = sorted(set(thresholds) - set(THRESHOLD_FIELDS))
        if unknown:
            raise ValueError(f"unknown thresholds {unknown}; a record sets only {', '.join(THRESHOLD_FIELDS)} (the "
                             f"seed lifecycle comes from the task)")
        heuristic_config(thresholds)
        return thresholds


def heuristic_config(thresholds: dict[str, Any], lifecycle: dict[str, int] | None = None) -> HeuristicPolicyConfig:
    """The heuristic's config: `thresholds` over the defaults, with the task's seed `lifecycle` (None: defaults)."""
    try:
        return HeuristicPolicyConfig.model_validate({**thresholds, **(lifecycle or {})})
    except ValidationError as exc:
        raise ValueError("; ".join(validation_messages(exc))) from None


def read_heuristic_record(path: Path) -> HeuristicRecord:
    """A record from its file; a missing file, bad JSON, an unknown key or a bad value is refused naming the file."""
    fix = "pass a record written by `esper tune heuristic --output PATH.json`"
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UserInputError(f"Heuristic record {path} not found: {fix}") from None
    except (IsADirectoryError, UnicodeDecodeError) as exc:
        raise UserInputError(f"Heuristic record {path} cannot be read ({exc}): {fix}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UserInputError(f"Heuristic record {path} is not valid JSON ({exc}): {fix}") from None
    if not isinstance(data, dict):
        raise UserInputError(f"Heuristic record {path} must hold a JSON object: {fix}")
    try:
        return HeuristicRecord.from_dict(data)
    except UserInputError as exc:
        how = "" if _FIX in str(exc) else f" ({_FIX})"  # unknown keys come without it
        raise UserInputError(f"Heuristic record {path}: {exc}{how}") from None


def _record_path(argument: str, context: ControllerContext) -> Path:
    if argument != TUNED:
        return Path(argument)
    if context.tuned_heuristic is None:
        raise UserInputError("heuristic:tuned runs the heuristic tuned for this study, and none is recorded here: "
                             "name a record instead, heuristic:PATH.json (written by `esper tune heuristic "
                             "--output PATH.json`)")
    return context.tuned_heuristic


def _check_rotation(path: Path, config: HeuristicPolicyConfig, context: ControllerContext) -> None:
    """A record's rotation for the task's topology must exist and name only blueprints the task can build."""
    rotation = config.blueprint_rotation.get(context.topology)
    if rotation is None:
        raise UserInputError(f"Heuristic record {path}: blueprint_rotation has no rotation for '{context.topology}' "
                             f"(it has {sorted(config.blueprint_rotation)}): {_FIX}")
    unknown = [b for b in rotation if b not in context.space.buildable]
    if unknown:
        raise UserInputError(f"Heuristic record {path}: blueprint_rotation for '{context.topology}' names "
                             f"{unknown}, which this task cannot build (it builds {list(context.space.buildable)}): "
                             f"{_FIX}")


@register_controller("heuristic", argument="RECORD", optional=True,
                     summary="rules: germinate early, fossilize proven seeds, cull failing ones; with a record "
                             "(PATH.json, or `tuned`: the study's) its tuned thresholds")
def _heuristic(argument: str | None, context: ControllerContext) -> HeuristicTamiyo:
    lifecycle = {k: v for k, v in (("seed_training_epochs", context.seed_training_epochs),
                                   ("seed_blending_epochs", context.seed_blending_epochs)) if v is not None}
    if argument is None:
        return HeuristicTamiyo(heuristic_config({}, lifecycle), topology=context.topology)
    path = _record_path(argument, context)
    record = read_heuristic_record(path)
    check_trained_setting(f"Heuristic record {path}", record.setting.to_dict(), context, what="tuned")
    config = heuristic_config(record.thresholds, lifecycle)
    _check_rotation(path, config, context)
    return HeuristicTamiyo(config, topology=context.topology)
