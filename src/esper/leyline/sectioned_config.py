"""A config made of sections, each a `StrictConfig` of its own, and the keys that name its settings.

A setting is named by its dotted path (`ppo.lr`) or, where exactly one section has a field of that name, by the plain
name (`lr`); a setting outside every section (`seed`) by its name alone. A section given as a JSON object
(`{"ppo": {"lr": 0.001}}`) changes only the fields it names. A key that names nothing is refused with the key it most
likely misspells; a plain name that several sections share is refused with the dotted keys it could mean.

What a config records (a checkpoint, a run directory) is its nested `to_dict()`, read back by `from_record`, which
refuses a dict of another shape (say one written before the config had sections) with the fix the caller names.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, Self

from pydantic import ValidationError
from pydantic.fields import FieldInfo

from esper.leyline.errors import UserInputError, did_you_mean
from esper.leyline.strict_config import StrictConfig, describe_validation_error

__all__ = ["SectionedConfig", "dotted_items", "dotted_leaves"]


def dotted_items(nested: Mapping[str, Any], sections: Mapping[str, Any]) -> Iterator[tuple[str, Any]]:
    """(dotted key, value) of every setting of a nested dict whose `sections` are dicts of settings."""
    for key, value in nested.items():
        if key in sections and isinstance(value, Mapping):
            yield from ((f"{key}.{name}", v) for name, v in value.items())
        else:
            yield key, value


def dotted_leaves(nested: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Every value of a nested dict at any depth, by dotted key (`training.ppo.lr`); an empty dict is a value."""
    out: dict[str, Any] = {}
    for key, value in nested.items():
        if isinstance(value, Mapping) and value:
            out.update(dotted_leaves(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


class SectionedConfig(StrictConfig):
    """A StrictConfig whose fields of a StrictConfig type are sections: `from_dict` and `with_overrides` take dotted,
    plain and section keys (see the module docstring); the constructor takes the nested shape only."""

    @classmethod
    def sections(cls) -> dict[str, type[StrictConfig]]:
        """Section name → its config type."""
        return {name: field.annotation for name, field in cls.model_fields.items()
                if isinstance(field.annotation, type) and issubclass(field.annotation, StrictConfig)}

    @classmethod
    def settings(cls) -> dict[str, FieldInfo]:
        """Dotted key → field, for every setting (a section's fields, and the fields outside every section)."""
        sections = cls.sections()
        out: dict[str, FieldInfo] = {}
        for name, field in cls.model_fields.items():
            section = sections.get(name)
            if section is None:
                out[name] = field
            else:
                out.update({f"{name}.{inner}": f for inner, f in section.model_fields.items()})
        return out

    @classmethod
    def plain_names(cls) -> dict[str, list[str]]:
        """Plain name → the dotted keys of the settings so named (one, unless sections share the name)."""
        names: dict[str, list[str]] = {}
        for key in cls.settings():
            names.setdefault(key.rpartition(".")[2], []).append(key)
        return names

    @classmethod
    def _lookup(cls, key: str) -> str | None:
        """`key`'s dotted key; None where it names no setting; an ambiguous plain name is refused."""
        if key in cls.settings():
            return key
        found = cls.plain_names().get(key, [])
        if len(found) > 1:
            raise UserInputError(f"'{key}' is ambiguous in the {cls.KIND}: it names {', '.join(found)}; use one of "
                                 f"these dotted keys")
        return found[0] if found else None

    @classmethod
    def _unknown(cls, keys: list[str]) -> UserInputError:
        plain = cls.plain_names()
        names = [*cls.settings(), *(n for n, found in plain.items() if len(found) == 1)]

        def hint(key: str) -> str:
            moved = plain.get(key.rpartition(".")[2], [])  # a setting named in the wrong section
            return f" (did you mean '{moved[0]}'?)" if len(moved) == 1 else did_you_mean(key, names)

        hints = "".join(hint(key) for key in keys)
        return UserInputError(f"Unknown {cls.KIND} keys: {keys}{hints}. Valid keys: {', '.join(cls.settings())}")

    @classmethod
    def dotted(cls, changes: Mapping[str, Any]) -> dict[str, Any]:
        """`changes` keyed by dotted keys (a section's object or config expanded into its settings), in order: a later
        change of a setting wins."""
        sections = cls.sections()
        out: dict[str, Any] = {}
        unknown: list[str] = []
        for key, value in changes.items():
            if key in sections:
                given = value.to_dict() if isinstance(value, StrictConfig) else value
                if not isinstance(given, Mapping):
                    raise UserInputError(f"'{key}' is a section of the {cls.KIND}: pass its settings as a JSON object "
                                         f"(e.g. {{\"{key}\": {{...}}}}), or set one of them as {key}.NAME")
                items = [(f"{key}.{name}", v) for name, v in given.items()]
            else:
                items = [(key, value)]
            for name, v in items:
                found = cls._lookup(name)
                if found is None:
                    unknown.append(name)
                else:
                    out[found] = v
        if unknown:
            raise cls._unknown(unknown)
        return out

    @classmethod
    def nested(cls, dotted: Mapping[str, Any]) -> dict[str, Any]:
        """Dotted keys (as `dotted` gives them) as the nested dict the constructor takes."""
        out: dict[str, Any] = {}
        for key, value in dotted.items():
            section, dot, name = key.partition(".")
            if dot:
                out.setdefault(section, {})[name] = value
            else:
                out[key] = value
        return out

    @classmethod
    def from_dict(cls, d: dict[str, Any], base: Self | None = None) -> Self:
        """Build from dotted, plain or section keys on top of `base` (a section's fields it does not name keep `base`'s
        values, or their defaults); unknown or ambiguous keys and invalid values raise one UserInputError."""
        changes = cls.nested(cls.dotted(d))
        merged = base.to_dict() if base is not None else {}
        for key, value in changes.items():
            merged[key] = {**merged.get(key, {}), **value} if key in cls.sections() else value
        try:
            return cls(**merged)
        except ValidationError as exc:
            raise UserInputError(describe_validation_error(exc, cls.FIX)) from None

    @classmethod
    def from_record(cls, d: Mapping[str, Any], *, where: str, fix: str) -> Self:
        """The config `where` recorded (its nested `to_dict()`); a dict of another shape is refused naming `fix`."""
        flat = sorted(k for k in d if k not in cls.model_fields and k in cls.plain_names())
        if flat:
            raise UserInputError(f"{where} records a {cls.__name__} of another shape ({', '.join(flat)} outside the "
                                 f"sections {', '.join(cls.sections())}): it was written by an esper whose config had "
                                 f"no sections. {fix}")
        try:
            return cls(**d)
        except ValidationError as exc:
            raise UserInputError(f"{where}: {describe_validation_error(exc, fix)}") from None

    def dotted_dict(self) -> dict[str, Any]:
        """`to_dict()` keyed by dotted keys, one entry per setting."""
        return dict(dotted_items(self.to_dict(), self.sections()))
