"""A policy trained across a family's training types, measured on its held-out types against the references.

K PPO runs train across the training types (each env group on the type its data seed draws, `simic.ppo.settings`).
Each run's final policy then runs on every training type's selection seeds (`replay-source/run-<r>/TYPE/`), and its
replay is its modal action per epoch over all those episodes. On every held-out type, each run's init, final policy
and replay run on the same paired evaluation seeds as the references (a phase of their own beside the references',
`heldout/TYPE/policies/`), so every difference is paired per seed. Reported per run × held-out type: the share of the
type's SBS → VBS gap the final policy closes (in the family's score) and its Δ in final test accuracy against SBS,
best-rule, its own init and its own replay; over runs × types, each with the mean and IQM of the per-run means, the
crossed interval over runs and types, P(X > Y) and how many of the K runs show it on their own (`stats.aggregate_runs`
with the held-out types in place of seeds: a per-type mean is one observation).
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from esper.data.families import SCORES, Family
from esper.env import EpisodeResult
from esper.evaluation.heldout import SBS, VBS, HeldOutType, episode_gflops
from esper.evaluation.phases import Phase
from esper.evaluation.portfolio import gap_closed
from esper.evaluation.precheck import Runners, merged_results, type_config, type_scores
from esper.evaluation.results import ComparisonResult
from esper.evaluation.runs import FINAL, INIT, REPLAY_ROLE, Cost, RunLabels, episodes_cost, run_rows, scores
from esper.evaluation.selection import BEST_RULE
from esper.evaluation.stats import RunAggregate, aggregate_runs
from esper.evaluation.study import evaluation_plan, replay_source_phases, selection_plan, study_controllers
from esper.leyline.seeding import SeedStream
from esper.simic.ppo.config import TrainingConfig
from esper.storage.rows import read_rows

__all__ = ["CLOSED", "DELTAS", "OBSERVES", "PolicyResults", "heldout_policies", "replay_source"]

OBSERVES = ("The policy observes, after each epoch, only what the training and validation splits show: the epoch's "
            "place in the episode, the host's train and validation loss and accuracy (their last change, the last "
            "five validation values, the best so far, the epochs on a plateau), the parameters grown relative to the "
            "host and the slots occupied, and per slot its seed's stage, blend α, blueprint and measured improvement "
            "with the seeds' gradient telemetry; never the test split, nor which instance type it runs on.")
DELTAS = (SBS, BEST_RULE, INIT, REPLAY_ROLE)
"""What the final policy is compared with per seed on a held-out type: the references chosen on the training types,
and its own run's init and replay."""
CLOSED = "gap closed"


def replay_source(family: Family, config: TrainingConfig, path: Path, train_dirs: Sequence[Path], run: int,
                  seeds: int, runner: Runners, max_test_samples: int | None = None) -> None:
    """Run `run`'s final policy on the first `seeds` selection episodes of every training type, in
    `path`/run-<r>/TYPE/: the directory `replay:` reads them all from."""
    for itype in family.training:
        type_conf = type_config(config, family, itype)
        phase = replay_source_phases(path, selection_plan(type_conf, max_test_samples), train_dirs, seeds)[run]
        runner(type_conf)(dataclasses.replace(phase, name=f"{phase.name} on {itype.name}",
                                              path=phase.path / itype.name))


@dataclass
class PolicyResults:
    """Per run × held-out type (`cells`), over runs × types (`aggregate`: `CLOSED` in % of the gap and each of
    `DELTAS` in pp; None where no type has a gap to close), each policy role's training GFLOPs per evaluation episode
    per type (mean over runs), and each run's training cost (its PPO episodes; their static twins excluded)."""

    runs: int
    cells: list[dict[str, Any]]
    aggregate: dict[str, RunAggregate | None]
    gflops: dict[str, dict[str, float]]
    training: list[Cost]

    def to_dict(self) -> dict[str, Any]:
        return {"runs": self.runs, "observes": OBSERVES, "per_run": self.cells, "aggregate": self.aggregate,
                "gflops_per_episode": self.gflops, "training": self.training}


def heldout_policies(family: Family, config: TrainingConfig, types: Sequence[HeldOutType], path: Path, *,
                     train_dirs: Sequence[Path], replay_dirs: Sequence[Path], seeds: int, runner: Runners,
                     max_test_samples: int | None = None) -> PolicyResults:
    """Each run's init, final policy and replay on every held-out type's evaluation seeds (`path`/TYPE/policies/),
    paired with that type's references, and what they show (see the module docstring)."""
    runs = [RunLabels(r) for r in range(len(train_dirs))]
    specs, labels = study_controllers((), train_dirs, replay_dirs)
    merged = []
    for h, itype in zip(types, family.held_out_types, strict=True):
        type_conf = type_config(config, family, itype)
        plan = evaluation_plan(type_conf, SeedStream.EVALUATION, max_test_samples)  # the references' seeds
        ran = runner(type_conf)(Phase(f"policies on held-out {itype.name}", path / itype.name / "policies", plan,
                                      specs, labels, seeds))
        merged.append(merged_results([h.result, ran]))
    cells = [_cell(family, h, result, r) for h, result in zip(types, merged, strict=True) for r in runs]
    gflops = {h.name: {role: statistics.fmean(episode_gflops(result)[r.of(role)] for r in runs)
                       for role in (INIT, FINAL, REPLAY_ROLE)} for h, result in zip(types, merged, strict=True)}
    training = [episodes_cost(read_rows(d / EpisodeResult.FILE, EpisodeResult)) for d in train_dirs]
    return PolicyResults(len(runs), cells, _aggregate(types, merged, runs, cells), gflops, training)


def _cell(family: Family, h: HeldOutType, result: ComparisonResult, run: RunLabels) -> dict[str, Any]:
    """Run `run`'s final policy on held-out type `h`: its score, the share of the gap it closes, its Δ per seed."""
    score = type_scores(result, family.score, "test").get(run.final)  # none outside the frontier's range
    (row,) = run_rows(result, [run], [h.specs[SBS], h.specs[BEST_RULE], INIT, REPLAY_ROLE])
    deltas = {role: row["deltas"][h.specs.get(role, role)] for role in DELTAS}
    return {"run": run.run, "type": h.name, "score": score,
            "closed": None if score is None else gap_closed(score, h.scores[SBS], h.scores[VBS]),
            "final_test_accuracy": row["final_test_accuracy"], "deltas": deltas, "schedule": row["schedule"]}


def _mean(result: ComparisonResult, label: str) -> float:
    return statistics.fmean(scores(result, label))


def _aggregate(types: Sequence[HeldOutType], merged: Sequence[ComparisonResult], runs: Sequence[RunLabels],
               cells: Sequence[dict[str, Any]]) -> dict[str, RunAggregate | None]:
    """Over runs × held-out types, a type's mean over its seeds being one observation. A difference below one test
    sample of the coarsest type's test split is a tie."""
    tie = max(result.tie_threshold for result in merged)
    final = [[_mean(result, run.final) for result in merged] for run in runs]
    out: dict[str, RunAggregate | None] = {}
    for role in DELTAS:
        if role in (INIT, REPLAY_ROLE):
            reference = [[_mean(result, run.of(role)) for result in merged] for run in runs]
        else:
            reference = [[_mean(result, h.specs[role]) for h, result in zip(types, merged, strict=True)]]
        out[role] = aggregate_runs(final, reference, tie_threshold=tie)
    closed = {(c["run"], c["type"]): c["closed"] for c in cells}
    gapped = [h.name for h in types if all(closed[r.run, h.name] is not None for r in runs)]
    out[CLOSED] = aggregate_runs([[100 * closed[r.run, t] for t in gapped] for r in runs], [[0.0] * len(gapped)],
                                 tie_threshold=0.0) if gapped else None
    return out


def _interval(a: RunAggregate | None, unit: str) -> list[str]:
    if a is None:
        return ["—"] * 5
    return [f"{a['mean']:+.2f}{unit}", f"{a['iqm']:+.2f}{unit}", f"[{a['ci95'][0]:+.2f}, {a['ci95'][1]:+.2f}]",
            f"{a['prob_improvement']:.2f}", f"{a['better']} / {a['worse']} of {a['runs']}"]


def _delta(d: dict[str, Any]) -> str:
    return f"{d['mean_delta']:+.2f} [{d['ci95'][0]:+.2f}, {d['ci95'][1]:+.2f}]"


def policy_markdown(family: Family, policy: PolicyResults) -> str:
    """The policy's section of heldout/summary.md: what it observes, its aggregates over runs × held-out types, each
    run on each type, and what its episodes and its training cost."""
    lines = ["", "## The policy trained across the training types", "", OBSERVES, "",
             f"{policy.runs} training run(s). Gap closed: the share of the type's SBS → VBS gap the final policy "
             f"closes ({SCORES[family.score]}); Δ: final test accuracy minus the reference's on the same paired seeds "
             f"(pp). Over runs × held-out types (a type's mean over its seeds is one observation): the mean and IQM "
             f"of the per-run means, the 95 % interval over runs and types, P(final > reference) on a random run and "
             f"type, and the runs whose own interval over the types lies above / below 0.", "",
             "| final policy | mean | IQM | 95 % interval (runs × types) | P(X > Y) | runs better / worse |",
             "|---|---|---|---|---|---|"]
    for key in (CLOSED, *DELTAS):
        what = "share of the SBS → VBS gap closed (%)" if key == CLOSED else f"Δ vs {key}"
        lines.append(f"| {what} | " + " | ".join(_interval(policy.aggregate[key], "")) + " |")
    lines += ["", "| run | held-out type | score | gap closed | " + " | ".join(f"Δ vs {d}" for d in DELTAS) + " |",
              "|---|---|---|---|" + "---|" * len(DELTAS)]
    for c in policy.cells:
        score = "—" if c["score"] is None else f"{c['score']:.2f}"
        closed = "—" if c["closed"] is None else f"{100 * c['closed']:.0f} %"
        lines.append(f"| {c['run']} | {c['type']} | {score} | {closed} | "
                     + " | ".join(_delta(c["deltas"][d]) for d in DELTAS) + " |")
    lines += ["", "Training GFLOPs per evaluation episode (mean over runs):", "",
              "| held-out type | " + " | ".join((INIT, FINAL, REPLAY_ROLE)) + " |", "|---|---|---|---|"]
    for name, by_role in policy.gflops.items():
        lines.append(f"| {name} | " + " | ".join(f"{by_role[r]:.2f}" for r in (INIT, FINAL, REPLAY_ROLE)) + " |")
    costs = "; ".join(f"run {r}: {c['env_epochs']:,} env-epochs, {c['gflops']:,.1f} GFLOPs"
                      for r, c in enumerate(policy.training))
    lines += ["", f"Training (PPO episodes across the training types, their static twins excluded): {costs}.", ""]
    return "\n".join(lines)
