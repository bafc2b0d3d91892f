"""Head-to-head comparison of controllers on identical env seeds and data order.

For episode i every controller gets an env with the same seed (identical host initialization) and all of them
advance together, batch-first, on the same shared batches, so differences come from the decisions alone.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from pathlib import PurePath
from typing import Any

from esper.data.tasks import DataCache, TaskSpec
from esper.env import EpisodeResult
from esper.env.driver import EnvPool
from esper.evaluation.controllers import all_controllers
from esper.evaluation.episodes import EpisodePlan, build_controller, one_test_sample, run_controller_episodes
from esper.evaluation.results import ComparisonResult
from esper.evaluation.resume import ResumePoint
from esper.leyline import TelemetrySink
from esper.leyline.errors import UserInputError, did_you_mean
from esper.storage.rundir import RunDirectory
from esper.tamiyo import DEVIATE, MATCHED, MAX_HOST_WIDTH, ControllerSpec

__all__ = ["ComparisonResult", "check_controllers", "comparison_phases", "controller_labels", "host_params",
           "largest_grown", "match_target", "matched_width", "parse_controllers", "run_comparison"]


def parse_controllers(texts: Sequence[str]) -> list[ControllerSpec]:
    """Registered controller specs; unknown names and duplicates are errors."""
    specs = [all_controllers().parse(text) for text in texts]
    labels = [s.label for s in specs]
    if len(set(labels)) != len(labels):
        raise UserInputError(f"Controllers must be distinct, got {labels}")
    return specs


def controller_labels(specs: Sequence[ControllerSpec]) -> list[str]:
    """How tables, files, plots and TensorBoard name each controller: the spec as written, except that a file or
    directory argument is shortened to its name (`ppo:runs/x/checkpoints/final.pt` is `ppo:final`, `ppo:runs/x` is
    `ppo:x`), so no label carries a path (a deviation's `/` names a blend: it is kept); repeated names get `#2`,
    `#3`."""
    labels: list[str] = []
    for spec in specs:
        label = _label(spec)
        base, n = label, 2
        while label in labels:
            label, n = f"{base}#{n}", n + 1
        labels.append(label)
    return labels


def _label(spec: ControllerSpec) -> str:
    if spec.name == DEVIATE:  # its `/` separates a blend, not a path (its teacher, grow: or static, has none)
        return spec.label
    if spec.argument is not None and ("/" in spec.argument or "\\" in spec.argument or spec.argument.endswith(".pt")):
        path = PurePath(spec.argument)
        return f"{spec.name}:{path.stem if path.suffix == '.pt' else path.name}"
    return spec.label


def comparison_phases(specs: Sequence[ControllerSpec], labels: Sequence[str]) -> list[list[str]]:
    """The labels run side by side, then (when asked for) `static:matched`, which needs the first phase's results."""
    first = [n for s, n in zip(specs, labels, strict=True) if not _is_matched(s)]
    return [first, [f"static:{MATCHED}"]] if len(first) < len(specs) else [first]


def check_controllers(specs: Sequence[ControllerSpec], plan: EpisodePlan) -> list[str]:
    """Build every controller once, so one that cannot drive this setup fails before any training."""
    for i, spec in enumerate(specs):
        if not _is_matched(spec):
            build_controller(spec, plan, episode=0, index=i)
    if any(_is_matched(s) for s in specs) and all(_is_matched(s) or s.name == "static" for s in specs):
        raise UserInputError("static:matched needs a growing controller to match (e.g. heuristic or ppo:PATH)")
    return [s.label for s in specs]


def _is_matched(spec: ControllerSpec) -> bool:
    return spec.name == "static" and spec.argument == MATCHED


def host_params(task: TaskSpec, width: float) -> int:
    return sum(p.numel() for p in task.host_factory(width).parameters())


def matched_width(task: TaskSpec, target_params: float) -> float:
    """The smallest width (to 0.01) whose static host has at least `target_params` parameters.

    Parameter count grows with width (in steps, as channel counts are integers), so a bisection over the 0.01 grid
    finds the count closest to the target from above.
    """
    if host_params(task, 1.0) >= target_params:
        return 1.0
    lo, hi = 100, round(100 * MAX_HOST_WIDTH)
    if host_params(task, hi / 100) < target_params:
        raise UserInputError(f"No static host up to width {MAX_HOST_WIDTH} has {target_params:.0f} parameters")
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if host_params(task, mid / 100) >= target_params:
            hi = mid
        else:
            lo = mid
    return hi / 100


def mean_final_params(episodes: Sequence[EpisodeResult], label: str) -> float:
    """A controller's mean final parameter count (host + seeds) over its episodes."""
    return statistics.fmean(e.host_params + e.params_added for e in episodes if e.controller == label)


def largest_grown(episodes: Sequence[EpisodeResult], labels: Sequence[str]) -> tuple[str, float] | None:
    """The growing controller with the largest mean final parameter count (host + seeds), and that count."""
    grown = {c: mean_final_params(episodes, c) for c in labels
             if any(e.params_added for e in episodes if e.controller == c)}
    if not grown:
        return None
    label = max(grown, key=lambda c: grown[c])
    return label, grown[label]


def match_target(episodes: Sequence[EpisodeResult], labels: Sequence[str], match: Sequence[str] | None
                 ) -> tuple[str, float] | None:
    """What static:matched is widened to: the mean final parameter count of the controllers `match` (the ones
    under study, e.g. the final policies of a study's training runs) when named, else of the largest grown one;
    None when nothing grew."""
    if not match:
        return largest_grown(episodes, labels)
    unknown = [m for m in match if m not in labels]
    if unknown:
        raise UserInputError(f"--match {unknown[0]}: no such controller in this comparison"
                             f"{did_you_mean(unknown[0], labels)}. Available: {list(labels)}")
    return ", ".join(match), statistics.fmean(mean_final_params(episodes, m) for m in match)


def run_comparison(specs: Sequence[ControllerSpec], plan: EpisodePlan, episodes: int, cache: DataCache, *,
                   tie_threshold: float | None = None, sink: TelemetrySink | None = None,
                   run_dir: RunDirectory | None = None, labels: Sequence[str] | None = None,
                   resume: ResumePoint | None = None, match: Sequence[str] | None = None) -> ComparisonResult:
    """Every controller on the same paired episodes; `static:matched` runs last, widened to the mean parameter count
    of the controllers `match` (the ones under study), or of the largest grown one when `match` is None.

    `tie_threshold` (default: one test sample's worth) is the |Δ| below which a paired difference is a tie.
    `labels` (default: `controller_labels(specs)`) name the controllers in results, tables and plots. `resume`
    (from `resume_point`) continues an interrupted run past its finished episodes. With a `run_dir`, results.json is
    rewritten after every paired episode of the first phase, so an interrupted comparison still has results for its
    finished episodes, marked incomplete (`ComparisonResult.incomplete_note`); the final one follows the last phase.
    """
    check_controllers(specs, plan)
    tie_threshold = one_test_sample(plan, cache) if tie_threshold is None else tie_threshold
    names = list(labels) if labels is not None else controller_labels(specs)
    if len(names) != len(specs) or len(set(names)) != len(names):
        raise ValueError(f"Need one distinct label per controller, got {names}")
    first = [(s, n) for s, n in zip(specs, names, strict=True) if not _is_matched(s)]
    first_names = [n for _, n in first]
    results = list(resume.done(0)) if resume is not None else []
    pending = [n for n in names if n not in first_names]

    def write_partial() -> None:
        if run_dir is not None and results:
            ComparisonResult.from_episodes(first_names, results, tie_threshold=tie_threshold, seed=plan.seed,
                                           planned=episodes, pending=pending).write(run_dir)

    def partial_results(episode: int, finished: list[EpisodeResult], models: object) -> None:
        results.extend(finished)
        write_partial()

    write_partial()  # a resumed run asked for more episodes is unfinished again from its start

    matched: dict[str, Any] = {}
    with EnvPool(plan.workers, cache, role="episode worker") as pool:
        run_controller_episodes([s for s, _ in first], plan, episodes, pool, sink=sink, run_dir=run_dir,
                                on_episode=partial_results, labels=first_names,
                                start=resume.completed[0] if resume is not None else 0)
        if len(first) < len(specs):
            grown = match_target(results, first_names, match)
            target = grown[1] if grown is not None else float(host_params(plan.task, 1.0))
            width = matched_width(plan.task, target)
            matched = {"width": width, "matched_to": None if grown is None else grown[0], "target_params": target,
                       "host_params": host_params(plan.task, width)}
            spec = all_controllers().parse(f"static:{width}")
            results += resume.done(1) if resume is not None else []
            results += run_controller_episodes([spec], plan, episodes, pool, sink=sink, run_dir=run_dir,
                                               labels=[f"static:{MATCHED}"],
                                               start=resume.completed[1] if resume is not None else 0)
    comparison = ComparisonResult.from_episodes(names, results, tie_threshold=tie_threshold, seed=plan.seed,
                                                planned=episodes)
    comparison.matched = matched
    if run_dir is not None:
        comparison.write(run_dir)
    return comparison
