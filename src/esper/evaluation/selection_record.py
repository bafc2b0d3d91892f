"""A study's recorded selection: best-fixed, best-rule and the teacher's choice (with `heuristic:tuned`), kept small
so that it lives in the repository and a later study of the same preset and selection seeds reuses it instead of
searching again.

The selection and the tuning are the largest fixed part of a reference study (about an hour of a 2-core machine on
Fashion-MNIST). They depend only on the episodes' setting and on the objective the teacher is chosen by, so a record
names both and a study refuses a record made in another setting. A study of another base seed may reuse it: the
record's selection seeds come from its own base seed's selection stream, which shares no seed with any base seed's
training or evaluation streams, so nothing the record decided saw the study's held-out seeds. The record keeps what
the search found and what it cost (the study's tables still charge that cost to every controller the selection
chose), the table it chose from, and the command and commit that ran it, so the search can be rerun and checked.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import Field, JsonValue, StrictFloat, StrictInt

import esper
from esper.evaluation.episodes import EpisodePlan
from esper.evaluation.runs import Cost
from esper.evaluation.selection import Selection
from esper.evaluation.study import TUNED_HEURISTIC
from esper.evaluation.teacher_choice import TeacherChoice
from esper.leyline.constants import MAX_WEIGHT
from esper.leyline.errors import UserInputError
from esper.leyline.strict_config import StrictConfig, Weight
from esper.storage.provenance import esper_commit
from esper.storage.rundir import write_json_atomic
from esper.tamiyo import HeuristicRecord

__all__ = ["SELECTION_RECORD_FILE", "RecordedSelection", "SelectionRecord", "read_selection_record",
           "recorded_selection", "selection_setting", "write_selection_record"]

SELECTION_RECORD_FILE = "selection-record.json"
"""Where a study writes its record once the selection and the teacher's choice are made."""
_FORMAT: Literal["esper-selection-record/1"] = "esper-selection-record/1"
_FIX = "write a new one with `esper study --preset PRESET --selection-only` (it runs the selection, writes the record)"
_MAX = 10**15


class CostRecord(StrictConfig):
    """Env-epochs and training GFLOPs (a `Cost`)."""

    KIND: ClassVar[str] = "selection record cost"
    FIX: ClassVar[str] = _FIX
    env_epochs: StrictInt = Field(ge=0, le=_MAX)
    gflops: StrictFloat = Field(ge=0.0, le=_MAX)

    def cost(self) -> Cost:
        return {"env_epochs": self.env_epochs, "gflops": self.gflops}


class CandidateRow(StrictConfig):
    """One selection candidate: the round that ran it, its mean and std of final validation accuracy, its params."""

    KIND: ClassVar[str] = "selection record candidate"
    FIX: ClassVar[str] = _FIX
    candidate: str = Field(min_length=1)
    round: StrictInt = Field(ge=1, le=_MAX)
    val_accuracy: StrictFloat = Field(ge=0.0, le=100.0)
    val_std: StrictFloat = Field(ge=0.0, le=100.0)
    params: StrictFloat = Field(ge=0.0, le=_MAX)


class TeacherRecord(StrictConfig):
    """The teacher's choice: the chosen candidate's label, every candidate's objective score on the selection seeds,
    and what the choice cost beyond the selection (the candidates' episodes and the tuning)."""

    KIND: ClassVar[str] = "selection record teacher"
    FIX: ClassVar[str] = _FIX
    label: str = Field(min_length=1)
    scores: dict[str, Weight]
    cost: CostRecord
    tuned_cost: CostRecord | None = None


class SelectionRecord(StrictConfig):
    """What a study chose on its selection seeds, in which setting, by which objective, at what cost, and how."""

    KIND: ClassVar[str] = "selection record"
    FIX: ClassVar[str] = _FIX
    format: Literal["esper-selection-record/1"] = _FORMAT
    preset: str = Field(min_length=1)
    selection_seeds: StrictInt = Field(ge=1, le=_MAX)
    setting: dict[str, JsonValue]
    charge: str = Field(min_length=1)
    cost: StrictFloat = Field(ge=0.0, le=MAX_WEIGHT)
    chosen: dict[str, str]
    selection_cost: CostRecord
    candidates: list[CandidateRow]
    teacher: TeacherRecord | None = None
    tuned_heuristic: HeuristicRecord | None = None
    command: str
    esper_commit: str = Field(min_length=1)
    esper_version: str = Field(min_length=1)


def selection_setting(plan: EpisodePlan) -> dict[str, Any]:
    """What the selection's episodes are a function of (where they run is not): a record made in another setting
    chose among other episodes. Its base seed is recorded but not compared (`_REUSABLE_ACROSS`)."""
    episode = plan.episode
    return {**episode.controller_setting(), "slots": list(episode.slots), "max_seeds": episode.max_seeds,
            "seed": plan.seed, "stream": plan.stream.value, "reward_family": plan.reward_family, "gamma": plan.gamma,
            "amp": episode.amp}


def _rows(selection: Selection) -> list[CandidateRow]:
    rows = [CandidateRow(candidate=c, round=n, val_accuracy=r.per_controller[c]["final_accuracy"]["mean"],
                         val_std=r.per_controller[c]["final_accuracy"]["std"],
                         params=r.per_controller[c]["total_params"]["mean"])
            for n, r in enumerate(selection.rounds, 1) for c in r.controllers]
    return sorted(rows, key=lambda row: -row.val_accuracy)


def write_selection_record(path: Path, *, preset: str, plan: EpisodePlan, seeds: int, objective: tuple[str, float],
                           selection: Selection, selection_cost: Cost, choice: TeacherChoice | None,
                           command: str) -> SelectionRecord:
    """Record a finished selection (and the teacher's choice, where the study made one) at `path`, atomically."""
    tuned = None
    if choice is not None and choice.tuned_path is not None:
        tuned = HeuristicRecord.from_dict(json.loads(choice.tuned_path.read_text(encoding="utf-8")))
    teacher = None if choice is None else TeacherRecord(
        label=choice.label, scores=choice.scores, cost=CostRecord(**choice.cost),
        tuned_cost=None if choice.tuned_cost is None else CostRecord(**choice.tuned_cost))
    record = SelectionRecord(preset=preset, selection_seeds=seeds, setting=selection_setting(plan),
                             charge=objective[0], cost=objective[1], chosen=selection.chosen,
                             selection_cost=CostRecord(**selection_cost), candidates=_rows(selection),
                             teacher=teacher, tuned_heuristic=tuned, command=command, esper_commit=esper_commit(),
                             esper_version=esper.__version__)
    write_json_atomic(path, record.to_dict())
    return record


def read_selection_record(path: Path) -> SelectionRecord:
    """A record from its file; a missing or unreadable file, bad JSON, an unknown key or a bad value is refused
    naming the file."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UserInputError(f"Selection record {path} not found: pass the {SELECTION_RECORD_FILE} a study wrote, or "
                             f"{_FIX}") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise UserInputError(f"Selection record {path} cannot be read ({exc}): {_FIX}") from None
    if not isinstance(data, dict):
        raise UserInputError(f"Selection record {path} must hold a JSON object: {_FIX}")
    if data.get("format") != _FORMAT:
        raise UserInputError(f"Selection record {path} has format {data.get('format')!r}, not {_FORMAT!r}: {_FIX}")
    try:
        return SelectionRecord.from_dict(data)
    except UserInputError as exc:
        raise UserInputError(f"Selection record {path}: {exc}") from None


@dataclass(frozen=True)
class RecordedSelection:
    """A record checked against the study that reuses it (read from `path`): the chosen specs and the selection's
    cost."""

    path: Path
    record: SelectionRecord
    chosen: dict[str, str]
    selection_cost: Cost

    def provenance(self) -> dict[str, Any]:
        """How the summary and results.json name the record."""
        return {"path": str(self.path), "command": self.record.command, "esper_commit": self.record.esper_commit,
                "seed": self.record.setting.get("seed"), "selection_cost": self.selection_cost}

    def teacher_choice(self, tuned_path: Path) -> TeacherChoice:
        """The record's teacher choice, its tuned heuristic (if any) written to `tuned_path`, where
        `heuristic:tuned` and a training run's teacher read it."""
        teacher, tuned = self.record.teacher, self.record.tuned_heuristic
        assert teacher is not None, "recorded_selection refuses a record without a teacher where one is wanted"
        if tuned is not None:
            write_json_atomic(tuned_path, tuned.to_dict())
        specs = {"heuristic": "heuristic", **self.chosen,
                 **({TUNED_HEURISTIC: f"heuristic:{tuned_path.resolve()}"} if tuned is not None else {})}
        return TeacherChoice(teacher.label, specs[teacher.label], dict(teacher.scores),
                             tuned_path if tuned is not None else None,
                             None if teacher.tuned_cost is None else teacher.tuned_cost.cost(), teacher.cost.cost())


def recorded_selection(path: Path, record: SelectionRecord, *, preset: str, plan: EpisodePlan, seeds: int,
                       objective: tuple[str, float], wants_teacher: bool) -> RecordedSelection:
    """`record` (read from `path`) for a study of `preset` on `seeds` selection seeds of `plan`'s setting whose
    teacher is chosen by `objective` (where it `wants_teacher`); a record of anything else is refused naming the
    difference. Nothing is written: a bad record fails before the study starts."""
    where = f"Selection record {path}"
    if record.preset != preset or record.selection_seeds != seeds:
        raise UserInputError(f"{where} is of --preset {record.preset} on {record.selection_seeds} selection seeds, "
                             f"this study --preset {preset} on {seeds}: pass the record of this preset and seeds, or "
                             f"drop --selection-record to run the selection")
    _same_setting(where, record.setting, selection_setting(plan))
    if wants_teacher and (record.charge, record.cost) != objective:
        raise UserInputError(f"{where} chose its teacher by charge {record.charge} at λ {record.cost:g}, this study "
                             f"by charge {objective[0]} at λ {objective[1]:g}: the study takes λ from the record where "
                             f"the config asks for 'auto', so set the charge (and a given λ) to the record's, or drop "
                             f"--selection-record")
    if wants_teacher and record.teacher is None:
        raise UserInputError(f"{where} holds no teacher choice (its study named a teacher with --set teacher=...): "
                             f"name one the same way, or {_FIX}")
    known = {"heuristic", *record.chosen, *([TUNED_HEURISTIC] if record.tuned_heuristic is not None else [])}
    if record.teacher is not None and record.teacher.label not in known:
        raise UserInputError(f"{where}: its teacher {record.teacher.label} is none of {sorted(known)}: {_FIX}")
    return RecordedSelection(path, record, dict(record.chosen), record.selection_cost.cost())


_REUSABLE_ACROSS = frozenset({"seed"})
"""Setting fields a record is reused across: a study of another base seed keeps the record's selection seeds, which
never coincide with its own training or held-out seeds."""


def _same_setting(where: str, recorded: Mapping[str, Any], current: Mapping[str, Any]) -> None:
    differing = sorted(k for k in {*recorded, *current} - _REUSABLE_ACROSS if recorded.get(k) != current.get(k))
    if differing:
        shown = "; ".join(f"{k}: recorded {recorded.get(k)!r}, now {current.get(k)!r}" for k in differing)
        raise UserInputError(f"{where} was chosen in another setting ({shown}): drop --selection-record to run the "
                             f"selection in this one")
