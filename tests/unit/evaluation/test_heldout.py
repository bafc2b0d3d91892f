"""The references on a family's held-out types, on planted accuracies: best-rule is the rule best on average over
the training types, VBS comes from the held-out type's own search (and is never chosen on its evaluation seeds), and
each reference's share of the SBS → VBS gap is read from the evaluation episodes; a policy's runs then run on the
references' evaluation seeds, and each run's share of the gap and its paired Δs are read against them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from esper.evaluation.family_policy import CLOSED, OBSERVES, heldout_policies, policy_markdown
from esper.evaluation.heldout import HELDOUT_FILE, SBS, VBS, run_heldout, select_rule
from esper.evaluation.phases import Phase, PhaseRunner
from esper.evaluation.precheck import Precheck
from esper.evaluation.results import ComparisonResult
from esper.evaluation.runs import FINAL, INIT, REPLAY_ROLE
from esper.simic.ppo.config import TrainingConfig
from unit.evaluation.family_probe import CONFIG, FAMILY, episode

POLICIES = {("0", "init.pt"): 70.0, ("0", "final.pt"): 80.0, ("0", "replay"): 75.0,
            ("1", "init.pt"): 70.0, ("1", "final.pt"): 85.0, ("1", "replay"): 75.0}
"""(run, checkpoint or replay) → planted test accuracy on the held-out type."""


def _runner(ran: list[Phase]) -> PhaseRunner:
    def run(phase: Phase) -> ComparisonResult:
        ran.append(phase)
        itype = phase.plan.task.name.rsplit("/", 1)[1]
        evaluation = phase.plan.stream.value == "evaluation"

        def accuracy(spec: str) -> float:
            if spec.startswith(("ppo:", "replay:")):  # run 0's policy closes half the gap, run 1's all of it
                return POLICIES[spec.split("/run-")[1][0], spec.rsplit("/", 1)[-1] if spec.startswith("ppo:")
                                else "replay"]
            if spec == "behavior:baseline":  # the best rule on every training type
                return 70.0
            if itype == "held" and spec == "fixed:attention@mid":  # the held-out type's own best
                return 90.0 if not evaluation else 85.0  # (its search overrates it a little)
            return {"fixed:norm@early": 75.0, "heuristic": 78.0}.get(spec, 60.0)

        episodes = [episode(label, s, accuracy(spec) + 1.0)
                    for spec, label in zip(phase.specs, phase.labels, strict=True) for s in range(phase.seeds)]
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
    assert recorded["types"][0]["closed"]["heuristic"] == pytest.approx(0.3) and recorded["policy"] is None
    assert "| heuristic | heuristic | 78.00 | 30 % | 1.00 |" in (tmp_path / "heldout" / "summary.md").read_text()

    # a policy trained across the training types, two runs, on the references' evaluation seeds
    ran.clear()
    runs = [tmp_path / "train" / f"run-{r}" for r in range(2)]
    policy = heldout_policies(FAMILY, CONFIG, [held], tmp_path / "heldout", train_dirs=runs,
                              replay_dirs=[tmp_path / "replay" / f"run-{r}" for r in range(2)], seeds=3,
                              runner=runner)
    (phase,) = ran
    assert phase.path == tmp_path / "heldout" / "held" / "policies" and phase.seeds == 3
    assert phase.plan.stream.value == "evaluation" and phase.plan.seed == CONFIG.seed  # the references' seeds
    assert phase.labels == ["ppo[0] (init)", "ppo[0] (final)", "replay[0]", "ppo[1] (init)", "ppo[1] (final)",
                            "replay[1]"]
    cells = {c["run"]: c for c in policy.cells}
    assert cells[0]["closed"] == pytest.approx(0.5) and cells[1]["closed"] == pytest.approx(1.0)
    assert {k: d["mean_delta"] for k, d in cells[0]["deltas"].items()} == pytest.approx(
        {SBS: 5.0, "best-rule": 10.0, INIT: 10.0, REPLAY_ROLE: 5.0})
    closed, sbs = policy.aggregate[CLOSED], policy.aggregate[SBS]
    assert closed is not None and closed["per_run"] == pytest.approx([50.0, 100.0]) and closed["better"] == 0
    assert sbs is not None and sbs["mean"] == pytest.approx(7.5) and sbs["prob_improvement"] == 1.0
    assert policy.gflops == {"held": {INIT: 1.0, FINAL: 1.0, REPLAY_ROLE: 1.0}}
    assert policy.training == [{"env_epochs": 0, "gflops": 0.0}] * 2  # nothing trained in these directories
    text = policy_markdown(FAMILY, policy)
    assert OBSERVES in text and "| 1 | held | 85.00 | 100 % | +10.00 [+10.00, +10.00] |" in text
