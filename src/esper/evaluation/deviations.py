"""How much room a teacher leaves: its one-epoch deviations (`deviate:` controllers), each against the teacher on
the same paired seeds, on the objective a learned controller is trained on.

A deviation and its teacher share the host seed, the data order and every decision before the overruled epoch, so
the per-seed difference of their objectives is Q(s, a) − Q(s, π_T(s)) on that seed, measured exactly. Where no
deviation is better than the teacher beyond noise, a policy that improves on the teacher must change several
decisions together, and one trained by overruling the teacher one sampled decision at a time sees only losses.

The table also gives the per-seed best: on each seed, the best of the teacher and every deviation. It bounds what a
policy choosing among these deviations could gain on each seed, and noise inflates it (the largest of many noisy
differences is above 0 even where no deviation is better on average).
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
from esper.tamiyo import DEVIATE

__all__ = ["DeviationRow", "DeviationRun", "deviation_markdown", "deviation_rows", "per_seed_best",
           "read_deviation_run"]


@dataclass(frozen=True)
class DeviationRow:
    """One deviation against its teacher: per paired seed, the objective's and raw test accuracy's difference."""

    label: str
    epoch: int
    action: str
    objective: list[float]
    raw: list[float]

    def counts(self, tie: float) -> tuple[int, int]:
        """Seeds on which the deviation is better, and worse, than the teacher (|Δ| < `tie` is neither)."""
        return sum(d >= tie for d in self.objective), sum(d <= -tie for d in self.objective)


@dataclass(frozen=True)
class DeviationRun:
    """A finished `esper compare` of deviations: its comparison, the spec behind each of its labels (a label
    shortens a path), and the objective it is scored on (the run's charge and λ: the one given, else the task's
    measured one)."""

    result: ComparisonResult
    specs: dict[str, str]
    charge: str
    cost: float


def read_deviation_run(run_dir: Path) -> DeviationRun:
    """The comparison in `run_dir` with its charge and λ from its config.json; a run that is not a finished
    comparison, or whose λ is neither given nor measured for its task, is refused naming the fix."""
    try:
        data = json.loads((run_dir / ComparisonResult.FILE).read_text(encoding="utf-8"))
        config = json.loads((run_dir / "config.json").read_text(encoding="utf-8"))["config"]
        charge = config["charge"]
        given = config["compute_cost"] if charge == "compute" else config["param_cost"]
        task, cap = config["task"], config["max_train_samples"]
        specs = dict(zip(config["controllers"], config["specs"], strict=True))
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
    return DeviationRun(result, specs, charge, float(cost))


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
                             f"comparison did not run {' or '.join(missing)}: add them to --controllers")
    gaps = charged_gaps(result, run.charge, run.cost)
    tests = {c: [e.final_test_accuracy for e in sorted((e for e in result.episodes if e.controller == c),
                                                       key=lambda e: e.episode)] for c in (teacher, *labels)}
    reference = [0.0] * len(tests[teacher]) if teacher == STATIC else gaps[teacher]["per_seed"]
    rows = []
    for label in labels:
        epoch, action, _ = _parts(spec_of[label])
        objective = [d - t for d, t in zip(gaps[label]["per_seed"], reference, strict=True)]
        raw = [_difference(d, t) for d, t in zip(tests[label], tests[teacher], strict=True)]
        rows.append(DeviationRow(label, epoch, action, objective, raw))
    return teacher, sorted(rows, key=lambda r: -statistics.fmean(r.objective))


def _difference(a: float | None, b: float | None) -> float:
    if a is None or b is None:
        raise UserInputError("an episode of this comparison has no test score: rerun it without stopping it early")
    return a - b


def per_seed_best(rows: Sequence[DeviationRow]) -> list[float]:
    """Per paired seed, the best objective difference over the teacher among the teacher itself (0) and every
    deviation: what choosing the best deviation on each seed, knowing its outcome, would add."""
    return [max(0.0, *column) for column in zip(*(r.objective for r in rows), strict=True)]


def _interval(values: Sequence[float]) -> str:
    if len(values) < 2:
        return f"{statistics.fmean(values):+.2f}"
    low, high = t_interval(values)
    return f"{statistics.fmean(values):+.2f} [{low:+.2f}, {high:+.2f}]"


def deviation_markdown(run: DeviationRun) -> str:
    """One table, best deviation first: the epoch it overrules, the action it takes, its objective Δ against the
    teacher (seeds better / worse, mean with its 95 % t-interval over the seeds) and its raw test accuracy Δ; then
    how many intervals lie above 0 against how many would by chance, and the per-seed best."""
    teacher, rows = deviation_rows(run)
    tie = run.result.tie_threshold
    what = "training compute" if run.charge == "compute" else "parameters"
    n = len(rows[0].objective)
    lines = [f"One-epoch deviations from {teacher} on {n} paired seeds (base seed {run.result.seed}): the objective "
             f"is test accuracy above the paired static host minus λ = {run.cost:.3f} pp per 100 % more {what}; Δ is "
             f"the deviation's minus the teacher's on the same seed (pp, mean [95 % t-interval]); better / worse count "
             f"seeds with |Δ| ≥ {tie:.3f} pp.", "",
             "| epoch | action | objective Δ: better / worse | mean [95 %] | test acc Δ: mean [95 %] |",
             "|---|---|---|---|---|"]
    for row in rows:
        better, worse = row.counts(tie)
        lines.append(f"| {row.epoch} | {row.action} | {better} / {worse} of {n} | {_interval(row.objective)} | "
                     f"{_interval(row.raw)} |")
    above = sum(n > 1 and t_interval(r.objective)[0] > 0 for r in rows)
    below = sum(n > 1 and t_interval(r.objective)[1] < 0 for r in rows)
    lines += ["", f"Deviations whose interval is above 0: {above} of {len(rows)} (below 0: {below}); with no "
              f"deviation better on average, about {0.025 * len(rows):.1f} would be above 0 by chance.",
              f"Per-seed best of the teacher and its deviations, over the teacher: {_interval(per_seed_best(rows))} "
              f"pp on the objective (an upper bound on choosing among these deviations per seed, inflated by noise)."]
    return "\n".join(lines) + "\n"
