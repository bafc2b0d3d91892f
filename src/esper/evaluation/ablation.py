"""Which part of a learned controller's recipe mattered: studies that differ in one training setting each (an arm:
from scratch, no critic warm-up, no KL, another charge), their final policies measured against one teacher on one
objective.

Each arm is a finished study. Its final policies are scored against the reference study's teacher on the reference
study's objective (its charge and λ) and on raw test accuracy, from the arm's own paired evaluation episodes: an arm
trained on another charge is judged by the same yardstick as the others, so the table compares recipes, not rewards.
The arms should share their evaluation seeds (the same base seed and --seeds), which the table checks.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from esper.evaluation.objective import objective_scorer
from esper.evaluation.results import ComparisonResult
from esper.evaluation.runs import FINAL, INIT, AggregateRow, aggregate_table, run_labels
from esper.evaluation.studies.paired import WORKER_FIELDS
from esper.evaluation.study import StudyObjective
from esper.leyline.errors import UserInputError
from esper.leyline.sectioned_config import dotted_items
from esper.simic.ppo.config import TrainingConfig

__all__ = ["Arm", "ablation_markdown", "ablation_rows", "read_arm"]

_PLACE = ("seed", "execution.device", "execution.devices", *(f"execution.{name}" for name in WORKER_FIELDS))
"""Settings (by dotted key) that differ between arms without being what an arm changes: the base seed and where the
work ran (a study recorded by an older esper names its workers, a newer one leaves them out)."""


@dataclass(frozen=True)
class Arm:
    """A finished study: its name, evaluation comparison, training runs, teacher, objective, training setting (by
    dotted key) and the spec behind each label that names a chosen controller (best-fixed, best-rule, the chosen
    teacher)."""

    name: str
    result: ComparisonResult
    runs: int
    teacher: str | None
    objective: StudyObjective | None
    training: dict[str, Any]
    specs: dict[str, str]

    def spec(self, label: str) -> str:
        return self.specs.get(label, label)


def read_arm(name: str, study_dir: Path) -> Arm:
    """The study in `study_dir`, refused naming the fix where it holds no finished study."""
    path = study_dir / "results.json"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UserInputError(f"{path} not found: an ablation arm is a finished `esper study` directory") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise UserInputError(f"{path} cannot be read ({exc}): rerun the study to rewrite it") from None
    if not isinstance(data, dict):
        raise UserInputError(f"{path} holds no study's results: an ablation arm is an `esper study` directory")
    result, extra = ComparisonResult.from_written(data, source=str(path))
    study = extra.get("study")
    if not isinstance(study, dict) or "runs" not in study:
        raise UserInputError(f"{path} holds no study's results: an ablation arm is an `esper study` directory")
    objective, choice = study.get("objective"), study.get("teacher_choice")
    specs = {**(study.get("chosen") or {}), **({choice["teacher"]: choice["spec"]} if choice else {})}
    return Arm(name, result, int(study["runs"]), study.get("teacher"),
               None if objective is None else StudyObjective(objective["charge"], float(objective["cost"])),
               _training(path, study.get("training") or {}), specs)


def _training(path: Path, recorded: Mapping[str, Any]) -> dict[str, Any]:
    """A study's recorded training setting by dotted key; one recorded before the config had sections is refused."""
    sections = TrainingConfig.sections()
    flat = sorted(k for k in recorded if k not in TrainingConfig.model_fields)
    if flat:
        raise UserInputError(f"{path} records the training setting of an esper whose config had no sections "
                             f"({', '.join(flat[:3])}, ... outside {', '.join(sections)}): rerun that study with this "
                             f"esper to compare it")
    return dict(dotted_items(recorded, sections))


def _differs(arm: Arm, reference: Arm) -> str:
    keys = sorted(k for k in {*arm.training, *reference.training}
                  if k not in _PLACE and arm.training.get(k) != reference.training.get(k))
    return ", ".join(f"{k}={json.dumps(arm.training.get(k))}" for k in keys) or "—"


def ablation_rows(reference: Arm, arms: Sequence[Arm]) -> list[dict[str, Any]]:
    """For the reference study and every arm: its final policies against the reference's teacher on the reference's
    objective and on raw test accuracy, and against their own init (did training move them)."""
    if reference.teacher is None or reference.objective is None:
        raise UserInputError(f"{reference.name} trained no residual policy on the gap reward (no teacher or no "
                             f"objective): the reference of an ablation is a study of teacher-residual policies")
    teacher, objective = reference.teacher, reference.objective
    seeds = _eval_seeds(reference)
    rows = []
    for arm in (reference, *arms):
        if _eval_seeds(arm) != seeds:
            raise UserInputError(f"arm {arm.name} ran on other evaluation seeds than {reference.name}: run every arm "
                                 f"with the same --seed and --seeds, so that the arms are paired")
        own = _teacher_label(arm, reference.spec(teacher))
        labels = run_labels(arm.runs)
        scorer = objective_scorer(arm.result, objective.charge, objective.cost)
        on_objective = _one(aggregate_table(arm.result, labels, [(FINAL, own)], scorer))
        raw = aggregate_table(arm.result, labels, [(FINAL, own), (FINAL, INIT)])
        rows.append({"arm": arm.name, "differs": "(reference)" if arm is reference else _differs(arm, reference),
                     "teacher": arm.teacher, "runs": arm.runs, "objective": on_objective,
                     "raw": _one(raw[:1]), "vs_init": _one(raw[1:])})
    return rows


def _teacher_label(arm: Arm, spec: str) -> str:
    """How `arm` labels the reference's teacher `spec`: a study that chose it names it by its role (best-rule), one
    given it by hand by the spec itself."""
    labels = [c for c in arm.result.controllers if arm.spec(c) == spec]
    if not labels:
        raise UserInputError(f"arm {arm.name} did not evaluate the reference's teacher {spec}: add --controller "
                             f"{spec} to its study")
    return labels[0]


def _eval_seeds(arm: Arm) -> list[int]:
    return sorted({e.env_seed for e in arm.result.episodes if e.controller == "static"})


def _one(rows: list[AggregateRow]) -> AggregateRow:
    assert len(rows) == 1, "every arm ran its final policies and the teacher"
    return rows[0]


def _cell(a: Mapping[str, Any]) -> str:
    return (f"{a['better']} / {a['worse']} of {a['runs']} | {a['iqm']:+.2f} | "
            f"{a['mean']:+.2f} [{a['ci95'][0]:+.2f}, {a['ci95'][1]:+.2f}]")


def ablation_markdown(rows: Sequence[Mapping[str, Any]], reference: Arm) -> str:
    """One table: per arm, k of K against the teacher and the IQM Δ, on the objective and on raw test accuracy."""
    assert reference.objective is not None
    what = "training compute" if reference.objective.charge == "compute" else "parameters"
    lines = [f"Final policies against the teacher ({reference.teacher}) on the objective (test accuracy above the "
             f"paired static host, minus λ = {reference.objective.cost:.3f} pp per 100 % more {what}) and on raw "
             f"test accuracy: runs better / worse (their own interval over the seeds), the IQM of the per-run mean "
             f"Δ, and the mean Δ with its crossed 95 % interval (runs × seeds). Last: against their own init.", "",
             "| arm | differs from the reference | objective: runs better / worse | IQM | mean [95 %] | "
             "test acc: runs better / worse | IQM | mean [95 %] | vs own init: runs better / worse |",
             "|---|---|---|---|---|---|---|---|---|"]
    for row in rows:
        init = row["vs_init"]
        lines.append(f"| {row['arm']} | {row['differs']} | {_cell(row['objective'])} | {_cell(row['raw'])} | "
                     f"{init['better']} / {init['worse']} of {init['runs']} |")
    return "\n".join(lines) + "\n"
