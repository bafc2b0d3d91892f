"""Choosing best-fixed and best-rule: the baselines a growth controller must beat, searched greedily on selection seeds.

Round 1 runs every single-module `fixed:` host (each blueprint × slot), every behaviour preset and every single-module
`grow:` rule. Each later round adds one module, in each free slot, to the best `fixed:` spec and the best `grow:` spec
so far, while the round before found a better one and the seed budget allows another module. The choice is by mean
final **validation** accuracy on the selection seeds, which neither training nor evaluation ever draws, so the
variant reported was not chosen on the episodes it is reported on.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from esper.datagen.configs import POLICY_PRESETS
from esper.evaluation.episodes import EpisodePlan
from esper.evaluation.phases import Phase, PhaseRunner
from esper.evaluation.results import ComparisonResult
from esper.evaluation.runs import Cost, episodes_cost
from esper.leyline import ActionSpace
from esper.storage.rundir import write_text_atomic
from esper.tamiyo import FIXED, GROW, fixed_variants, module_extensions
from esper.tamiyo.fixed import parse_fixed_modules

__all__ = ["BEST_FIXED", "BEST_RULE", "Selection", "choose_best", "chosen_blueprints", "greedy_extensions",
           "greedy_selection", "rule_candidates", "run_selection", "search_cost", "selection_candidates",
           "selection_markdown"]

SUMMARY = "summary.md"

BEST_FIXED, BEST_RULE = "best-fixed", "best-rule"


def rule_candidates(space: ActionSpace, slots: Sequence[str]) -> list[str]:
    """The scripted rules best-rule's first selection round tries: every behaviour preset (random is a baseline of
    its own, not a rule) and every single-module `grow:` rule, which gives the module of each `fixed:` variant the
    earliest lifecycle a controller can."""
    return [*(f"behavior:{preset}" for preset in POLICY_PRESETS if preset != "random"),
            *fixed_variants(space, tuple(slots), kind=GROW)]


def selection_candidates(space: ActionSpace, slots: Sequence[str]) -> tuple[list[str], list[str]]:
    """(fixed variants, rules) of the first selection round: every single-module `fixed:` variant of the space's
    slots, and every rule."""
    return fixed_variants(space, tuple(slots)), rule_candidates(space, slots)


def choose_best(means: Mapping[str, float], candidates: Sequence[str]) -> str:
    """The candidate with the best mean final validation accuracy on the selection seeds (the first on a tie).
    Validation, never test: the choice must not peek at the numbers it will be reported with."""
    return max(candidates, key=lambda c: means[c])


def greedy_extensions(means: Mapping[str, float], family: Sequence[str], latest: Sequence[str], space: ActionSpace,
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
    if len(parse_fixed_modules(argument, space, slots, kind)) >= max_modules:
        return []
    return module_extensions(best, space, slots)


def chosen_blueprints(best_fixed: str) -> list[str]:
    """The blueprints of a chosen `fixed:` variant, for a policy that may only germinate what selection found best:
    selection then answers *what* to build and the policy learns *when* and *where*."""
    _, _, modules = best_fixed.partition(":")
    return sorted({item.partition("@")[0] for item in modules.split(",")})


@dataclass(frozen=True)
class Selection:
    """Every round's comparison and the chosen specs (label → spec)."""

    rounds: list[ComparisonResult]
    chosen: dict[str, str]


def search_cost(selection: Selection, kind: str) -> Cost:
    """What the search for `kind` (best-fixed or best-rule) cost on its own: the episodes of its family's candidates
    over every round. best-rule's is the budget that tunes the heuristic at equal cost (`tuning.tune_heuristic`)."""
    prefixes = (f"{FIXED}:",) if kind == BEST_FIXED else ("behavior:", f"{GROW}:")
    return episodes_cost(e for r in selection.rounds for e in r.episodes if e.controller.startswith(prefixes))


RunRound = Callable[[int, list[str]], ComparisonResult]
"""Runs (or continues) selection round n on the given candidates and returns its comparison."""


BOTH = (BEST_FIXED, BEST_RULE)


def greedy_selection(space: ActionSpace, slots: Sequence[str], max_modules: int, run_round: RunRound, *,
                     kinds: Sequence[str] = BOTH) -> Selection:
    """The greedy rounds (see the module docstring), each run by `run_round`, and the chosen `kinds` (best-fixed,
    best-rule or both; the candidates of a kind not asked for are not run)."""
    fixed, rules = selection_candidates(space, slots)
    fixed, rules = (fixed if BEST_FIXED in kinds else []), (rules if BEST_RULE in kinds else [])
    candidates = [*fixed, *rules]
    rounds: list[ComparisonResult] = []
    means: dict[str, float] = {}
    while candidates:
        rounds.append(run_round(len(rounds) + 1, candidates))
        means.update({c: rounds[-1].per_controller[c]["final_accuracy"]["mean"] for c in candidates})
        more_fixed, more_rules = (greedy_extensions(means, family, candidates, space, slots, max_modules)
                                  if family else [] for family in (fixed, rules))
        fixed, rules, candidates = [*fixed, *more_fixed], [*rules, *more_rules], [*more_fixed, *more_rules]
    chosen = {label: choose_best(means, family) for label, family in ((BEST_FIXED, fixed), (BEST_RULE, rules))
              if family}
    return Selection(rounds, chosen)


def run_selection(plan: EpisodePlan, path: Path, seeds: int, run_phase: PhaseRunner, *,
                  kinds: Sequence[str] = BOTH) -> Selection:
    """The chosen `kinds` (best-fixed, best-rule) of `plan`'s setting, chosen on `seeds` paired episodes of its
    (selection) seed stream in greedy rounds, each a phase of its own in `path`/round-N; every round's table is saved
    in `path`/summary.md."""

    def run_round(n: int, candidates: list[str]) -> ComparisonResult:
        return run_phase(Phase(f"selection round {n}", path / f"round-{n}", plan, candidates, candidates, seeds))

    slots = plan.episode.slots
    selection = greedy_selection(plan.task.action_space, slots, plan.episode.max_seeds or len(slots), run_round,
                                 kinds=kinds)
    write_text_atomic(path / SUMMARY, selection_markdown(selection.rounds, selection.chosen))
    return selection


def selection_markdown(rounds: Sequence[ComparisonResult], chosen: dict[str, str]) -> str:
    """The selection table: every candidate of every round with its mean validation accuracy on the selection
    seeds, best first."""
    stats = {c: (n, r.per_controller[c]) for n, r in enumerate(rounds, 1) for c in r.controllers}
    ranked = sorted(stats, key=lambda c: -stats[c][1]["final_accuracy"]["mean"])
    what = {BOTH: ("best-fixed and best-rule", "tries every single module, built in (`fixed:`) and grown (`grow:`), "
                                               "and every behaviour preset; each later round adds one module in a "
                                               "free slot to the best fixed variant and the best `grow:` rule found "),
            (BEST_FIXED,): ("best-fixed", "tries every single module built in (`fixed:`); each later round adds one "
                                          "module in a free slot to the best fixed variant found "),
            (BEST_RULE,): ("best-rule", "tries every single module grown (`grow:`) and every behaviour preset; each "
                                        "later round adds one module in a free slot to the best `grow:` rule found ")}
    title, rounds_text = what[tuple(chosen)]
    lines = [f"# Selection of {title}", "",
             f"Mean final validation accuracy over the selection seeds ({stats[ranked[0]][1]['episodes']}). Round 1 "
             + rounds_text + "in the round before, until a round finds no better one. "
             "Chosen: " + ", ".join(f"{label} = {spec}" for label, spec in chosen.items()) + ".", "",
             "| candidate | round | val acc | ± std | params |", "|---|---|---|---|---|"]
    for c in ranked:
        n, s = stats[c]
        lines.append(f"| {c} | {n} | {s['final_accuracy']['mean']:.2f} | {s['final_accuracy']['std']:.2f} | "
                     f"{s['total_params']['mean']:,.0f} |")
    return "\n".join(lines) + "\n"
