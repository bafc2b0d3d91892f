"""The references on a family's held-out types, on planted accuracies: best-rule is the rule best on average over
the training types, VBS comes from the held-out type's own search (and is never chosen on its evaluation seeds), and
each reference's share of the SBS → VBS gap is read from the evaluation episodes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from esper.evaluation.heldout import HELDOUT_FILE, SBS, VBS, run_heldout, select_rule
from esper.evaluation.phases import Phase, PhaseRunner
from esper.evaluation.precheck import Precheck
from esper.evaluation.results import ComparisonResult
from esper.simic.ppo.config import TrainingConfig
from unit.evaluation.family_probe import CONFIG, FAMILY, episode


def _runner(ran: list[Phase]) -> PhaseRunner:
    def run(phase: Phase) -> ComparisonResult:
        ran.append(phase)
        itype = phase.plan.task.name.rsplit("/", 1)[1]
        evaluation = phase.plan.stream.value == "evaluation"

        def accuracy(spec: str) -> float:
            if spec == "behavior:baseline":  # the best rule on every training type
                return 70.0
            if itype == "held" and spec == "fixed:attention@mid":  # the held-out type's own best
                return 90.0 if not evaluation else 85.0  # (its search overrates it a little)
            return {"fixed:norm@early": 75.0, "heuristic": 78.0}.get(spec, 60.0)

        episodes = [episode(c, s, accuracy(c) + 1.0) for c in phase.specs for s in range(phase.seeds)]
        return ComparisonResult.from_episodes(phase.labels, episodes, tie_threshold=0.01, seed=0)

    return run


def test_best_rule_vbs_and_the_gap_each_reference_closes(tmp_path: Path) -> None:
    ran: list[Phase] = []

    def runner(config: TrainingConfig) -> PhaseRunner:
        return _runner(ran)

    rule, cost = select_rule(FAMILY, CONFIG, tmp_path / "rules", 2, runner)
    assert rule == "behavior:baseline" and cost["env_epochs"] > 0
    assert all(c.startswith(("behavior:", "grow:")) for p in ran for c in p.specs)
    assert {p.plan.task.name.rsplit("/", 1)[1] for p in ran} == {"a", "b"}  # rules are chosen on training types
    ran.clear()
    check = Precheck(FAMILY.key, "test_accuracy", {"a": "fixed:norm@early", "b": "fixed:norm@early"},
                     "fixed:norm@early", {"a": "fixed:norm@early", "b": "fixed:norm@early"}, {}, {}, {}, threshold=3.0)
    (held,) = run_heldout(FAMILY, CONFIG, check, rule, tmp_path / "heldout", seeds=3, selection_seeds=2,
                          runner=runner)
    assert held.specs[VBS] == "fixed:attention@mid" and held.specs[SBS] == "fixed:norm@early"
    assert held.scores[VBS] == pytest.approx(85.0) and held.scores[SBS] == pytest.approx(75.0)  # test: val − 1
    assert held.closed("heuristic") == pytest.approx(0.3) and held.closed(VBS) == 1.0
    assert held.closed("best-rule") == pytest.approx(-0.5)
    evaluation = [p for p in ran if p.plan.stream.value == "evaluation"]
    assert len(evaluation) == 1 and evaluation[0].seeds == 3
    assert all(p.seeds == 2 for p in ran if p.plan.stream.value == "selection")
    assert {p.plan.task.name for p in ran} == {"family:precheck-probe-v1/held"}
    recorded = json.loads((tmp_path / "heldout" / HELDOUT_FILE).read_text())
    assert recorded[0]["closed"]["heuristic"] == pytest.approx(0.3)
    assert "| heuristic | heuristic | 78.00 | 30 % |" in (tmp_path / "heldout" / "summary.md").read_text()
