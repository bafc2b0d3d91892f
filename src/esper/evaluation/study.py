"""`esper study`: train a PPO controller, then compare it on held-out paired seeds with everything it must beat.

The comparison answers the two questions a user asks of a learned growth controller: did it *learn* (its final
policy against its own initial policy, same seeds), and does growth *help* (against the static host, the
parameter-matched wider static host, the heuristic and random growth). The study directory holds the PPO run
(`train/`), the comparison (`eval/`), `results.json` and `summary.md`.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from esper.env import EnvStep
from esper.evaluation.comparison import ComparisonResult, check_controllers, parse_controllers, run_comparison
from esper.evaluation.episodes import EpisodePlan
from esper.evaluation.resume import ResumePoint
from esper.leyline import TelemetrySink
from esper.runtime.devices import resolve_devices
from esper.runtime.rundir import RunDirectory, write_text_atomic
from esper.runtime.tasks import DataCache, get_task_spec
from esper.simic.ppo.config import TrainingConfig

__all__ = ["EVAL_SEED_OFFSET", "STUDY_PRESETS", "StudyPreset", "evaluation_plan", "study_controllers",
           "summary_markdown", "write_study"]

EVAL_SEED_OFFSET = 1_000_000
"""Held-out evaluation seeds start here (training seeds are seed + 10000·batch + 1000·group, far below)."""

INIT, FINAL = "ppo (init)", "ppo (final)"


@dataclass(frozen=True)
class StudyPreset:
    """A training preset, the baselines its controller is compared with, and how many paired seeds."""

    training: str
    baselines: tuple[str, ...]
    seeds: int


STUDY_PRESETS: dict[str, StudyPreset] = {
    "quick": StudyPreset("quick", ("static", "heuristic"), 3),
    "synthetic": StudyPreset("synthetic", ("static", "static:matched", "heuristic", "random"), 10),
    "fashion_mnist": StudyPreset("fashion_mnist", ("static", "static:matched", "heuristic", "random"), 10),
}


def evaluation_plan(config: TrainingConfig, seeds_base: int | None = None) -> EpisodePlan:
    """Paired held-out episodes in the training setting: same task, slots, episode length, caps and reward."""
    task = get_task_spec(config.task)
    return EpisodePlan(
        task=task, slots=tuple(config.slots), max_epochs=config.max_epochs, max_seeds=config.max_seeds,
        seed=config.seed, devices=resolve_devices(config.device, config.devices), batch_size=config.batch_size,
        max_train_samples=config.max_train_samples, max_val_samples=config.max_val_samples, amp=config.amp,
        reward_family=config.reward_family.value, param_cost=config.param_cost, gamma=config.gamma,
        first_episode=EVAL_SEED_OFFSET if seeds_base is None else seeds_base,
    )


def study_controllers(baselines: Sequence[str], train_dir: Path, extra: Sequence[str] = ()
                      ) -> tuple[list[str], list[str]]:
    """(specs, labels): the baselines, the PPO policy before and after training, and any extra specs."""
    checkpoints = train_dir / "checkpoints"
    specs = [*baselines, f"ppo:{checkpoints / 'init.pt'}", f"ppo:{checkpoints / 'final.pt'}", *extra]
    labels = [*baselines, INIT, FINAL, *extra]
    return specs, labels


def run_evaluation(plan: EpisodePlan, specs: Sequence[str], labels: Sequence[str], episodes: int, cache: DataCache,
                   *, run_dir: RunDirectory, sink: TelemetrySink | None = None,
                   on_step: Callable[[list[EnvStep]], None] | None = None, resume: ResumePoint | None = None
                   ) -> ComparisonResult:
    parsed = parse_controllers(specs)
    check_controllers(parsed, plan)
    return run_comparison(parsed, plan, episodes, cache, sink=sink, run_dir=run_dir, on_step=on_step,
                          labels=list(labels), resume=resume)


REFERENCES = ("static", "static:matched", "heuristic", INIT)
"""The controllers a trained policy must beat, in the order the summary shows its paired Δ against them."""


def _row(result: ComparisonResult, label: str, references: Sequence[str]) -> dict[str, Any]:
    s = result.per_controller[label]
    row: dict[str, Any] = {"controller": label, "final_accuracy": s["final_accuracy"]["mean"],
                           "total_params": s["total_params"]["mean"], "seeds_fossilized": s["seeds_fossilized"],
                           "seeds_created": s["seeds_created"]}
    for ref in references:
        if label != ref and ref in result.pairwise.get(label, {}):
            row[f"vs {ref}"] = result.pairwise[label][ref]
    return row


def summary_markdown(result: ComparisonResult, *, title: str, command: str) -> str:
    """The study table: final accuracy, parameters, and each controller's paired Δ (95 % bootstrap CI) against every
    reference present: static, the parameter-matched static host, the heuristic and the untrained policy."""
    def delta(p: dict[str, Any] | None) -> str:
        if p is None:
            return "—"
        low, high = p["ci95"]
        return f"{p['mean_delta']:+.2f} [{low:+.2f}, {high:+.2f}] {p['wins']}/{p['losses']}/{p['ties']}"

    references = [ref for ref in REFERENCES if ref in result.controllers]
    epochs = statistics.fmean(len(e.accuracy_curve) for e in result.episodes)
    seeds = result.per_controller[result.controllers[0]]["episodes"]
    lines = [f"# {title}", "", f"{epochs:.0f}-epoch episodes, {seeds} paired held-out seeds; Δ is the mean paired "
             f"difference in final validation accuracy (pp) with its 95 % paired-bootstrap CI and wins/losses/ties "
             f"(|Δ| ≤ {result.tie_threshold} pp is a tie).", "",
             "| controller | final acc % | params | seeds fossilized / created | "
             + " | ".join(f"Δ vs {ref}" for ref in references) + " |",
             "|---|---|---|---|" + "---|" * len(references)]
    for label in result.controllers:
        r = _row(result, label, references)
        lines.append(f"| {label} | {r['final_accuracy']:.2f} | {r['total_params']:,.0f} | "
                     f"{r['seeds_fossilized']:.1f} / {r['seeds_created']:.1f} | "
                     + " | ".join(delta(r.get(f"vs {ref}")) for ref in references) + " |")
    if result.matched:
        m = result.matched
        lines += ["", f"static:matched is the static host at width {m['width']:.2f} ({m['host_params']:,} parameters), "
                  f"matched to {m['matched_to']} ({m['target_params']:,.0f} mean final parameters)."]
    lines += ["", "Command:", "", f"    {command}", ""]
    return "\n".join(lines)


def write_study(path: Path, result: ComparisonResult, *, title: str, command: str, extra: dict[str, Any]) -> Path:
    """results.json (the comparison plus the study's settings) and summary.md in the study directory."""
    run_dir = RunDirectory(path, resume=True)
    run_dir.write_json("results.json", {**result.to_dict(), "study": extra})
    summary = path / "summary.md"
    write_text_atomic(summary, summary_markdown(result, title=title, command=command))
    return summary
