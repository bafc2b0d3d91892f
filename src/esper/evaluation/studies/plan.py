"""What a study is asked to do, as one typed object: the setting (a study preset or a task family, with TrainingConfig
overrides), its size (training runs, evaluation and selection seeds), what it compares beyond the baselines, what it
reuses (policies, a recorded selection), where it lives and how it reports. Each field is the command line flag of the
same name (`--set KEY=VALUE` fills `overrides`), so a study started from either continues from the other."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from esper.data.tasks import DataOptions
from esper.evaluation.studies.hooks import StudyHooks
from esper.evaluation.study import STUDY_PRESETS
from esper.leyline.errors import UserInputError, did_you_mean
from esper.simic.ppo.config import TrainingConfig
from esper.storage.rundir import default_run_dir

__all__ = ["MAX_RUNS", "MAX_STUDY_SEEDS", "StudyPlan"]

MAX_STUDY_SEEDS = 10_000
MAX_RUNS = 100
_NOT_SETTINGS = frozenset({"run_dir", "runs_root", "named_by", "overwrite", "selection_only", "argv", "hooks"})
"""Fields that say where a study lives, how it reports or how far it goes, never what it measures."""


@dataclass(frozen=True)
class StudyPlan:
    """A study (`run_study`). `preset` (default quick) or `family`; `overrides`: TrainingConfig settings over the
    preset's (plain or dotted keys: `n_episodes` or `ppo.n_episodes`; kept by dotted key); `runs`, `seeds`,
    `selection_seeds`: None takes the preset's (the family's); `baselines`: the untrained controllers to evaluate
    instead of the preset's (None: the preset's; a list must include `static`); `controllers`: extra specs to compare;
    `ppo`: evaluate
    these PPO run directories instead of training; `selection_record`: reuse a recorded selection; `selection_only`:
    stop once the selection is recorded; `tie_threshold`: |Δ| in pp below which a paired difference is a tie (None: one
    test sample); `run_dir`: the study directory (None: `runs_root`/study_<task>_s<seed>_<digest>, the digest of
    `named_by` or else of the plan's settings); `argv`: the command that runs it, recorded."""

    preset: str | None = None
    family: str | None = None
    overrides: Mapping[str, Any] = field(default_factory=dict)
    runs: int | None = None
    seeds: int | None = None
    selection_seeds: int | None = None
    baselines: tuple[str, ...] | None = None
    controllers: tuple[str, ...] = ()
    allow_setting_change: bool = False
    ppo: tuple[Path, ...] | None = None
    selection_record: Path | None = None
    selection_only: bool = False
    blueprints_from_selection: bool = False
    ignore_precheck: bool = False
    tie_threshold: float | None = None
    max_test_samples: int | None = None
    run_dir: Path | None = None
    runs_root: Path = Path("runs")
    named_by: Mapping[str, Any] | None = None
    overwrite: bool = False
    data: DataOptions = field(default_factory=DataOptions)
    plugins: tuple[str, ...] = ()
    argv: tuple[str, ...] = ()
    hooks: StudyHooks = field(default_factory=StudyHooks)

    def __post_init__(self) -> None:
        if self.preset is not None and self.preset not in STUDY_PRESETS:
            raise UserInputError(f"Unknown study preset '{self.preset}'{did_you_mean(self.preset, STUDY_PRESETS)}; "
                                 f"choose from {', '.join(sorted(STUDY_PRESETS))}")
        for name, low, high in (("runs", 1, MAX_RUNS), ("seeds", 1, MAX_STUDY_SEEDS),
                                ("selection_seeds", 0, MAX_STUDY_SEEDS), ("max_test_samples", 1, 10**9)):
            value = getattr(self, name)
            if value is not None and not low <= value <= high:
                raise UserInputError(f"A study's {name} must be in [{low}, {high}], not {value}")
        if self.tie_threshold is not None and not 0.0 <= self.tie_threshold <= 100.0:
            raise UserInputError(f"A study's tie_threshold must be in [0, 100] pp, not {self.tie_threshold}")
        if self.baselines is not None and "static" not in self.baselines:
            raise UserInputError(f"baselines {list(self.baselines)} lack 'static': every study measures its regime "
                                 f"and its policies' objective against the static host; add static")
        if self.ppo is not None and not self.ppo:
            raise UserInputError("ppo names no run directory: pass at least one, or None to train the policies")
        object.__setattr__(self, "overrides", TrainingConfig.dotted(self.overrides))  # an unknown key fails here

    @property
    def command(self) -> str:
        """The command recorded beside what the study chose (`esper ...`, or the Python call)."""
        return "esper " + " ".join(self.argv) if self.argv else "esper.evaluation.run_study"

    def settings(self) -> dict[str, Any]:
        """Everything the plan asks that changes what the study measures."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name not in _NOT_SETTINGS
               and not (f.name == "baselines" and self.baselines is None)}  # studies named before it keep their name
        return {**out, "overrides": dict(self.overrides), "data": self.data.to_dict()}

    def default_dir(self, task: str, seed: int) -> Path:
        """The directory of a study on `task` from base seed `seed` without a `run_dir`: the same plan (the same
        command) finds the same directory, and continues it."""
        named = dict(self.named_by) if self.named_by is not None else self.settings()
        return default_run_dir(self.runs_root, "study", task, seed, named)
