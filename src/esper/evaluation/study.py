"""`esper study`: K PPO training runs compared on held-out paired seeds with everything a growth result must beat.

The study answers the two questions a user asks of a learned growth controller, each over K training runs: did it
*learn* (each run's final policy against its own initial policy and against its own open-loop replay, same seeds),
and does growth *help* (against the static host, the static host at other widths — equal parameters, equal training
compute — the best fixed architecture and the best scripted rule). Whether any verdict is about growth at all is
stated beside it: the static host's convergence and the capacity headroom (`regime`). The study directory holds the
selection rounds (`selection/`), the training runs (`train/run-<r>/`), the episodes each replay is read from
(`replay-source/run-<r>/`), the comparison (`eval/`), `results.json` and `summary.md`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from esper.data.tasks import DataCache
from esper.env import EpisodeResult
from esper.env.logs import StepRow
from esper.env.rewards import RewardFamily, needs_twin
from esper.evaluation.comparison import ComparisonResult, check_controllers, parse_controllers, run_comparison
from esper.evaluation.episodes import EpisodePlan
from esper.evaluation.exploration import OffTeacherEffect
from esper.evaluation.objective import objective_scorer
from esper.evaluation.phases import Phase
from esper.evaluation.regime import convergence, frontier_gaps, has_headroom, headroom, static_width_labels
from esper.evaluation.resume import ResumePoint
from esper.evaluation.runs import (
    FINAL,
    INIT,
    NO_COST,
    REPLAY_ROLE,
    Cost,
    RunLabels,
    RunRow,
    aggregate_table,
    costs_to_obtain,
    episodes_cost,
    run_rows,
)
from esper.evaluation.selection import BEST_FIXED, BEST_RULE
from esper.execution.devices import resolve_devices
from esper.leyline import TelemetrySink
from esper.leyline.seeding import SeedStream, run_seed
from esper.simic.ppo.config import TrainingConfig
from esper.simic.ppo.controller import AS_TEACHER, OVERRIDES_TEACHER
from esper.storage.rows import read_rows
from esper.storage.rundir import RunDirectory, checkpoints_dir
from esper.tamiyo.heuristic_record import TUNED

__all__ = [
    "REFERENCES",
    "STUDY_PRESETS",
    "TUNED_HEURISTIC",
    "StudyObjective",
    "StudyPreset",
    "StudyResults",
    "evaluation_plan",
    "references",
    "replay_seed_count",
    "replay_source_phases",
    "run_config",
    "run_evaluation",
    "selection_plan",
    "study_controllers",
    "study_results",
    "teacher_overrides",
    "training_cost",
]


@dataclass(frozen=True)
class StudyPreset:
    """A training preset, the baselines its controller is compared with, how many paired evaluation seeds, how many
    selection seeds choose best-fixed and best-rule (0: no selection), how many training runs, and whether it is a
    workflow demo (episodes too short to measure growth: the study says so when it ends)."""

    training: str
    baselines: tuple[str, ...]
    seeds: int
    selection_seeds: int = 0
    runs: int = 1
    workflow_demo: bool = False


REPLAY_SEEDS_WITHOUT_SELECTION = 2
"""Selection-stream seeds a replay is read from when a study runs no selection (the quick demo)."""
_BASELINES = (*static_width_labels(), "static:matched", "heuristic", "random")
STUDY_PRESETS: dict[str, StudyPreset] = {
    "quick": StudyPreset("quick", ("static", "static:2", "heuristic"), 3, workflow_demo=True),
    "synthetic": StudyPreset("synthetic", _BASELINES, 20, selection_seeds=5, runs=5),
    "fashion_mnist": StudyPreset("fashion_mnist", _BASELINES, 20, selection_seeds=5, runs=5),
}


def run_config(config: TrainingConfig, run: int) -> TrainingConfig:
    """Training run `run` of a study whose base config is `config`: the same setting on its own seed stream."""
    return config.with_overrides(seed=run_seed(config.seed, run))


def replay_seed_count(selection_seeds: int) -> int:
    """How many selection-stream seeds each replay is read from: the selection seeds, or a few without selection."""
    return selection_seeds or REPLAY_SEEDS_WITHOUT_SELECTION


def evaluation_plan(config: TrainingConfig, stream: SeedStream = SeedStream.EVALUATION,
                    max_test_samples: int | None = None, *, allow_setting_change: bool = False) -> EpisodePlan:
    """Paired episodes in the training setting (the episodes' setting, the reward logged, the seed and where they run)
    on the seeds of `stream`: the held-out evaluation stream, or the selection stream where best-fixed and best-rule
    are chosen and replays are read (so nothing reported was chosen on the episodes it is reported on). Neither shares
    a seed with any training run. `config` is the study's base config (run 0's); the policy's own settings (its
    blueprints among them) are not the plan's: every controller runs in the plan."""
    reward, execution = config.reward, config.execution
    return EpisodePlan(
        episode=config.episode, seed=config.seed, devices=resolve_devices(execution.device, execution.devices),
        max_test_samples=max_test_samples, reward_family=reward.reward_family.value,
        param_cost=reward.charged_param_cost(), charge=reward.charge, compute_cost=reward.charged_compute_cost(),
        gamma=reward.gamma, stream=stream, workers=execution, allow_setting_change=allow_setting_change,
    )


def selection_plan(config: TrainingConfig, max_test_samples: int | None = None) -> EpisodePlan:
    """The selection seeds' episodes in the study's setting."""
    return evaluation_plan(config, SeedStream.SELECTION, max_test_samples)


def replay_source_phases(path: Path, plan: EpisodePlan, train_dirs: Sequence[Path], seeds: int) -> list[Phase]:
    """Each run's final policy on the first `seeds` episodes of `plan` (the selection stream), in
    `path`/run-<r>/: the episodes its open-loop replay is read from, none of them an evaluation episode."""
    return [Phase(f"replay source of run {r}", path / f"run-{r}", plan, [f"ppo:{checkpoints_dir(d) / 'final.pt'}"],
                  [RunLabels(r).final], seeds) for r, d in enumerate(train_dirs)]


def training_cost(train_dir: Path, twin_episode: Cost, *, group_size: int, reward_family: RewardFamily) -> Cost:
    """What training run `train_dir` cost: its episodes plus the static twin each group of `group_size` envs trained
    beside them (where `reward_family`'s reward compares with one), each costing `twin_episode`."""
    episodes = read_rows(train_dir / EpisodeResult.FILE, EpisodeResult)
    twins = len(episodes) // group_size if needs_twin(reward_family) else 0
    return episodes_cost(episodes, twins, twin_episode)


def study_controllers(baselines: Sequence[str], train_dirs: Sequence[Path], replay_dirs: Sequence[Path],
                      chosen: dict[str, str] | None = None, extra: Sequence[str] = ()) -> tuple[list[str], list[str]]:
    """(specs, labels): the baselines, the chosen best-fixed and best-rule specs (label → spec), each training run's
    policy before and after training and its replay, and any extra specs."""
    picked = chosen or {}
    specs, labels = [*baselines, *picked.values()], [*baselines, *picked]
    for r, (train_dir, replay_dir) in enumerate(zip(train_dirs, replay_dirs, strict=True)):
        checkpoints, names = checkpoints_dir(train_dir), RunLabels(r)
        specs += [f"ppo:{checkpoints / 'init.pt'}", f"ppo:{checkpoints / 'final.pt'}", f"replay:{replay_dir}"]
        labels += [names.init, names.final, names.replay]
    return [*specs, *extra], [*labels, *extra]


def run_evaluation(plan: EpisodePlan, specs: Sequence[str], labels: Sequence[str], episodes: int, cache: DataCache,
                   *, run_dir: RunDirectory, sink: TelemetrySink | None = None, tie_threshold: float,
                   resume: ResumePoint | None = None, match: Sequence[str] | None = None) -> ComparisonResult:
    parsed = parse_controllers(specs)
    check_controllers(parsed, plan)
    return run_comparison(parsed, plan, episodes, cache, sink=sink, run_dir=run_dir,
                          labels=list(labels), resume=resume, match=match, tie_threshold=tie_threshold)


TUNED_HEURISTIC = f"heuristic:{TUNED}"
REFERENCES = ("static", "static:matched", "static:2", BEST_FIXED, BEST_RULE, "heuristic", TUNED_HEURISTIC)
"""The controllers without training runs that a trained policy must beat, in the order the summary shows them."""
AGGREGATE_PAIRS = (*((FINAL, ref) for ref in (*REFERENCES, INIT, REPLAY_ROLE)),
                   (REPLAY_ROLE, "static"), (REPLAY_ROLE, BEST_FIXED), (REPLAY_ROLE, BEST_RULE), (INIT, "static"))
"""(X, Y) rows of the aggregate table: the final policy against everything, its replay and its init against the
baselines."""


def references(teacher: str | None) -> tuple[str, ...]:
    """The references a final policy is measured against: `REFERENCES`, its teacher (when it is none of them), its
    init and its replay."""
    extra = () if teacher is None or teacher in REFERENCES else (teacher,)
    return (*REFERENCES, *extra, INIT, REPLAY_ROLE)


@dataclass
class StudyResults:
    """Everything `summary.md` and results.json report beyond the comparison itself."""

    runs: int
    regime: dict[str, Any]
    per_run: list[Any]
    aggregate: list[Any]
    frontier: dict[str, Any]
    cost_to_obtain: dict[str, Cost | None]
    teacher: str | None = None
    objective: dict[str, Any] | None = None
    teacher_overrides: list[float | None] | None = None
    off_teacher: list[dict[str, Any] | None] | None = None  # each run's `OffTeacherEffect` in training
    copies: dict[str, str] | None = None  # controllers whose episodes are another's, copied rather than run

    def to_dict(self) -> dict[str, Any]:
        return {"runs": self.runs, "regime": self.regime, "per_run": self.per_run, "aggregate": self.aggregate,
                "frontier": self.frontier, "cost_to_obtain": self.cost_to_obtain, "teacher": self.teacher,
                "objective": self.objective, "teacher_overrides": self.teacher_overrides,
                "off_teacher": self.off_teacher, "copies": self.copies}


@dataclass(frozen=True)
class StudyObjective:
    """What the policies were trained on: their reward's charge and its λ (pp per 100 % added)."""

    charge: str
    cost: float


def teacher_overrides(steps: Path, runs: int) -> list[float | None] | None:
    """Each run's share of its final policy's evaluation decisions (`steps`: the evaluation's steps.jsonl) that are
    not its teacher's choice: how far the greedy policy left the teacher it started as, measured on the decisions
    themselves rather than inferred from a Δ of 0. None when the policies decided without a teacher, and for a run
    whose policy did (a study of given runs may mix residual and from-scratch policies)."""
    decided: dict[str, dict[tuple[int, int], bool]] = {RunLabels(r).final: {} for r in range(runs)}
    for row in read_rows(steps, StepRow):
        if row.controller in decided and (AS_TEACHER in row.reason or OVERRIDES_TEACHER in row.reason):
            decided[row.controller][(row.episode, row.epoch)] = OVERRIDES_TEACHER in row.reason  # a rerun replaces
    if not any(decided.values()):
        return None
    return [sum(d.values()) / len(d) if d else None for d in decided.values()]


def study_results(result: ComparisonResult, runs: int, *, chosen: dict[str, str], selection: Cost | None,
                  training: Sequence[Cost], replay_sources: Sequence[Cost], teacher: str | None = None,
                  objective: StudyObjective | None = None, extra_costs: Mapping[str, Cost] | None = None,
                  teacher_cost: Cost = NO_COST, overrides: list[float | None] | None = None,
                  off_teacher: Sequence[OffTeacherEffect | None] = ()) -> StudyResults:
    """The regime (convergence, headroom), each run's final policy against the references (its `teacher`'s label
    among them), the aggregates over runs, every controller's gap to the static frontier at equal compute and
    parameters, the cost to obtain each (`extra_costs`: of references obtained outside selection, e.g. the tuned
    heuristic; `teacher_cost`: what choosing the policies' teacher cost), and the same per-run and aggregate tables on
    the `objective` the policies were trained on; `overrides`: each run's `teacher_overrides`; `off_teacher`: what
    each run's exploration off its teacher returned in training (`off_teacher_effect`)."""
    labels = [RunLabels(r) for r in range(runs)]
    room = headroom(result)
    regime = {"convergence": convergence(result.episodes) if "static" in result.controllers else None,
              "headroom": room, "has_headroom": has_headroom(room)}
    refs = references(teacher)
    pairs = [*AGGREGATE_PAIRS, *((FINAL, r) for r in refs if r not in (*REFERENCES, INIT, REPLAY_ROLE))]
    costs = costs_to_obtain(result.controllers, labels, selection, training, replay_sources, chosen, teacher_cost)
    costs.update({k: v for k, v in (extra_costs or {}).items() if k in costs})
    trained_on = None
    if objective is not None and "static" in result.controllers:
        scorer = objective_scorer(result, objective.charge, objective.cost)
        trained_on = {"charge": objective.charge, "cost": objective.cost,
                      "per_run": [_objective_row(row) for row in run_rows(result, labels, refs, scorer)],
                      "aggregate": list(aggregate_table(result, labels, pairs, scorer))}
    return StudyResults(
        runs=runs, regime=regime,
        per_run=list(run_rows(result, labels, refs)),
        aggregate=list(aggregate_table(result, labels, pairs)),
        frontier={axis: frontier_gaps(result, axis) for axis in ("gflops", "params")},
        cost_to_obtain=costs, teacher=teacher, objective=trained_on, teacher_overrides=overrides,
        off_teacher=([None if e is None else e.to_dict() for e in off_teacher]
                     if any(e is not None for e in off_teacher) else None))


def _objective_row(row: RunRow) -> dict[str, Any]:
    """A per-run row scored on the objective: its mean is the final policy's objective, not its test accuracy."""
    out: dict[str, Any] = {k: v for k, v in row.items() if k != "final_test_accuracy"}
    out["final_objective"] = row["final_test_accuracy"]
    return out
