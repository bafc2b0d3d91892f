"""How much room a teacher leaves: its one-epoch deviations (`deviate:` controllers), each against the teacher on
the same paired seeds, on the objective a learned controller is trained on.

A deviation and its teacher share the host seed, the data order and every decision before the overruled epoch, so
the per-seed difference of their objectives is Q(s, a) − Q(s, π_T(s)) on that seed, measured exactly. Where no
deviation is better than the teacher beyond noise, a policy that improves on the teacher must change several
decisions together, and one trained by overruling the teacher one sampled decision at a time sees only losses.

The table also gives the per-seed best: on each seed, the best of the teacher and every deviation. It bounds what a
policy choosing among these deviations could gain on each seed, and noise inflates it (the largest of many noisy
differences is above 0 even where no deviation is better on average), so it stands beside its noise floor: the same
bound with every deviation moved to the teacher's mean.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from esper.env.charges import measured_cost
from esper.evaluation.objective import STATIC, charged_gaps
from esper.evaluation.results import ComparisonResult
from esper.evaluation.stats import t_interval
from esper.leyline.errors import UserInputError
from esper.storage.rundir import read_jsonl
from esper.tamiyo import DEVIATE
from esper.tamiyo.deviate import DEVIATION_REASON

__all__ = ["DeviationRow", "DeviationRun", "deviation_markdown", "deviation_rows", "noise_floor", "per_seed_best",
           "read_deviation_run"]


@dataclass(frozen=True)
class DeviationRow:
    """One deviation against its teacher: per paired seed, the objective's and raw test accuracy's difference."""

    label: str
    epoch: int
    action: str
    objective: list[float]
    raw: list[float]
    took_place: int  # seeds on which the action was legal and not the teacher's own: elsewhere Δ is exactly 0

    def counts(self, tie: float) -> tuple[int, int]:
        """Seeds on which the deviation is better, and worse, than the teacher (|Δ| < `tie` is neither)."""
        return sum(d >= tie for d in self.objective), sum(d <= -tie for d in self.objective)


@dataclass(frozen=True)
class DeviationRun:
    """An `esper compare` of deviations: its comparison, the spec behind each of its labels (a label shortens a
    path), the objective it is scored on (the run's charge and λ: the one given, else the task's measured one), and
    the paired episodes in which each deviation took place."""

    result: ComparisonResult
    specs: dict[str, str]
    charge: str
    cost: float
    took_place: dict[str, set[int]]


def read_deviation_run(run_dir: Path) -> DeviationRun:
    """The comparison in `run_dir` with its charge and λ from its config.json and where each deviation took place
    from its steps.jsonl; a run that is not a comparison, or whose λ is neither given nor measured for its task, is
    refused naming the fix. An unfinished comparison is read as far as it ran (the table says so)."""
    try:
        data = json.loads((run_dir / ComparisonResult.FILE).read_text(encoding="utf-8"))
        config = json.loads((run_dir / "config.json").read_text(encoding="utf-8"))["config"]
        charge = config["charge"]
        given = config["compute_cost"] if charge == "compute" else config["param_cost"]
        task, cap = config["task"], config["max_train_samples"]
        specs = dict(zip(config["controllers"], config["specs"], strict=True))
        took_place: dict[str, set[int]] = {}
        for step in read_jsonl(run_dir / "steps.jsonl"):
            if str(step["reason"]).startswith(DEVIATION_REASON):
                took_place.setdefault(step["controller"], set()).add(int(step["episode"]))
    except FileNotFoundError as exc:
        raise UserInputError(f"{exc.filename} not found: deviations are read from a finished `esper compare` "
                             f"run directory") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
        raise UserInputError(f"{run_dir} is not an `esper compare` run directory that can be read ({exc!r}): rerun "
                             f"the comparison") from None
    if not isinstance(data, dict):
        raise UserInputError(f"{run_dir / ComparisonResult.FILE} holds no comparison: rerun the comparison")
    cost = given if given is not None else measured_cost(charge, task, cap)
    if cost is None:
        flag = "--compute-cost" if charge == "compute" else "--param-cost"
        raise UserInputError(f"{run_dir} charged no λ (none given, none measured for {task} at this sample cap): "
                             f"rerun the comparison with {flag}")
    result, _ = ComparisonResult.from_written(data, source=str(run_dir / ComparisonResult.FILE))
    return DeviationRun(result, specs, charge, float(cost), took_place)


def _parts(spec: str) -> tuple[int, str, str]:
    _, epoch, action, teacher = spec.split(":", 3)
    return int(epoch), action, teacher


def deviation_rows(run: DeviationRun) -> tuple[str, list[DeviationRow]]:
    """The teacher every `deviate:` controller of the run overrules, and each deviation against it on the objective
    (test accuracy above the paired static host minus λ per 100 % more of the charge) and on raw test accuracy, per
    paired seed. A comparison without deviations, without their teacher or the static host, or whose deviations
    overrule different teachers, is refused naming the fix."""
    result = run.result
    spec_of = {label: run.specs.get(label, label) for label in result.controllers}
    labels = [c for c in result.controllers if spec_of[c].startswith(f"{DEVIATE}:")]
    if not labels:
        raise UserInputError("this comparison ran no deviate:EPOCH:ACTION:TEACHER controller: run `esper compare "
                             "--controllers static TEACHER deviate:EPOCH:ACTION:TEACHER ...`")
    teachers = sorted({_parts(spec_of[label])[2] for label in labels})
    if len(teachers) != 1:
        raise UserInputError(f"the deviations overrule {len(teachers)} teachers ({', '.join(teachers)}): compare "
                             f"the deviations of one teacher per run")
    teacher = next((c for c in result.controllers if spec_of[c] == teachers[0]), teachers[0])
    missing = [c for c in (STATIC, teacher) if c not in result.controllers]
    if missing:
        raise UserInputError(f"the deviations are measured against their teacher and the static host, and this "
                             f"comparison did not run {' or '.join(missing)}: add them to --controllers, each "
                             f"written as the deviations write it")
    gaps = charged_gaps(result, run.charge, run.cost)
    unscored = [c for c in (teacher, *labels) if c != STATIC and c not in gaps]
    if unscored:
        raise UserInputError(f"{', '.join(unscored)} have episodes without a test score (or the static host has): "
                             f"deviations are scored on the test split, so rerun the comparison to its end")
    tests = {c: [float(e.final_test_accuracy or 0.0) for e in sorted((e for e in result.episodes if e.controller == c),
                                                                     key=lambda e: e.episode)]
             for c in (teacher, *labels)}  # every one scored (checked above)
    reference = [0.0] * len(tests[teacher]) if teacher == STATIC else gaps[teacher]["per_seed"]
    rows = []
    for label in labels:
        epoch, action, _ = _parts(spec_of[label])
        objective = [d - t for d, t in zip(gaps[label]["per_seed"], reference, strict=True)]
        raw = [d - t for d, t in zip(tests[label], tests[teacher], strict=True)]
        rows.append(DeviationRow(label, epoch, action, objective, raw, len(run.took_place.get(label, ()))))
    return teacher, sorted(rows, key=lambda r: -statistics.fmean(r.objective))


def per_seed_best(rows: Sequence[DeviationRow]) -> list[float]:
    """Per paired seed, the best objective difference over the teacher among the teacher itself (0) and every
    deviation: what choosing the best deviation on each seed, knowing its outcome, would add."""
    return _best_per_seed([r.objective for r in rows])


def _best_per_seed(deltas: Sequence[Sequence[float]]) -> list[float]:
    """Per seed, the largest of 0 (the teacher) and each deviation's Δ on that seed."""
    return [max(0.0, *column) for column in zip(*deltas, strict=True)]


def noise_floor(rows: Sequence[DeviationRow]) -> list[float]:
    """The per-seed best with every deviation moved to the teacher's mean (each Δ less its deviation's mean): what
    noise alone puts into `per_seed_best`. A per-seed best at or below it is no evidence of room."""
    return _best_per_seed([[d - statistics.fmean(r.objective) for d in r.objective] for r in rows])


def _interval(values: Sequence[float]) -> str:
    if len(values) < 2:
        return f"{statistics.fmean(values):+.2f}"
    low, high = t_interval(values)
    return f"{statistics.fmean(values):+.2f} [{low:+.2f}, {high:+.2f}]"


def deviation_markdown(run: DeviationRun) -> str:
    """One table, best deviation first: the epoch it overrules, the action it takes, its objective Δ against the
    teacher (seeds better / worse, mean with its 95 % t-interval over the seeds) and its raw test accuracy Δ; then
    how many intervals lie above 0 against how many would by chance, the per-seed best, and (among several) that the
    best one still needs fresh seeds."""
    teacher, rows = deviation_rows(run)
    tie = run.result.tie_threshold
    what = "training compute" if run.charge == "compute" else "parameters"
    n = len(rows[0].objective)
    note = run.result.incomplete_note()
    lines = [*([f"**{note}**", ""] if note else []),
             f"One-epoch deviations from {teacher} on {n} paired seeds (base seed {run.result.seed}): the objective "
             f"is test accuracy above the paired static host minus λ = {run.cost:.3f} pp per 100 % more {what}; Δ is "
             f"the deviation's minus the teacher's on the same seed (pp, mean [95 % t-interval]); better / worse count "
             f"seeds with |Δ| ≥ {tie:.3f} pp; took place: seeds on which the action was legal and not the teacher's "
             f"own (elsewhere the episode is the teacher's, Δ exactly 0).", "",
             "| epoch | action | took place | objective Δ: better / worse | mean [95 %] | test acc Δ: mean [95 %] |",
             "|---|---|---|---|---|---|"]
    for row in rows:
        better, worse = row.counts(tie)
        lines.append(f"| {row.epoch} | {row.action} | {row.took_place} of {n} | {better} / {worse} of {n} | "
                     f"{_interval(row.objective)} | {_interval(row.raw)} |")
    measured = [r for r in rows if r.took_place]
    above = sum(n > 1 and t_interval(r.objective)[0] > 0 for r in measured)
    below = sum(n > 1 and t_interval(r.objective)[1] < 0 for r in measured)
    lines += ["", f"Deviations whose interval is above 0: {above} of the {len(measured)} that took place (below 0: "
              f"{below}); with no deviation better on average, about {0.025 * len(measured):.1f} would be above 0 by "
              f"chance.",
              f"Per-seed best of the teacher and its deviations, over the teacher: {_interval(per_seed_best(rows))} "
              f"pp on the objective (an upper bound on choosing among these deviations per seed, inflated by noise); "
              f"noise alone, every deviation moved to the teacher's mean, gives {_interval(noise_floor(rows))}."]
    if len(measured) > 1:
        lines.append(f"The best of {len(measured)} deviations is picked on these seeds, so its own interval is "
                     f"optimistic: measure it alone beside the teacher on fresh seeds (another `--seed`) before "
                     f"acting on it.")
    return "\n".join(lines) + "\n"
