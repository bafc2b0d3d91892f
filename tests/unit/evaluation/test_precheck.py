"""A family's pre-check on planted accuracies: best-fixed per training type from the greedy search, every type's
best-fixed scored on every type, SBS and VBS chosen on validation and reported on test, and the verdict: a family
proceeds only where VBS − SBS averages at least 3 pp, else it is refused (and its table kept)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from esper.evaluation import precheck
from esper.evaluation.phases import Phase, PhaseRunner
from esper.evaluation.precheck import PRECHECK_FILE, run_precheck, type_scores
from esper.evaluation.results import ComparisonResult
from esper.simic.ppo.config import TrainingConfig
from unit.evaluation.family_probe import CONFIG, FAMILY, Accuracy, episode


def _runner(accuracy: Accuracy, ran: list[tuple[str, list[str]]]) -> Callable[[TrainingConfig], PhaseRunner]:
    def runner(config: TrainingConfig) -> PhaseRunner:
        itype = config.episode.task.rsplit("/", 1)[1]
        assert config.episode.max_train_samples == FAMILY.type(itype).max_train_samples
        assert config.reward.param_cost is None

        def run(phase: Phase) -> ComparisonResult:
            assert phase.plan.task.name == config.episode.task and phase.plan.stream.value == "selection"
            ran.append((itype, phase.specs))
            episodes = [episode(c, s, accuracy(itype, c)) for c in phase.specs for s in range(phase.seeds)]
            return ComparisonResult.from_episodes(phase.labels, episodes, tie_threshold=0.01, seed=0)

        return run

    return runner


def _specialists(itype: str, spec: str) -> float:
    """norm@early is best on a, conv_light@late on b; everything else much worse; the static host worse still."""
    best = {"a": "fixed:norm@early", "b": "fixed:conv_light@late"}[itype]
    return 80.0 if spec == best else 50.0 if spec == "static" else 60.0


def _generalist(itype: str, spec: str) -> float:
    return 70.0 if spec == "fixed:norm@early" else 69.0 if spec == "fixed:conv_light@late" and itype == "b" else 60.0


def test_types_that_want_different_architectures_pass(tmp_path: Path) -> None:
    ran: list[tuple[str, list[str]]] = []
    check = run_precheck(FAMILY, CONFIG, tmp_path, 2, _runner(_specialists, ran))
    assert check.best_fixed == {"a": "fixed:norm@early", "b": "fixed:conv_light@late"}
    assert check.vbs == check.best_fixed and check.sbs in check.best_fixed.values()
    assert {t for t, _ in ran} == {"a", "b"}  # the held-out type is never searched
    assert all(c == "static" or c.startswith("fixed:") for _, specs in ran for c in specs)  # no rules
    # both specialists score 70 on average (a tie: the first) and each type gains 20 pp from its own (test split)
    assert check.gap("a") + check.gap("b") == pytest.approx(20.0)
    assert check.test["a"][check.vbs["a"]] == pytest.approx(79.0)  # reported on test, chosen on validation
    assert check.mean_gap == pytest.approx(10.0) and check.passed
    recorded = json.loads((tmp_path / PRECHECK_FILE).read_text())
    assert recorded["passed"] and recorded["sbs"] == check.sbs
    assert (tmp_path / "a" / "selection" / "summary.md").is_file()
    table = (tmp_path / "summary.md").read_text()
    assert f"SBS = `{check.sbs}`" in table and "| a | fixed:norm@early | 79.00 |" in table and "proceed" in table
    # the matrix: each specialist on both types, and the static host, with their means
    assert "| candidate | a | b | mean |" in table and "| fixed:norm@early | 79.00 | 59.00 | 69.00 |" in table
    assert "| fixed:conv_light@late | 59.00 | 79.00 | 69.00 |" in table
    assert "| static | 49.00 | 49.00 | 49.00 |" in table


def test_one_architecture_for_all_types_is_refused(tmp_path: Path) -> None:
    ran: list[tuple[str, list[str]]] = []
    check = run_precheck(FAMILY, CONFIG, tmp_path, 1, _runner(_generalist, ran))
    assert check.sbs == "fixed:norm@early" and check.vbs == {"a": "fixed:norm@early", "b": "fixed:norm@early"}
    assert check.mean_gap == 0.0 and not check.passed
    assert not json.loads((tmp_path / PRECHECK_FILE).read_text())["passed"]
    assert "refused" in (tmp_path / "summary.md").read_text()
    # each type's portfolio round scores the static host and the other types' best-fixed not searched there
    portfolio = {t: specs for t, specs in ran if "static" in specs}
    assert portfolio == {"a": ["static"], "b": ["static"]}


def test_the_threshold_decides(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(precheck, "GAP_THRESHOLD_PP", 10.5)
    assert not run_precheck(FAMILY, CONFIG, tmp_path, 1, _runner(_specialists, [])).passed
    monkeypatch.setattr(precheck, "GAP_THRESHOLD_PP", 10.0)
    assert run_precheck(FAMILY, CONFIG, tmp_path, 1, _runner(_specialists, [])).passed


def test_against_the_frontier_the_static_host_scores_zero_and_others_their_gap() -> None:
    widths = {"static:0.5": (0.5, 70.0), "static": (1.0, 75.0), "static:1.5": (2.0, 77.0), "static:2": (3.0, 78.0)}
    episodes = [episode(c, s, acc, gflops) for c, (gflops, acc) in widths.items() for s in range(2)]
    episodes += [episode("fixed:norm@early", s, 80.0, 1.5) for s in range(2)]  # the frontier there: 76
    result = ComparisonResult.from_episodes([*widths, "fixed:norm@early"], episodes, tie_threshold=0.01, seed=0)
    assert type_scores(result, "frontier_gflops", "val") == pytest.approx({"static": 0.0, "fixed:norm@early": 4.0})
    assert type_scores(result, "frontier_gflops", "test") == pytest.approx({"static": 0.0, "fixed:norm@early": 4.0})
    assert type_scores(result, "test_accuracy", "test")["fixed:norm@early"] == pytest.approx(79.0)
