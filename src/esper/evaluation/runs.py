"""Claims over several training runs: each run's policy against its own init and replay, the aggregates over runs,
and what every controller cost to obtain.

One PPO run is one draw: two training seed streams of one preset have ended +7.8 and −0.3 pp over their inits. A
study therefore trains K policies on disjoint training seed streams and scores every run's init, final policy and
replay on the same paired evaluation seeds, so that X against Y is a runs × seeds table of differences. Its
aggregate (`stats.aggregate_runs`) is what a claim may rest on: the mean and IQM of the per-run means, an interval
over runs and seeds, P(X > Y), and "k of K": how many runs show it on their own.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypedDict

from esper.env import EpisodeResult
from esper.evaluation.results import ComparisonResult
from esper.evaluation.stats import RunAggregate, aggregate_runs, compare_pair

__all__ = ["FINAL", "INIT", "REPLAY_ROLE", "Cost", "RunLabels", "RunRow", "add_costs", "aggregate_table",
           "costs_to_obtain", "episodes_cost", "run_labels", "run_rows", "scores", "static_episode_cost"]

INIT, FINAL, REPLAY_ROLE = "ppo (init)", "ppo (final)", "replay"


@dataclass(frozen=True)
class RunLabels:
    """How the evaluation names training run r's controllers."""

    run: int

    @property
    def init(self) -> str:
        return f"ppo[{self.run}] (init)"

    @property
    def final(self) -> str:
        return f"ppo[{self.run}] (final)"

    @property
    def replay(self) -> str:
        return f"replay[{self.run}]"

    def of(self, role: str) -> str:
        return {INIT: self.init, FINAL: self.final, REPLAY_ROLE: self.replay}[role]


def run_labels(runs: int) -> list[RunLabels]:
    return [RunLabels(r) for r in range(runs)]


Scorer = Callable[[ComparisonResult, str], list[float]]
"""A controller's score per paired seed, in seed order: final test accuracy (`scores`), or an objective."""


def scores(result: ComparisonResult, label: str) -> list[float]:
    """`label`'s final test accuracy per paired seed, in seed order (validation where an episode has no test
    score)."""
    eps = sorted((e for e in result.episodes if e.controller == label), key=lambda e: e.episode)
    return [e.final_test_accuracy if e.final_test_accuracy is not None else e.final_accuracy for e in eps]


class AggregateRow(RunAggregate):
    """One line of the aggregate table: a role of every run (X) against a reference (Y)."""

    x: str
    y: str


def _rows_of(result: ComparisonResult, runs: Sequence[RunLabels], name: str, scorer: Scorer) -> list[list[float]]:
    """A role's scores per run (`name` is a role such as FINAL), or a reference's single row (a plain label)."""
    if name in (INIT, FINAL, REPLAY_ROLE):
        return [scorer(result, r.of(name)) for r in runs]
    return [scorer(result, name)]


def aggregate_table(result: ComparisonResult, runs: Sequence[RunLabels], pairs: Iterable[tuple[str, str]],
                    scorer: Scorer = scores) -> list[AggregateRow]:
    """For each (X, Y) of `pairs` whose controllers ran: X's runs against Y (its own run's init or replay when Y is
    a role, else the one reference), aggregated over runs and seeds, on `scorer`'s scores."""
    present = set(result.controllers)
    rows: list[AggregateRow] = []
    for x, y in pairs:
        needed = [r.of(n) for r in runs for n in (x, y) if n in (INIT, FINAL, REPLAY_ROLE)]
        if not set(needed) <= present or (y not in (INIT, FINAL, REPLAY_ROLE) and y not in present):
            continue
        agg = aggregate_runs(_rows_of(result, runs, x, scorer), _rows_of(result, runs, y, scorer),
                             tie_threshold=result.tie_threshold)
        rows.append({"x": x, "y": y, **agg})
    return rows


class RunRow(TypedDict):
    """Run r's final policy: its test accuracy and its paired Δ [95 % interval over seeds] against the references;
    `schedule` when it does not beat its own replay (an open-loop schedule would do as well)."""

    run: int
    final_test_accuracy: float
    deltas: dict[str, dict[str, float | list[float] | str]]
    schedule: bool


def run_rows(result: ComparisonResult, runs: Sequence[RunLabels], references: Sequence[str],
             scorer: Scorer = scores) -> list[RunRow]:
    """Each run's final policy against `references` on `scorer`'s scores (`final_test_accuracy` is the mean score)."""
    out: list[RunRow] = []
    for r in runs:
        final = scorer(result, r.final)
        deltas: dict[str, dict[str, float | list[float] | str]] = {}
        for ref in references:
            label = r.of(ref) if ref in (INIT, REPLAY_ROLE) else ref
            if label not in result.controllers:
                continue
            pair = compare_pair(final, scorer(result, label), tie_threshold=result.tie_threshold)
            deltas[ref] = {"mean_delta": pair["mean_delta"], "ci95": pair["ci95"], "verdict": pair["verdict"]}
        beats_replay = deltas.get(REPLAY_ROLE, {}).get("verdict") == "better"
        out.append({"run": r.run, "final_test_accuracy": sum(final) / len(final), "deltas": deltas,
                    "schedule": REPLAY_ROLE in deltas and not beats_replay})
    return out


class Cost(TypedDict):
    """What it took to obtain a controller: env-epochs trained and their training GFLOPs (0 for a controller named
    by hand)."""

    env_epochs: int
    gflops: float


NO_COST: Cost = {"env_epochs": 0, "gflops": 0.0}
LEARNED = ("ppo", "iql", "replay")
"""Controllers named on the command line whose training cost a study cannot know."""


def episodes_cost(episodes: Iterable[EpisodeResult], twins: int = 0, twin_episode: Cost = NO_COST) -> Cost:
    """The summed cost of `episodes` (one env-epoch per accuracy-curve point) plus `twins` static twins, each costing
    `twin_episode` (episodes record their own cost, twin excluded)."""
    epochs, flops = 0, 0.0
    for e in episodes:
        epochs += len(e.accuracy_curve)
        flops += e.train_flops / 1e9
    return {"env_epochs": epochs + twins * twin_episode["env_epochs"],
            "gflops": flops + twins * twin_episode["gflops"]}


def add_costs(*costs: Cost) -> Cost:
    return {"env_epochs": sum(c["env_epochs"] for c in costs), "gflops": sum(c["gflops"] for c in costs)}


def static_episode_cost(result: ComparisonResult) -> Cost:
    """One static episode's cost in this comparison's setting (what a static twin costs)."""
    eps = [e for e in result.episodes if e.controller == "static"]
    if not eps:
        return NO_COST
    cost = episodes_cost(eps)
    return {"env_epochs": cost["env_epochs"] // len(eps), "gflops": cost["gflops"] / len(eps)}


def costs_to_obtain(controllers: Sequence[str], runs: Sequence[RunLabels], selection: Cost | None,
                    training: Sequence[Cost], replay_sources: Sequence[Cost], chosen: Mapping[str, str],
                    teacher: Cost = NO_COST) -> dict[str, Cost | None]:
    """Per controller label: best-fixed and best-rule cost the whole selection search; a run's init what its
    `teacher` cost to choose (nothing for a policy learned from scratch or a teacher named by hand); its final policy
    that and its training; its replay both and the episodes the replay was read from; hand-named controllers nothing.
    None: not known (an extra controller named on the command line)."""
    out: dict[str, Cost | None] = {}
    by_label = {r.final: add_costs(teacher, training[r.run]) for r in runs} | {
        r.replay: add_costs(teacher, training[r.run], replay_sources[r.run]) for r in runs} | {
        r.init: teacher for r in runs}
    for label in controllers:
        if label in chosen:
            out[label] = selection
        elif label in by_label:
            out[label] = by_label[label]
        elif label.split(":")[0] in LEARNED:
            out[label] = None
        else:
            out[label] = NO_COST
    return out
