"""The controller registry: every controller a command can name (`static`, `heuristic`, `ppo:PATH`, ...).

A controller spec is `name` or `name:ARG`. Each package registers its own controllers next to their definitions with
`@register_controller(...)`, so adding one (a behaviour policy, a learned policy) never means editing a command.
The registry lives here, below everything that defines controllers, and is plain Python (no torch).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from esper.leyline.actions import ActionSpace
from esper.leyline.errors import UserInputError, did_you_mean
from esper.tamiyo.protocol import TamiyoPolicy

__all__ = [
    "CONTROLLERS",
    "ControllerContext",
    "ControllerEntry",
    "ControllerRegistry",
    "ControllerSpec",
    "SettingChangeError",
    "check_trained_setting",
    "register_controller",
]

SETTING_FLAGS = {"task": "--task", "max_epochs": "--max-epochs", "max_train_samples": "--max-train-samples",
                 "max_val_samples": "--max-val-samples", "batch_size": "--batch-size", "lr_schedule": "--lr-schedule",
                 "augment": "--augment"}
"""What a learned policy was trained in, beyond its topology and slots, and the flag that sets each."""


@dataclass(frozen=True, slots=True)
class ControllerContext:
    """Where a controller will run: what it must be compatible with, and the seeds of its own randomness.

    `seed` is the paired episode's host seed (distinct per seed stream and episode) and `index` the controller's
    position among those run side by side, so stochastic controllers get independent, reproducible streams.
    """

    space: ActionSpace  # the topology's action space (its registered blueprints)
    slots: tuple[str, ...]
    max_epochs: int | None = None  # episode length, so learned policies can refuse another horizon
    seed: int = 0
    index: int = 0
    device: str = "cpu"
    # The task's least epochs a seed spends in TRAINING and in BLENDING, for rules that plan lifecycles around the
    # episode's end; None: the library defaults.
    seed_training_epochs: int | None = None
    seed_blending_epochs: int | None = None
    # The setting the controller will run in (task, max_epochs and the sample caps, a cap None meaning the whole
    # split), so a learned policy can refuse one it was not trained for; None: unknown, not checked.
    setting: Mapping[str, Any] | None = None
    allow_setting_change: bool = False  # evaluate learned policies outside their training setting on purpose
    tuned_heuristic: Path | None = None  # the record `heuristic:tuned` runs (a study's own tuned heuristic)

    @property
    def topology(self) -> str:
        return self.space.topology


class SettingChangeError(UserInputError):
    """A learned policy was asked to run in another setting than it was trained in."""


def check_trained_setting(source: str, trained: Mapping[str, Any], context: ControllerContext, *,
                          what: str = "trained") -> None:
    """Refuse to run a learned (or tuned: `what`) policy in a setting (task, episode length, sample caps) other than
    the one it was trained in, naming each difference and the flags that restore it, unless the context allows the
    change."""
    if context.setting is None or context.allow_setting_change:
        return
    differing = [k for k in SETTING_FLAGS if k in trained and k in context.setting and trained[k] != context.setting[k]]
    if not differing:
        return
    changes = "; ".join(f"{k} {_shown(trained[k])} then, {_shown(context.setting[k])} now" for k in differing)
    flags = " ".join(f"{SETTING_FLAGS[k]} {trained[k]}" for k in differing if trained[k] is not None)
    raise SettingChangeError(f"{source} was {what} in another setting ({changes}): run it with {flags or 'those'} "
                             f"settings, or pass --allow-setting-change to evaluate it there anyway")


def _shown(value: Any) -> str:
    return "the whole split" if value is None else str(value)


ControllerFactory = Callable[[str | None, ControllerContext], TamiyoPolicy]


@dataclass(frozen=True, slots=True)
class ControllerEntry:
    """One registered controller. `argument` names what follows the colon (e.g. "PATH"), None if it takes none;
    an `optional` argument may be left out (`static` and `static:1.5`)."""

    name: str
    factory: ControllerFactory
    argument: str | None
    summary: str
    optional: bool = False

    @property
    def usage(self) -> str:
        if self.argument is None:
            return self.name
        return f"{self.name}[:{self.argument}]" if self.optional else f"{self.name}:{self.argument}"


@dataclass(frozen=True, slots=True)
class ControllerSpec:
    """A parsed controller spec; `label` is how tables, files and telemetry name it."""

    name: str
    argument: str | None = None

    @property
    def label(self) -> str:
        return self.name if self.argument is None else f"{self.name}:{self.argument}"


class ControllerRegistry:
    """Controller factories keyed by name."""

    def __init__(self) -> None:
        self._entries: dict[str, ControllerEntry] = {}

    def register(self, name: str, *, argument: str | None = None, optional: bool = False, summary: str = ""
                 ) -> Callable[[ControllerFactory], ControllerFactory]:
        """Decorator: register `factory(argument, context) -> TamiyoPolicy` under `name`."""
        if not name or ":" in name:
            raise UserInputError(f"Controller names are non-empty and contain no ':', got {name!r}")
        if optional and argument is None:
            raise UserInputError(f"Controller '{name}': an optional argument needs a name")

        def decorate(factory: ControllerFactory) -> ControllerFactory:
            if name in self._entries:
                raise UserInputError(f"Controller '{name}' is already registered")
            self._entries[name] = ControllerEntry(name, factory, argument, summary, optional)
            return factory

        return decorate

    def names(self) -> list[str]:
        return sorted(self._entries)

    def entries(self) -> Iterator[ControllerEntry]:
        yield from (self._entries[n] for n in self.names())

    def usages(self) -> list[str]:
        return [e.usage for e in self.entries()]

    def parse(self, text: str) -> ControllerSpec:
        """`name` or `name:ARG`; an unknown name, a missing or an unexpected argument is a ValueError."""
        name, sep, argument = text.partition(":")
        entry = self._entries.get(name)
        if entry is None:
            hint = did_you_mean(name, self._entries, rest=sep + argument)
            raise UserInputError(f"Unknown controller '{text}'{hint}. Available: {', '.join(self.usages())}")
        if entry.argument is None and sep:
            raise UserInputError(f"Controller '{name}' takes no argument, got '{text}'")
        if entry.argument is not None and not argument and not (entry.optional and not sep):
            raise UserInputError(f"Controller '{name}' needs an argument: {entry.usage}")
        return ControllerSpec(name, argument if sep else None)

    def build(self, spec: ControllerSpec | str, context: ControllerContext) -> TamiyoPolicy:
        """A controller ready for `context`; its factory raises ValueError when it cannot drive that setup."""
        parsed = self.parse(spec) if isinstance(spec, str) else spec
        return self._entries[parsed.name].factory(parsed.argument, context)


CONTROLLERS = ControllerRegistry()
"""The registry every command resolves specs through; packages add to it when imported."""

register_controller = CONTROLLERS.register
