"""Task families: named, versioned sets of instance types on which no single architecture need be best.

A learned growth controller can only beat a fixed architecture where the best architecture depends on the run; on a
single task one fixed choice serves every episode. A family is many tasks at once: each instance type is a base task
at a training-sample cap with a host variant (width 0.5–2), its images optionally corrupted as in MNIST-C and
CIFAR-10-C (`esper.data.corruptions`), restricted to its first classes, or (synthetic) generated without
photometric jitter. Its definition fixes, before any policy trains, which types a policy may train on and which are
held out to test it, and the score a study reports. A definition never changes once used: a new one is a new version
(`key` carries it), and studies record the whole definition, so a changed one is refused when a study resumes.

Each type is a task of its own, `family:KEY/TYPE` (`esper.data.family_tasks`), so every command and every
controller runs on it as on any task; a training episode draws its type from its data seed (`training_type`), and
never a held-out one.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from esper.data.corruptions import CORRUPTIONS, MAX_SEVERITY
from esper.leyline.errors import UserInputError, did_you_mean
from esper.leyline.seeding import derive_seed

__all__ = ["FAMILIES", "FAMILY_PREFIX", "MAX_WIDTH", "MIN_WIDTH", "SCORES", "Family", "HeldOutLeak", "InstanceType",
           "Score", "family_task", "get_family", "register_family", "training_type"]

FAMILY_PREFIX = "family"
MIN_WIDTH, MAX_WIDTH = 0.5, 2.0
IMAGE_TASKS = ("synthetic", "fashion_mnist", "cifar10")
"""Base tasks a type may build on: esper's image tasks on the default CNN host."""

Score = Literal["test_accuracy", "frontier_gflops"]
SCORES: dict[str, str] = {
    "test_accuracy": "final test accuracy",
    "frontier_gflops": "final test accuracy above the static frontier (widths 0.5–2) at equal training GFLOPs",
}


@dataclass(frozen=True)
class InstanceType:
    """One kind of episode: `task` on `max_train_samples` training samples, the host `width` times its usual width,
    its images corrupted by `corruption` (name, severity 1–5), only its first `classes` classes (None: all), and
    (synthetic only) with or without photometric `jitter`."""

    name: str
    task: str
    max_train_samples: int
    width: float = 1.0
    corruption: tuple[str, int] | None = None
    classes: int | None = None
    jitter: bool = True

    def variant(self) -> tuple[Any, ...]:
        """Everything that makes the type's episodes what they are; its name aside."""
        return dataclasses.astuple(dataclasses.replace(self, name=""))

    def describe(self) -> str:
        parts = [self.task, f"{self.max_train_samples} samples", f"width {self.width:g}"]
        if self.corruption is not None:
            parts.append(f"{self.corruption[0]} {self.corruption[1]}")
        if self.classes is not None:
            parts.append(f"{self.classes} classes")
        if not self.jitter:
            parts.append("no jitter")
        return ", ".join(parts)

    def check(self) -> None:
        where = f"Instance type '{self.name}'"
        if not self.name or not self.name.replace("-", "_").isidentifier():
            raise UserInputError(f"{where}: a type name is a plain identifier (letters, digits, _ or -)")
        if self.task not in IMAGE_TASKS:
            raise UserInputError(f"{where}: base task '{self.task}' is not one of {list(IMAGE_TASKS)}")
        if self.max_train_samples < 1:
            raise UserInputError(f"{where}: a sample cap must be >= 1, got {self.max_train_samples}")
        if not MIN_WIDTH <= self.width <= MAX_WIDTH:
            raise UserInputError(f"{where}: width {self.width} is outside {MIN_WIDTH}–{MAX_WIDTH}")
        if self.corruption is not None:
            name, severity = self.corruption
            if name not in CORRUPTIONS or not 1 <= severity <= MAX_SEVERITY:
                raise UserInputError(f"{where}: corruption {self.corruption} must name one of {sorted(CORRUPTIONS)} "
                                     f"at severity 1..{MAX_SEVERITY}")
        if self.classes is not None and self.classes < 2:
            raise UserInputError(f"{where}: {self.classes} classes cannot be learned; keep at least 2")
        if not self.jitter and self.task != "synthetic":
            raise UserInputError(f"{where}: only the synthetic task has photometric jitter to turn off")


@dataclass(frozen=True)
class Family:
    """A named, versioned family: its instance types, the ones `held_out` from training, the training preset whose
    setting (episode length, validation cap, batch size) every type shares, the `score` it reports, and the size of
    its study: `selection_seeds` per type for every search, `seeds` paired evaluation seeds per held-out type."""

    name: str
    version: int
    preset: str
    types: tuple[InstanceType, ...]
    held_out: tuple[str, ...]
    score: Score = "test_accuracy"
    selection_seeds: int = 3
    seeds: int = 10

    def __post_init__(self) -> None:
        for t in self.types:
            t.check()
        names = [t.name for t in self.types]
        if len(set(names)) != len(names):
            raise UserInputError(f"Family '{self.key}' names a type twice: {names}")
        unknown = sorted(set(self.held_out) - set(names))
        if unknown:
            raise UserInputError(f"Family '{self.key}' holds out unknown types {unknown}")
        if not self.held_out or len(self.held_out) == len(names):
            raise UserInputError(f"Family '{self.key}' needs at least one training and one held-out type")
        held = {t.variant(): t.name for t in self.types if t.name in self.held_out}
        for t in self.training:
            if t.variant() in held:
                raise UserInputError(f"Family '{self.key}': training type '{t.name}' is held-out type "
                                     f"'{held[t.variant()]}' under another name")
        if min(self.selection_seeds, self.seeds) < 1:
            raise UserInputError(f"Family '{self.key}' needs at least one selection and one evaluation seed")
        if self.score not in SCORES:
            raise UserInputError(f"Family '{self.key}': score '{self.score}' is not one of {sorted(SCORES)}")

    @property
    def key(self) -> str:
        return f"{self.name}-v{self.version}"

    @property
    def training(self) -> tuple[InstanceType, ...]:
        return tuple(t for t in self.types if t.name not in self.held_out)

    @property
    def held_out_types(self) -> tuple[InstanceType, ...]:
        return tuple(t for t in self.types if t.name in self.held_out)

    def type(self, name: str) -> InstanceType:
        for t in self.types:
            if t.name == name:
                return t
        names = [t.name for t in self.types]
        raise UserInputError(f"Family '{self.key}' has no type '{name}'{did_you_mean(name, names)}. Types: {names}")

    def to_dict(self) -> dict[str, Any]:
        """The definition as JSON has it (lists for tuples), so a recorded definition compares equal to itself."""
        data: dict[str, Any] = json.loads(json.dumps(dataclasses.asdict(self)))
        return data


class HeldOutLeak(RuntimeError):
    """A held-out type was about to train a policy: the family's held-out results would be void."""


def _pick(types: Sequence[InstanceType], data_seed: int, key: str) -> InstanceType:
    return types[derive_seed(key, "instance type", data_seed) % len(types)]


def training_type(family: Family, data_seed: int) -> InstanceType:
    """The training type an episode (or a batch sharing one data seed) draws from its data seed: uniform over the
    training types, never a held-out one; a draw that would be one (by name or by what it is) raises `HeldOutLeak`."""
    drawn = _pick(family.training, data_seed, family.key)
    held = {t.variant() for t in family.held_out_types}
    if drawn.name in family.held_out or drawn.variant() in held:
        raise HeldOutLeak(f"Family '{family.key}': data seed {data_seed} drew held-out type '{drawn.name}' for "
                          f"training")
    return drawn


def family_task(family: Family, itype: InstanceType) -> str:
    """The task name of a type: `family:KEY/TYPE`."""
    return f"{FAMILY_PREFIX}:{family.key}/{itype.name}"


FAMILIES: dict[str, Family] = {}


def register_family(family: Family) -> Family:
    """Add a family under its key; a key names one definition for good."""
    if family.key in FAMILIES and FAMILIES[family.key] != family:
        raise UserInputError(f"Family '{family.key}' is already defined otherwise: give the new definition a new "
                             f"version")
    FAMILIES[family.key] = family
    return family


def get_family(key: str) -> Family:
    if key not in FAMILIES:
        raise UserInputError(f"Unknown family '{key}'{did_you_mean(key, FAMILIES)}. Available: {sorted(FAMILIES)}")
    return FAMILIES[key]


def _t(name: str, task: str, cap: int, **variant: Any) -> InstanceType:
    return InstanceType(name, task, cap, **variant)


# Five synthetic types a narrow or wide host, fewer classes, noise or blur make different; two held out (corruptions
# no training type has, at a width and caps between theirs). Sized for a 2-core CPU: caps 1–2k, the 30-epoch
# `synthetic` training preset, 3 selection seeds per search, 10 evaluation seeds per held-out type.
register_family(Family("synthetic-shift", 1, "synthetic", (
    _t("clean", "synthetic", 1024),
    _t("narrow-2k", "synthetic", 2048, width=0.5),
    _t("noise-wide", "synthetic", 1024, width=2.0, corruption=("gaussian_noise", 3)),
    _t("blur-2k", "synthetic", 2048, corruption=("blur", 3)),
    _t("steady-4c", "synthetic", 1536, classes=4, jitter=False),
    _t("fog-narrow", "synthetic", 1536, width=0.75, corruption=("fog", 3)),
    _t("rotate-steady", "synthetic", 2048, corruption=("rotation", 3), jitter=False),
), held_out=("fog-narrow", "rotate-steady")))

# Fashion-MNIST at caps 1k–8k: geometry (rotation, translation), photometry (brightness, contrast), noise and blur,
# fewer classes and hosts of width 0.5–2; held out: fog, and a translated narrow host on 6 classes.
register_family(Family("fashion-shift", 1, "fashion_mnist", (
    _t("clean-8k", "fashion_mnist", 8192),
    _t("narrow-1k", "fashion_mnist", 1024, width=0.5),
    _t("noise-2k", "fashion_mnist", 2048, corruption=("gaussian_noise", 3)),
    _t("blur-wide-4k", "fashion_mnist", 4096, width=2.0, corruption=("blur", 2)),
    _t("rotate-4k", "fashion_mnist", 4096, corruption=("rotation", 4)),
    _t("contrast-5c", "fashion_mnist", 2048, corruption=("contrast", 4), classes=5),
    _t("bright-wide-1k", "fashion_mnist", 1024, width=1.5, corruption=("brightness", 3)),
    _t("fog-2k", "fashion_mnist", 2048, corruption=("fog", 3)),
    _t("shift-narrow-6c", "fashion_mnist", 4096, width=0.75, corruption=("translation", 4), classes=6),
), held_out=("fog-2k", "shift-narrow-6c"), selection_seeds=5, seeds=20))

# Fashion-MNIST sized for a 2-core CPU (pre-check 38 min on one core; a whole study about 2 h, estimated): three
# training types that starve the host in different ways — a narrow host on more data, heavy Gaussian noise, a heavy
# contrast loss — and two held-out types with corruptions no training type has (fog on a three-quarter host, blur).
# Scored against each type's static frontier at equal training GFLOPs: capacity on demand pays in accuracy where a
# type needs capacity and in compute where it does not.
register_family(Family("fashion-capacity", 1, "fashion_mnist", (
    _t("narrow-2k", "fashion_mnist", 2048, width=0.5),
    _t("noise-1k", "fashion_mnist", 1024, corruption=("gaussian_noise", 5)),
    _t("contrast-1k", "fashion_mnist", 1024, corruption=("contrast", 5)),
    _t("fog-narrow", "fashion_mnist", 1536, width=0.75, corruption=("fog", 4)),
    _t("blur-1k", "fashion_mnist", 1024, corruption=("blur", 4)),
), held_out=("fog-narrow", "blur-1k"), score="frontier_gflops", selection_seeds=2, seeds=10))
