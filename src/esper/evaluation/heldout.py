"""A family study's references on its held-out types: what a policy trained on the training types must beat there.

Chosen on the training types only: SBS (by the pre-check) and best-rule, the scripted rule best on average over
the training types' selection seeds. Chosen on each held-out type itself, at a price: VBS, the best fixed
architecture a greedy search on that type's own selection seeds finds (its search cost is reported beside it). Each
held-out type then runs the static host at widths 0.5–2, SBS, best-rule, the heuristic and its VBS on paired
evaluation seeds that no search saw, scored by the family's score on the test split; every reference also gets the
share of the type's SBS → VBS gap it closes (`portfolio.gap_closed`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from esper.data.families import SCORES, Family
from esper.evaluation.phases import Phase
from esper.evaluation.portfolio import gap_closed, portfolio
from esper.evaluation.precheck import (
    STATIC,
    Precheck,
    Runners,
    architectures,
    type_config,
    type_scores,
    with_portfolio,
)
from esper.evaluation.regime import static_width_labels
from esper.evaluation.results import ComparisonResult
from esper.evaluation.runs import Cost, episodes_cost
from esper.evaluation.selection import BEST_FIXED, BEST_RULE, run_selection
from esper.evaluation.study import evaluation_plan, selection_plan
from esper.leyline.seeding import SeedStream
from esper.simic.ppo.config import TrainingConfig
from esper.storage.rundir import write_json_atomic, write_text_atomic

__all__ = ["HELDOUT_FILE", "SBS", "VBS", "HeldOutType", "episode_gflops", "run_heldout", "select_rule",
           "write_heldout"]

HELDOUT_FILE = "heldout.json"
SBS, VBS = "SBS", "VBS"


def select_rule(family: Family, config: TrainingConfig, path: Path, seeds: int, runner: Runners,
                max_test_samples: int | None = None) -> tuple[str, Cost]:
    """best-rule of the family: the scripted rule (behaviour preset or `grow:` rule) with the best mean validation
    accuracy over the training types, each searched greedily on its own selection seeds (`path`/TYPE/round-N), among
    the rules every type tried; and what the searches cost."""
    val: dict[str, dict[str, float]] = {}
    episodes = []
    for itype in family.training:
        type_conf = type_config(config, family, itype)
        selection = run_selection(selection_plan(type_conf, max_test_samples), path / itype.name, seeds,
                                  runner(type_conf), kinds=(BEST_RULE,))
        val[itype.name] = {c: r.per_controller[c]["final_accuracy"]["mean"] for r in selection.rounds
                           for c in r.controllers}
        episodes += [e for r in selection.rounds for e in r.episodes]
    return portfolio(val, list(val)).sbs, episodes_cost(episodes)


@dataclass
class HeldOutType:
    """One held-out type: each reference's spec (role → spec), score and training GFLOPs per episode on the
    evaluation seeds, its VBS search's cost, and each reference's share of the SBS → VBS gap closed (None where VBS
    does not beat SBS there); `result` is the references' evaluation, which a policy's episodes pair with."""

    name: str
    specs: dict[str, str]
    scores: dict[str, float]
    search_cost: Cost
    gflops: dict[str, float]
    result: ComparisonResult = field(repr=False)

    @property
    def gap(self) -> float:
        return self.scores[VBS] - self.scores[SBS]

    def closed(self, role: str) -> float | None:
        return gap_closed(self.scores[role], self.scores[SBS], self.scores[VBS])

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "specs": self.specs, "scores": self.scores, "search_cost": self.search_cost,
                "gap": self.gap, "closed": {role: self.closed(role) for role in self.scores},
                "gflops_per_episode": self.gflops}


def episode_gflops(result: ComparisonResult) -> dict[str, float]:
    """Each controller's mean training GFLOPs per episode in `result`."""
    return {c: stats["train_flops"]["mean"] / 1e9 for c, stats in result.per_controller.items()}


def _references(check: Precheck, best_rule: str, vbs: str, frontier: bool) -> dict[str, str]:
    """role → spec on a held-out type. Against the frontier the static widths are the frontier itself, not
    references with a score."""
    statics = {} if frontier else {w: w for w in static_width_labels()}
    return {**statics, SBS: check.sbs, BEST_RULE: best_rule, "heuristic": "heuristic", VBS: vbs}


def run_heldout(family: Family, config: TrainingConfig, check: Precheck, best_rule: str, path: Path, *,
                seeds: int, selection_seeds: int, runner: Runners, max_test_samples: int | None = None
                ) -> list[HeldOutType]:
    """Every held-out type's VBS search (`path`/TYPE/selection/, portfolio/) and evaluation (`path`/TYPE/eval/) on
    `seeds` paired evaluation seeds; writes heldout.json and summary.md in `path`."""
    frontier = family.score == "frontier_gflops"
    out: list[HeldOutType] = []
    for itype in family.held_out_types:
        type_conf, where = type_config(config, family, itype), path / itype.name
        run, plan = runner(type_conf), selection_plan(type_conf, max_test_samples)
        selection = run_selection(plan, where / "selection", selection_seeds, run, kinds=(BEST_FIXED,))
        searched = with_portfolio(selection, run, plan, where / "portfolio", f"portfolio on {itype.name}",
                                  [*(static_width_labels() if frontier else [STATIC]), check.sbs], selection_seeds)
        candidates = architectures(type_scores(searched, family.score, "val"))
        vbs = max(candidates, key=lambda c: candidates[c])
        roles = _references(check, best_rule, vbs, frontier)
        specs = list(dict.fromkeys([*(static_width_labels() if frontier else []), *roles.values()]))
        result = run(Phase(f"held-out evaluation on {itype.name}", where / "eval",
                           evaluation_plan(type_conf, SeedStream.EVALUATION, max_test_samples), specs, specs, seeds))
        scores, gflops = type_scores(result, family.score, "test"), episode_gflops(result)
        out.append(HeldOutType(itype.name, roles, {role: scores[spec] for role, spec in roles.items()},
                               episodes_cost(searched.episodes), {role: gflops[spec] for role, spec in roles.items()},
                               result))
    write_heldout(path, family, out)
    return out


def write_heldout(path: Path, family: Family, types: list[HeldOutType], policy: dict[str, Any] | None = None,
                  policy_markdown: str = "") -> None:
    """heldout.json and summary.md in `path`: the references on each held-out type, and what a policy trained across
    the training types did there (`policy`, once it has run)."""
    write_json_atomic(path / HELDOUT_FILE, {"family": family.key, "types": [h.to_dict() for h in types],
                                            "policy": policy})
    write_text_atomic(path / "summary.md", heldout_markdown(family, types) + policy_markdown)


def heldout_markdown(family: Family, types: list[HeldOutType]) -> str:
    """Per held-out type: every reference's score and share of the SBS → VBS gap it closes, and VBS's search cost."""
    lines = [f"# Held-out types of family {family.key}", "",
             f"Score: {SCORES[family.score]}, on paired evaluation seeds no search saw. SBS and best-rule were chosen "
             f"on the training types; VBS by a search on the held-out type's own selection seeds (its cost below).",
             ""]
    for h in types:
        cost = h.search_cost
        lines += [f"## {h.name}", "", f"VBS − SBS: {h.gap:+.2f}; VBS search: {cost['env_epochs']} env-epochs, "
                                      f"{cost['gflops']:.1f} training GFLOPs.", "",
                  "| reference | spec | score | share of the SBS → VBS gap closed | training GFLOPs per episode |",
                  "|---|---|---|---|---|"]
        for role, spec in h.specs.items():
            closed = h.closed(role)
            lines.append(f"| {role} | {spec} | {h.scores[role]:.2f} | "
                         f"{'—' if closed is None else f'{100 * closed:.0f} %'} | {h.gflops[role]:.2f} |")
        lines.append("")
    return "\n".join(lines)
