"""Command-line flags made from a `StrictConfig`'s fields: one `--field-name` per setting, stored under the field's
name, so one name carries a setting from the flag through the config to the logs. A config made of sections
(`SectionedConfig`) gets one flag per setting of every section, named by the setting's plain name (its dotted key where
sections share the name).

A flag reads its text as `--set` does (JSON, else a bare string; text fields take the text as is) and checks it
against the field's type and range at once, so a bad value names its flag; the config's validators (relations
between fields) run when the config is built. A flag cannot unset a field (`--set FIELD=null` does). Precedence:
the command's base config → --config-json → --set → flags. An argument stored under a field's name sets that field,
whichever function added it (the shared --seed and scale flags follow the same rule).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import types
from collections.abc import Callable, Collection, Mapping, Sequence
from enum import Enum
from typing import Annotated, Any, Literal, TypeVar, Union, get_args, get_origin

from pydantic import ConfigDict, TypeAdapter, ValidationError
from pydantic.fields import FieldInfo

from esper.leyline.errors import UserInputError
from esper.leyline.sectioned_config import SectionedConfig
from esper.leyline.strict_config import StrictConfig, validation_messages

__all__ = ["add_config_flags", "config_changes", "config_from_args", "flag_fields", "value_type"]

C = TypeVar("C", bound=StrictConfig)


def parse_sets(items: Sequence[str]) -> dict[str, Any]:
    """`--set KEY=VALUE` items as config changes; VALUE is JSON, or a bare string (`--set task=synthetic`)."""
    changes: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep:
            raise UserInputError(f"--set expects KEY=VALUE, got '{item}': pass a config field and its value, "
                                 f"e.g. --set lr=0.001")
        try:
            changes[key] = json.loads(raw)
        except json.JSONDecodeError:
            changes[key] = raw
    return changes


def _without_none(annotation: Any) -> Any:
    """`X | None` → X (a flag cannot be given None; leaving it out keeps the config's value)."""
    if get_origin(annotation) in (Union, types.UnionType):
        rest = [a for a in get_args(annotation) if a is not type(None)]
        return rest[0] if len(rest) == 1 else Union[tuple(rest)]  # noqa: UP007 (a runtime-built union)
    return annotation


def _bare(annotation: Any) -> Any:
    while get_origin(annotation) is Annotated:
        annotation = get_args(annotation)[0]
    return annotation


def _choices(annotation: Any) -> list[str] | None:
    bare = _bare(annotation)
    if get_origin(bare) is Literal and all(isinstance(a, str) for a in get_args(bare)):
        return list(get_args(bare))
    if isinstance(bare, type) and issubclass(bare, Enum):
        return [str(m.value) for m in bare]
    return None


def value_type(annotation: Any, field: str, *, text: bool = False) -> Callable[[str], Any]:
    """argparse type: a flag's text validated as `annotation` (a field's type and constraints). The text is read as
    JSON, else as a number ("inf" is one, refused as not finite), else kept as text; `text`: always kept as text."""
    adapter: TypeAdapter[Any] = TypeAdapter(annotation, config=ConfigDict(allow_inf_nan=False))

    def parse(raw: str) -> Any:
        value: Any = raw
        if not text:
            try:
                value = json.loads(raw)
            except json.JSONDecodeError:
                with contextlib.suppress(ValueError):
                    value = float(raw)
        if value is None:
            raise argparse.ArgumentTypeError(f"a flag takes a value; set null with --set {field}=null")
        try:
            return adapter.validate_python(value)
        except ValidationError as exc:
            raise argparse.ArgumentTypeError("; ".join(validation_messages(exc))) from None
    return parse


def _is_text(annotation: Any) -> bool:
    return _bare(annotation) is str or _choices(annotation) is not None


def _format(value: Any) -> str:
    if isinstance(value, Enum):
        return str(value.value)
    if isinstance(value, list | tuple):
        return " ".join(map(str, value))
    if isinstance(value, dict):
        return json.dumps(value)
    if isinstance(value, bool):
        return "on" if value else "off"
    return str(value)


def _flag_kwargs(name: str, field: FieldInfo) -> dict[str, Any]:
    annotation = _without_none(field.annotation)
    if annotation is bool:
        return {"action": argparse.BooleanOptionalAction}
    if get_origin(annotation) in (list, tuple):
        element = get_args(annotation)[0]
        return {"nargs": "+", "type": value_type(element, name, text=_is_text(element)), "choices": _choices(element)}
    full = Annotated[(annotation, *field.metadata)] if field.metadata else annotation
    kwargs: dict[str, Any] = {"type": value_type(full, name, text=_is_text(annotation)),
                              "choices": _choices(annotation)}
    if get_origin(_bare(annotation)) is dict:
        kwargs["metavar"] = "JSON"
    return kwargs


def flag_fields(cls: type[StrictConfig]) -> dict[str, tuple[str, FieldInfo]]:
    """dest → (the setting's key, its field) of every setting a flag sets: a config's fields, or every setting of a
    config made of sections, stored under its plain name (its dotted key where sections share the name)."""
    if not issubclass(cls, SectionedConfig):
        return {name: (name, field) for name, field in cls.model_fields.items()}
    plain = cls.plain_names()
    out: dict[str, tuple[str, FieldInfo]] = {}
    for key, field in cls.settings().items():
        name = key.rpartition(".")[2]
        out[name if len(plain[name]) == 1 else key] = (key, field)
    return out


def add_config_flags(p: argparse.ArgumentParser, defaults: StrictConfig, *, skip: Collection[str] = (),
                     flag_names: Mapping[str, str] | None = None, preset_fields: Collection[str] = ()) -> None:
    """--config-json, --set and one flag per setting of `defaults`' config (but `skip`, whose flags are added
    elsewhere) with the field's description and its value in `defaults` as help. `flag_names`: a setting whose flag
    keeps an established name (`n_episodes`: `--episodes`). `preset_fields`: settings a preset may change, whose help
    says so. `skip`, `flag_names` and `preset_fields` name settings by their dest (`flag_fields`)."""
    cls = type(defaults)
    names = flag_names or {}
    values = defaults.dotted_dict() if isinstance(defaults, SectionedConfig) else defaults.to_dict()
    g = p.add_argument_group(f"{cls.__name__} fields (any of them also by --set KEY=VALUE or in --config-json)")
    g.add_argument("--config-json", metavar="JSON|FILE",
                   help=f"{cls.__name__} fields as a JSON object, inline ('{{\"seed\": 7}}') or in a file "
                        f"(unknown keys rejected)")
    g.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help=f"set one {cls.__name__} field (by its name or dotted key); VALUE is parsed as JSON, else "
                        f"taken as text (repeatable)")
    for dest, (key, field) in flag_fields(cls).items():
        if dest in skip:
            continue
        default = values[key]
        shown = [] if default is None else [f"default: {_format(default)}"]
        if dest in preset_fields:
            shown.append("unless the preset sets it")
        help_text = (field.description or dest.replace("_", " ")) + (f" ({', '.join(shown)})" if shown else "")
        flag = names.get(dest, dest)
        kwargs = {"metavar": flag.upper(), **{k: v for k, v in _flag_kwargs(dest, field).items() if v is not None}}
        if "choices" in kwargs or "action" in kwargs:
            del kwargs["metavar"]  # argparse shows the choices; a switch takes no value
        g.add_argument("--" + flag.replace("_", "-"), dest=dest, default=argparse.SUPPRESS,
                       help=help_text.replace("%", "%%"), **kwargs)


def config_changes(cls: type[StrictConfig], args: argparse.Namespace) -> dict[str, Any]:
    """The settings the command line sets: --set's, then every argument stored under a setting's dest that was given
    (a flag wins over --set). A generated flag is in `args` only when given (so a command's default run directory
    does not change when a config gains a field); a shared option's None means it was not given."""
    changes = parse_sets(getattr(args, "set", None) or [])
    for dest, (key, _) in flag_fields(cls).items():
        value = getattr(args, dest, None)
        if value is not None:
            changes.pop(key, None)
            changes[key] = value
    return changes


def config_from_args(base: C, args: argparse.Namespace) -> C:
    """`base` → --config-json → --set → flags."""
    config = base if getattr(args, "config_json", None) is None else type(base).from_json(args.config_json, base=base)
    return config.with_overrides(**config_changes(type(base), args))
