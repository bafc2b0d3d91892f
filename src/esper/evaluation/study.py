"""`esper study`: train a PPO controller, then compare it on held-out paired seeds with everything it must beat.

The comparison answers the two questions a user asks of a learned growth controller: did it *learn* (its final
policy against its own initial policy, same seeds), and does growth *help* (against the static host, the
parameter-matched wider static host, the heuristic and random growth). The study directory holds the PPO run
(`train/`), the comparison (`eval/`), `results.json` and `summary.md`.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from esper.datagen.configs import POLICY_PRESETS
from esper.evaluation.comparison import ComparisonResult, check_controllers, parse_controllers, run_comparison
from esper.evaluation.episodes import EpisodePlan
from esper.evaluation.resume import ResumePoint
from esper.leyline import TelemetrySink
from esper.leyline.seeding import SeedStream
from esper.runtime.devices import resolve_devices
from esper.runtime.rundir import RunDirectory, checkpoints_dir, write_text_atomic
from esper.runtime.tasks import DataCache, get_task_spec
from esper.simic.ppo.config import TrainingConfig
from esper.tamiyo import FIXED, GROW, fixed_variants, module_extensions
from esper.tamiyo.fixed import parse_fixed_modules

__all__ = ["BEST_FIXED", "BEST_RULE", "STUDY_PRESETS", "StudyPreset",
           "choose_best", "chosen_blueprints", "evaluation_plan", "greedy_extensions", "rule_candidates",
           "selection_candidates", "selection_markdown", "study_controllers", "summary_markdown", "write_study"]

INIT, FINAL = "ppo (init)", "ppo (final)"
BEST_FIXED, BEST_RULE = "best-fixed", "best-rule"


@dataclass(frozen=True)
class StudyPreset:
    """A training preset, the baselines its controller is compared with, how many paired evaluation seeds, and how
    many selection seeds choose best-fixed and best-rule (0: no selection)."""

    training: str
    baselines: tuple[str, ...]
    seeds: int
    selection_seeds: int = 0


_BASELINES = ("static", "static:matched", "heuristic", "random")
STUDY_PRESETS: dict[str, StudyPreset] = {
    "quick": StudyPreset("quick", ("static", "heuristic"), 3),
    "synthetic": StudyPreset("synthetic", _BASELINES, 20, selection_seeds=5),
    "fashion_mnist": StudyPreset("fashion_mnist", _BASELINES, 20, selection_seeds=5),
}


def evaluation_plan(config: TrainingConfig, stream: SeedStream = SeedStream.EVALUATION,
                    max_test_samples: int | None = None, *, allow_setting_change: bool = False) -> EpisodePlan:
    """Paired episodes in the training setting (task, slots, episode length, caps and reward) on the seeds of
    `stream`: the held-out evaluation stream, or the selection stream where best-fixed and best-rule are chosen (so
    the variant that is reported was not chosen on the episodes it is reported on). Neither shares a seed with
    training."""
    task = get_task_spec(config.task)
    return EpisodePlan(
        task=task, slots=tuple(config.slots), max_epochs=config.max_epochs, max_seeds=config.max_seeds,
        seed=config.seed, devices=resolve_devices(config.device, config.devices), batch_size=config.batch_size,
        max_train_samples=config.max_train_samples, max_val_samples=config.max_val_samples,
        max_test_samples=max_test_samples, amp=config.amp, reward_family=config.reward_family.value,
        param_cost=config.charged_param_cost(), gamma=config.gamma, stream=stream,
        workers=config.worker_options(), allow_setting_change=allow_setting_change,
    )


def rule_candidates(topology: str, slots: Sequence[str]) -> list[str]:
    """The scripted rules best-rule's first selection round tries: every behaviour preset (random is a baseline of
    its own, not a rule) and every single-module `grow:` rule, which gives the module of each `fixed:` variant the
    earliest lifecycle a controller can."""
    return [*(f"behavior:{preset}" for preset in POLICY_PRESETS if preset != "random"),
            *fixed_variants(topology, tuple(slots), kind=GROW)]


def selection_candidates(topology: str, slots: Sequence[str]) -> tuple[list[str], list[str]]:
    """(fixed variants, rules) of the first selection round: every single-module `fixed:` variant of the topology's
    slots, and every rule."""
    return fixed_variants(topology, tuple(slots)), rule_candidates(topology, slots)


def choose_best(means: Mapping[str, float], candidates: Sequence[str]) -> str:
    """The candidate with the best mean final validation accuracy on the selection seeds (the first on a tie).
    Validation, never test: the choice must not peek at the numbers it will be reported with."""
    return max(candidates, key=lambda c: means[c])


def greedy_extensions(means: Mapping[str, float], family: Sequence[str], latest: Sequence[str], topology: str,
                      slots: Sequence[str], max_modules: int) -> list[str]:
    """The next selection round's candidates of one family (the fixed variants, or the rules) evaluated so far: its
    best `fixed:` or `grow:` spec with one module more, while the round that found it (`latest`) improved on the
    family and the spec has fewer than `max_modules` modules (the seed budget a controller grows within).

    A single module is not the best fixed architecture when modules in different slots add up, and a study that
    stopped at one would credit growth with beating a baseline it could have built; a greedy search adds one module
    at a time, at the cost of one round of (blueprints × free slots) candidates per module."""
    best = choose_best(means, family)
    kind, _, argument = best.partition(":")
    if best not in latest or kind not in (FIXED, GROW):
        return []
    if len(parse_fixed_modules(argument, topology, slots, kind)) >= max_modules:
        return []
    return module_extensions(best, topology, slots)


def chosen_blueprints(best_fixed: str) -> list[str]:
    """The blueprints of a chosen `fixed:` variant, for a policy that may only germinate what selection found best:
    selection then answers *what* to build and the policy learns *when* and *where*."""
    _, _, modules = best_fixed.partition(":")
    return sorted({item.partition("@")[0] for item in modules.split(",")})


def study_controllers(baselines: Sequence[str], train_dir: Path, chosen: dict[str, str] | None = None,
                      extra: Sequence[str] = ()) -> tuple[list[str], list[str]]:
    """(specs, labels): the baselines, the chosen best-fixed and best-rule specs (label → spec), the PPO policy
    before and after training, and any extra specs."""
    checkpoints = checkpoints_dir(train_dir)
    picked = chosen or {}
    specs = [*baselines, *picked.values(), f"ppo:{checkpoints / 'init.pt'}", f"ppo:{checkpoints / 'final.pt'}",
             *extra]
    labels = [*baselines, *picked, INIT, FINAL, *extra]
    return specs, labels


def run_evaluation(plan: EpisodePlan, specs: Sequence[str], labels: Sequence[str], episodes: int, cache: DataCache,
                   *, run_dir: RunDirectory, sink: TelemetrySink | None = None, tie_threshold: float,
                   resume: ResumePoint | None = None,
                   match: str | None = None) -> ComparisonResult:
    parsed = parse_controllers(specs)
    check_controllers(parsed, plan)
    return run_comparison(parsed, plan, episodes, cache, sink=sink, run_dir=run_dir,
                          labels=list(labels), resume=resume, match=match, tie_threshold=tie_threshold)


REFERENCES = ("static", "static:matched", BEST_FIXED, BEST_RULE, "heuristic", INIT)
"""The controllers a trained policy must beat, in the order the summary shows its paired Δ against them."""


def _delta(p: dict[str, Any] | None) -> str:
    if p is None:
        return "—"
    low, high = p["ci95"]
    return f"{p['mean_delta']:+.2f} [{low:+.2f}, {high:+.2f}] {p['wins']}/{p['losses']}/{p['ties']}"


def _accuracy(stats: dict[str, Any] | None) -> str:
    return "—" if stats is None else f"{stats['mean']:.2f}"


def summary_markdown(result: ComparisonResult, *, title: str, command: str, chosen: dict[str, str] | None = None,
                     policy_blueprints: Sequence[str] | None = None) -> str:
    """The study table: test and validation accuracy, parameters and training cost per controller, then each
    controller's paired test Δ (with its 95 % interval and wins/losses/ties) against every reference present, and
    the validation Δ beside it. `policy_blueprints`: the blueprints the trained policy was restricted to, if any."""
    chosen = chosen or {}
    references = [ref for ref in REFERENCES if ref in result.controllers]
    epochs = statistics.fmean(len(e.accuracy_curve) for e in result.episodes)
    seeds = result.per_controller[result.controllers[0]]["episodes"]
    first_pair = next((p for row in result.pairwise.values() for p in row.values()), None)
    metric = "test" if first_pair is None or first_pair.get("metric") == "test_accuracy" else "validation"
    lines = [f"# {title}", "",
             f"{epochs:.0f}-epoch episodes on {seeds} paired evaluation seeds. Accuracies are final-model means (%); "
             f"Δ is the mean paired difference in final {metric} accuracy (pp) with its 95 % interval and wins/losses/"
             f"ties (a tie: |Δ| below one test sample, {result.tie_threshold:.3f} pp); the validation Δ follows in "
             f"its own table. Cost: training FLOPs (host, seeds, validation, probes) and wall seconds per episode.",
             ""]
    names = {label: f"{label} ({chosen[label]})" if label in chosen else label for label in result.controllers}
    lines += ["| controller | test acc | val acc | params | GFLOPs | seconds | seeds fossilized / created |",
              "|---|---|---|---|---|---|---|"]
    for label in result.controllers:
        s: dict[str, Any] = dict(result.per_controller[label])
        lines.append(f"| {names[label]} | {_accuracy(s.get('final_test_accuracy'))} | "
                     f"{s['final_accuracy']['mean']:.2f} | {s['total_params']['mean']:,.0f} | "
                     f"{s['train_flops']['mean'] / 1e9:,.1f} | {s['wall_seconds']['mean']:.1f} | "
                     f"{s['seeds_fossilized']:.1f} / {s['seeds_created']:.1f} |")
    for heading, pick in ((f"Paired {metric} Δ", lambda p: p), ("Paired validation Δ", lambda p: p.get("val"))):
        lines += ["", f"{heading}:", "", "| controller | " + " | ".join(f"vs {ref}" for ref in references) + " |",
                  "|---|" + "---|" * len(references)]
        for label in result.controllers:
            row = result.pairwise.get(label, {})
            cells = [_delta(pick(dict(row[ref]))) if ref in row else "—" for ref in references]
            lines.append(f"| {names[label]} | " + " | ".join(cells) + " |")
    if result.matched:
        m = result.matched
        lines += ["", f"static:matched is the static host at width {m['width']:.2f} ({m['host_params']:,} parameters), "
                  f"matched to {m['matched_to']} ({m['target_params']:,.0f} mean final parameters)."]
    if chosen:
        lines += ["", "best-fixed and best-rule were chosen by mean validation accuracy on selection seeds disjoint "
                  "from the evaluation seeds, among single modules and then greedily larger combinations (see "
                  "selection/summary.md)."]
    if policy_blueprints is not None:
        lines += ["", f"The policy (init and final) may germinate only {', '.join(policy_blueprints)}; the other "
                  "controllers keep every blueprint."]
    lines += ["", "Command:", "", f"    {command}", ""]
    return "\n".join(lines)


def selection_markdown(rounds: Sequence[ComparisonResult], chosen: dict[str, str]) -> str:
    """The selection table: every candidate of every round with its mean validation accuracy on the selection
    seeds, best first."""
    stats = {c: (n, r.per_controller[c]) for n, r in enumerate(rounds, 1) for c in r.controllers}
    ranked = sorted(stats, key=lambda c: -stats[c][1]["final_accuracy"]["mean"])
    lines = ["# Selection of best-fixed and best-rule", "",
             f"Mean final validation accuracy over the selection seeds ({stats[ranked[0]][1]['episodes']}). Round 1 "
             f"tries every single module, built in (`fixed:`) and grown (`grow:`), and every behaviour preset; each "
             f"later round adds one module in a free slot to the best fixed variant and the best `grow:` rule found "
             f"in the round before, until a round finds no better one. "
             f"Chosen: " + ", ".join(f"{label} = {spec}" for label, spec in chosen.items()) + ".", "",
             "| candidate | round | val acc | ± std | params |", "|---|---|---|---|---|"]
    for c in ranked:
        n, s = stats[c]
        lines.append(f"| {c} | {n} | {s['final_accuracy']['mean']:.2f} | {s['final_accuracy']['std']:.2f} | "
                     f"{s['total_params']['mean']:,.0f} |")
    return "\n".join(lines) + "\n"


def write_study(path: Path, result: ComparisonResult, *, title: str, command: str, extra: dict[str, Any],
                chosen: dict[str, str] | None = None, policy_blueprints: Sequence[str] | None = None) -> Path:
    """results.json (the comparison plus the study's settings and choices) and summary.md in the study directory."""
    run_dir = RunDirectory(path, resume=True)
    result.write(run_dir, {"study": {**extra, "chosen": chosen or {}}})
    summary = path / "summary.md"
    write_text_atomic(summary, summary_markdown(result, title=title, command=command, chosen=chosen,
                                                policy_blueprints=policy_blueprints))
    return summary
