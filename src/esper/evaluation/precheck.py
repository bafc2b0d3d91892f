"""A task family's pre-check, before any policy trains: is there anything for a per-run controller to win?

For each training type, best-fixed is searched as in a study (greedy rounds of `fixed:` specs on the type's selection
seeds, chosen by validation accuracy). Each training type then runs, on the same selection seeds, the static host
and every other type's best-fixed (and, for a family scored against the static frontier, the static host at widths
0.5–2), so every candidate a portfolio may choose is scored on every type. The single best fixed architecture (SBS)
is the candidate best on average over the training types, the virtual best (VBS) each type's best, both chosen by the
family's score on validation; the table reports their score on the test split of the same episodes. A family is worth
a learned controller only where VBS − SBS averages at least `GAP_THRESHOLD_PP` over the training types.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from esper.data.families import SCORES, Family, InstanceType, family_task
from esper.env import EpisodeResult
from esper.evaluation.episodes import EpisodePlan
from esper.evaluation.phases import Phase, PhaseRunner
from esper.evaluation.portfolio import GAP_THRESHOLD_PP, portfolio
from esper.evaluation.regime import frontier_gaps, static_width_labels
from esper.evaluation.results import ComparisonResult
from esper.evaluation.runs import Cost, episodes_cost
from esper.evaluation.selection import BEST_FIXED, Selection, run_selection
from esper.evaluation.study import selection_plan
from esper.simic.ppo.config import TrainingConfig
from esper.storage.rundir import write_json_atomic, write_text_atomic

__all__ = ["PRECHECK_FILE", "STATIC", "Precheck", "Runners", "architectures", "merged_results", "run_precheck",
           "type_config", "type_scores", "with_portfolio"]

PRECHECK_FILE = "precheck.json"
STATIC = "static"


def type_config(config: TrainingConfig, family: Family, itype: InstanceType) -> TrainingConfig:
    """The study's setting on one instance type: its task and sample cap (a single-task setting, not a run across the
    family). The reward is only logged here (no policy learns from it), so it charges no λ_p; nothing selection runs
    is the policy's, so no blueprints either."""
    return config.with_overrides(**{"episode.task": family_task(family, itype),
                                    "episode.max_train_samples": itype.max_train_samples, "family": None,
                                    "reward.param_cost": None, "reward.type_param_costs": None,
                                    "ppo.blueprints": None})


def _mean(values: Sequence[float]) -> float:
    return statistics.fmean(values)


def type_scores(result: ComparisonResult, score: str, split: str) -> dict[str, float]:
    """Each controller's mean `score` over the paired episodes of `result`, on the test split or (`split` "val")
    the final validation accuracy; against the frontier, the static host is 0 and a controller whose cost lies
    outside the frontier's widths has no score."""
    if score == "frontier_gflops":
        gaps = frontier_gaps(result, "gflops", split=split)
        scored = {c: g["mean_delta"] for c, g in gaps.items() if g["mean_delta"] is not None}
        return {STATIC: 0.0, **scored} if STATIC in result.controllers else scored
    by: dict[str, list[EpisodeResult]] = {c: [] for c in result.controllers}
    for e in result.episodes:
        by[e.controller].append(e)

    def accuracy(e: EpisodeResult) -> float:
        if split == "val":
            return e.final_accuracy
        assert e.final_test_accuracy is not None, "comparison episodes are test-scored"
        return e.final_test_accuracy

    return {c: _mean([accuracy(e) for e in eps]) for c, eps in by.items() if eps}


@dataclass
class Precheck:
    """The pre-check's outcome: per training type its best-fixed and VBS, the SBS over them, their scores (val:
    what chose them; test: what is reported) and the search cost of each type's candidates."""

    family: str
    score: str
    best_fixed: dict[str, str]
    sbs: str
    vbs: dict[str, str]
    val: dict[str, dict[str, float]]
    test: dict[str, dict[str, float]]
    cost: dict[str, Cost]
    threshold: float

    def gap(self, itype: str) -> float:
        """VBS − SBS on `itype`, in the family's score on the test split."""
        return self.test[itype][self.vbs[itype]] - self.test[itype][self.sbs]

    @property
    def mean_gap(self) -> float:
        return _mean([self.gap(t) for t in self.best_fixed])

    @property
    def passed(self) -> bool:
        return self.mean_gap >= self.threshold

    def to_dict(self) -> dict[str, Any]:
        return {"family": self.family, "score": self.score, "best_fixed": self.best_fixed, "sbs": self.sbs,
                "vbs": self.vbs, "gaps": {t: self.gap(t) for t in self.best_fixed}, "mean_gap": self.mean_gap,
                "threshold": self.threshold, "passed": self.passed, "val": self.val, "test": self.test,
                "cost": self.cost}

    def markdown(self) -> str:
        """The pre-check table: per training type its best-fixed, its VBS and the SBS, with their scores."""
        unit = "pp" if self.score == "frontier_gflops" else "%"
        lines = [f"# Pre-check of family {self.family}", "",
                 f"Score: {SCORES[self.score]} ({unit}), on the test split of the selection episodes; best-fixed, "
                 f"SBS and VBS were chosen by the same score on validation. SBS = `{self.sbs}`.", "",
                 "| type | best-fixed | score | VBS | score | SBS score | VBS − SBS |", "|---|---|---|---|---|---|---|"]
        for t, best in self.best_fixed.items():
            test = self.test[t]
            lines.append(f"| {t} | {best} | {test.get(best, float('nan')):.2f} | {self.vbs[t]} | "
                         f"{test[self.vbs[t]]:.2f} | {test[self.sbs]:.2f} | {self.gap(t):+.2f} |")
        verdict = ("proceed: a per-run choice of architecture can win" if self.passed else
                   "refused: one fixed architecture serves these types about as well as each type's best")
        lines += ["", f"Mean VBS − SBS over the training types: **{self.mean_gap:+.2f} pp** (threshold "
                      f"{self.threshold:g} pp): {verdict}.", "", *self._matrix()]
        return "\n".join(lines) + "\n"

    def _matrix(self) -> list[str]:
        """The static host and each type's best-fixed (what SBS chooses from) on every training type (test): where
        a family is refused, what its types have in common; where it passes, what each type's choice costs the
        others."""
        types = list(self.best_fixed)
        lines = ["The static host and each type's best-fixed on every training type (test score):", "",
                 "| candidate | " + " | ".join(types) + " | mean |", "|---" * (len(types) + 2) + "|"]
        for c in [STATIC, *dict.fromkeys(self.best_fixed.values())]:
            scores = [self.test[t].get(c) for t in types]
            known = [v for v in scores if v is not None]
            mean = f"{_mean(known):.2f}" if len(known) == len(types) else "—"
            lines.append(f"| {c} | " + " | ".join("—" if v is None else f"{v:.2f}" for v in scores) + f" | {mean} |")
        return lines


def merged_results(results: Sequence[ComparisonResult]) -> ComparisonResult:
    """One comparison of every controller of `results` (phases of one type on the same paired selection seeds)."""
    labels = list(dict.fromkeys(c for r in results for c in r.controllers))
    episodes = [e for r in results for e in r.episodes]
    return ComparisonResult.from_episodes(labels, episodes, tie_threshold=results[0].tie_threshold,
                                          seed=results[0].seed)


def with_portfolio(selection: Selection, run: PhaseRunner, plan: EpisodePlan, path: Path, name: str,
                   wanted: Sequence[str], seeds: int) -> ComparisonResult:
    """A type's selection rounds and one phase more (`path`) on the same selection seeds, running the specs of
    `wanted` the search has not tried there, as one comparison."""
    tried = {c for r in selection.rounds for c in r.controllers}
    specs = [c for c in dict.fromkeys(wanted) if c not in tried]
    return merged_results([*selection.rounds, run(Phase(name, path, plan, specs, specs, seeds))])


def architectures(scores: dict[str, float]) -> dict[str, float]:
    """The scores of fixed architectures (`fixed:` specs and the static host): what SBS and VBS choose from."""
    return {c: v for c, v in scores.items() if c == STATIC or c.startswith("fixed:")}


Runners = Callable[[TrainingConfig], PhaseRunner]
"""The phase runner of an instance type's setting (its type config)."""


def run_precheck(family: Family, config: TrainingConfig, path: Path, seeds: int, runner: Runners,
                 max_test_samples: int | None = None) -> Precheck:
    """The pre-check (see the module docstring) on `seeds` selection seeds per training type, each type's phases in
    `path`/TYPE/ (selection/round-N/, portfolio/); `runner(type config)` runs a phase. Writes precheck.json and
    summary.md in `path`."""
    plans, selections = {}, {}
    for itype in family.training:
        type_conf = type_config(config, family, itype)
        plans[itype.name] = (type_conf, selection_plan(type_conf, max_test_samples))
        selections[itype.name] = run_selection(plans[itype.name][1], path / itype.name / "selection", seeds,
                                               runner(type_conf), kinds=(BEST_FIXED,))
    best_fixed = {t: s.chosen[BEST_FIXED] for t, s in selections.items()}
    statics = static_width_labels() if family.score == "frontier_gflops" else [STATIC]
    merged = {t: with_portfolio(selections[t], runner(type_conf), plan, path / t / "portfolio", f"portfolio on {t}",
                                [*statics, *sorted(best_fixed.values())], seeds)
              for t, (type_conf, plan) in plans.items()}
    val = {t: architectures(type_scores(r, family.score, "val")) for t, r in merged.items()}
    test = {t: type_scores(r, family.score, "test") for t, r in merged.items()}
    chosen = portfolio(val, list(val))
    check = Precheck(family.key, family.score, best_fixed, chosen.sbs, chosen.vbs, val, test,
                     {t: episodes_cost(r.episodes) for t, r in merged.items()}, threshold=GAP_THRESHOLD_PP)
    write_json_atomic(path / PRECHECK_FILE, check.to_dict())
    write_text_atomic(path / "summary.md", check.markdown())
    return check
