"""Strict configuration objects: unknown keys are errors, values are validated once, dicts and JSON round-trip.

A typo in a JSON config or a `--set KEY=VALUE` must fail loudly, naming the valid keys, instead of becoming a knob
that silently does nothing; every config derives from `StrictConfig` to get that behaviour the same way. Fields
declare their ranges as pydantic constraints (`Field(ge=..., le=...)`) on strict numbers (`StrictInt`, `StrictFloat`:
JSON `true` is a typo, not 1), and a description, from which the command line makes each field's flag and help.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, ClassVar, Self

from pydantic import BaseModel, ConfigDict, Field, StrictFloat, StrictInt, ValidationError

from esper.leyline.constants import MAX_BATCH, MAX_EPISODE_LENGTH, MAX_SAMPLES, MAX_WEIGHT
from esper.leyline.errors import UserInputError

__all__ = [
    "BatchSize",
    "EpisodeLength",
    "EpochCount",
    "PositiveEpochCount",
    "SampleCap",
    "StrictConfig",
    "Weight",
    "describe_validation_error",
    "validation_messages",
]

# The sizes several configs share, bounded the same way everywhere.
EpisodeLength = Annotated[StrictInt, Field(ge=2, le=MAX_EPISODE_LENGTH)]
"""Epochs per episode: a decision follows every epoch but the last, so an episode needs two."""
SampleCap = Annotated[StrictInt, Field(ge=1, le=MAX_SAMPLES)]
"""Samples of a split an episode uses."""
BatchSize = Annotated[StrictInt, Field(ge=1, le=MAX_BATCH)]
EpochCount = Annotated[StrictInt, Field(ge=0, le=MAX_EPISODE_LENGTH)]
"""A number of epochs: a threshold, a wait, a grace period."""
PositiveEpochCount = Annotated[StrictInt, Field(ge=1, le=MAX_EPISODE_LENGTH)]
Weight = Annotated[StrictFloat, Field(ge=-MAX_WEIGHT, le=MAX_WEIGHT)]
"""A signed coefficient of a reward or score term, or a threshold on one."""


class StrictConfig(BaseModel):
    """Base of every configuration object; subclasses declare fields and validators. A config is a value: frozen (a
    change is a new config, `with_overrides`), hashable where its fields are, and checked once when built."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
    KIND: ClassVar[str] = "config"  # how error messages name this config
    FIX: ClassVar[str] = "set it with --set KEY=VALUE or in --config-json"  # how a user sets a field

    @classmethod
    def from_dict(cls, d: dict[str, Any], base: Self | None = None) -> Self:
        """Build from a dict (on top of `base`); unknown keys and invalid values raise one ValueError."""
        unknown = sorted(set(d) - set(cls.model_fields))
        if unknown:
            raise UserInputError(f"Unknown {cls.KIND} keys: {unknown}. Valid keys: {', '.join(cls.model_fields)}")
        merged = {**(base.to_dict() if base is not None else {}), **d}
        try:
            return cls(**merged)
        except ValidationError as exc:
            raise UserInputError(describe_validation_error(exc, cls.FIX)) from None

    @classmethod
    def from_json(cls, source: str | Path, base: Self | None = None) -> Self:
        """Build from a JSON object given inline (text starting with `{`, e.g. `'{"seed": 7}'`) or as the path of a
        file holding one, on top of `base`: what a command's --config-json takes."""
        text, where = str(source), "The inline JSON object"
        if not text.lstrip().startswith("{"):
            path, where = Path(source), f"Config file {source}"
            fix = f"pass a JSON file of {cls.__name__} fields, or an inline JSON object such as '{{\"seed\": 7}}'"
            if path.is_dir():
                raise UserInputError(f"Config {path} is a directory: {fix}")
            try:
                text = path.read_text(encoding="utf-8")
            except FileNotFoundError:
                raise UserInputError(f"Config file not found: {path}, and it is not an inline JSON object: {fix}"
                                     ) from None
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise UserInputError(f"{where} is not valid JSON ({exc}): check its syntax") from None
        if not isinstance(data, dict):
            raise UserInputError(f"{where} must hold a JSON object at the top level: use "
                                 f'{{"field": value, ...}}')
        return cls.from_dict(data, base)

    def with_overrides(self, **changes: Any) -> Self:
        return type(self).from_dict(changes, base=self)

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json")


def validation_messages(exc: ValidationError) -> list[str]:
    """Each error as "where: what it should be, got VALUE" ("where" left out for a lone value)."""
    parts = []
    for err in exc.errors():
        msg = str(err["msg"]).removeprefix("Value error, ")
        if err["type"] != "value_error":  # pydantic's own messages do not say what they got; ours do
            got = json.dumps(err["input"], default=str)
            msg += f", got {got if len(got) <= 80 else got[:77] + '...'}"
        where = ".".join(str(x) for x in err["loc"])
        parts.append(f"{where}: {msg}" if where else msg)
    return parts


def describe_validation_error(exc: ValidationError, fix: str) -> str:
    """One line naming every invalid field, what it should be, the value it got, and how to set it (`fix`)."""
    return f"Invalid config: {'; '.join(validation_messages(exc))} ({fix})"
