"""Dataset health checks on crafted good and bad datasets: error, warning and pass cases of every check."""

from __future__ import annotations

import io
import json
import math
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from esper.datagen.health import (
    DatasetHealthCheck,
    HealthCheckResult,
    check_action_coverage,
    check_action_entropy,
    check_behavior_probability_consistency,
    check_finite_values,
    check_lifecycle_coverage,
    check_mask_validity,
    check_policy_diversity,
    check_single_action_clusters,
    count_actions,
    load_episodes,
    save_report,
)
from esper.datagen.schema import write_strict_json
from unit.datagen.support import make_episode

OPS = ("WAIT", "GERMINATE", "FOSSILIZE", "CULL")


def good_dataset() -> list[dict[str, Any]]:
    """20 episodes, 10 policies, every op in every state cluster, seeds fossilized and culled."""
    rotations = [(OPS * 6)[i % 4:i % 4 + 20] for i in range(20)]  # op order shifted per episode
    return [make_episode(f"e{i}", rotations[i], policy_id=f"policy_{i % 10}", culled=i % 2) for i in range(20)]


def test_good_dataset_passes_everything() -> None:
    checker = DatasetHealthCheck()
    results = checker.run_all(good_dataset())
    assert list(results) == ["action_coverage", "action_entropy", "policy_diversity", "single_action_clusters",
                             "mask_validity", "behavior_probability_consistency", "lifecycle_coverage",
                             "finite_values"]
    assert {r.level for r in results.values()} == {"ok"}, {n: r.message for n, r in results.items()}
    assert not checker.has_blocking_errors(results)


def test_single_action_dataset_is_blocked() -> None:
    episodes = [make_episode(f"e{i}", ["WAIT"] * 100, created=0, fossilized=0) for i in range(10)]
    checker = DatasetHealthCheck()
    results = checker.run_all(episodes)
    assert checker.has_blocking_errors(results)
    errors = {n for n, r in results.items() if r.level == "error"}
    assert {"action_coverage", "action_entropy", "policy_diversity", "single_action_clusters",
            "lifecycle_coverage"} <= errors


def test_count_actions_lists_every_op() -> None:
    counts = count_actions([make_episode("e", ["WAIT", "WAIT", "CULL"])])
    assert counts == {"WAIT": 2, "GERMINATE": 0, "CULL": 1, "FOSSILIZE": 0}


def test_action_coverage_levels() -> None:
    ok = check_action_coverage({"WAIT": 800, "GERMINATE": 80, "FOSSILIZE": 70, "CULL": 50})
    assert (ok.passed, ok.level) == (True, "ok")
    warn = check_action_coverage({"WAIT": 900, "GERMINATE": 50, "FOSSILIZE": 20, "CULL": 30})
    assert (warn.passed, warn.level) == (True, "warning") and "FOSSILIZE" in warn.message
    error = check_action_coverage({"WAIT": 990, "GERMINATE": 5, "FOSSILIZE": 4, "CULL": 1})
    assert (error.passed, error.level) == (False, "error") and error.details["low"] == ["CULL", "FOSSILIZE",
                                                                                          "GERMINATE"]
    assert check_action_coverage({"WAIT": 0, "CULL": 0}).message == "No actions in the dataset"


def test_action_entropy_levels() -> None:
    uniform = check_action_entropy(dict.fromkeys(OPS, 250))
    assert uniform.level == "ok" and uniform.details["entropy"] == pytest.approx(math.log(4))
    assert uniform.details["normalized"] == pytest.approx(1.0)
    # p = (0.9, 0.1): H = 0.325 nats -> between the error (0.3) and warning (0.5) thresholds.
    warn = check_action_entropy({"WAIT": 900, "GERMINATE": 100, "FOSSILIZE": 0, "CULL": 0})
    assert (warn.passed, warn.level) == (True, "warning")
    assert warn.details["normalized"] == pytest.approx(warn.details["entropy"] / math.log(4))
    error = check_action_entropy({"WAIT": 950, "GERMINATE": 20, "FOSSILIZE": 20, "CULL": 10})  # H = 0.251 nats
    assert (error.passed, error.level) == (False, "error")
    assert error.details["entropy"] == pytest.approx(0.2513, abs=1e-4)


def test_policy_diversity_levels() -> None:
    def episodes(ids: list[str]) -> list[dict[str, Any]]:
        return [{"behavior_policy": {"policy_id": i}} for i in ids]

    assert check_policy_diversity(episodes([f"p{i}" for i in range(8)])).level == "ok"
    warn = check_policy_diversity(episodes(["a", "b", "c", "d", "a-eps0.1"]))  # ε variants count separately
    assert (warn.passed, warn.level, warn.details["num_policies"]) == (True, "warning", 5)
    error = check_policy_diversity(episodes(["baseline", "baseline", "aggressive"]))
    assert (error.passed, error.level) == (False, "error")


def test_single_action_clusters() -> None:
    assert check_single_action_clusters(good_dataset()).level == "ok"
    # The op is a function of the state cluster (plateau = t % 4 picks the op): no alternatives anywhere.
    determined = [make_episode(f"e{i}", OPS * 5) for i in range(3)]
    error = check_single_action_clusters(determined)
    assert (error.passed, error.level, error.details["share"]) == (False, "error", 1.0)
    # 17 clusters (epochs 1..20); another op in the plateau-0/1 clusters mixes 8 of them, in plateau 2 four more.
    for max_plateau, share, level in ((1, 9 / 17, "error"), (2, 5 / 17, "ok")):
        for t, decision in enumerate(determined[0]["decisions"]):
            if decision["observation"]["plateau_epochs"] <= max_plateau:
                decision["action"]["action"] = OPS[(t + 2) % 4]
        result = check_single_action_clusters(determined)
        assert (result.details["share"], result.level) == (pytest.approx(share), level)
        assert result.details["total_clusters"] == 17
    assert check_single_action_clusters([]).level == "error"


def test_mask_validity() -> None:
    episodes = good_dataset()
    assert check_mask_validity(episodes).level == "ok"
    decision = episodes[3]["decisions"][1]
    decision["valid_joint_actions"][decision["action"]["joint_index"]] = False  # executed while masked
    del episodes[4]["decisions"][0]["valid_joint_actions"]
    error = check_mask_validity(episodes)
    assert (error.passed, error.level, error.details["invalid"]) == (False, "error", 2)
    assert error.details["examples"] == ["e3[1]", "e4[0]"]


@pytest.mark.parametrize(
    ("edit", "problem"),
    [
        (lambda a: a["action_probabilities"].update(behavior_prob=0.3), "behavior_prob 0.3 !="),
        (lambda a: a["action_probabilities"]["behavior_probs"].update(WAIT=0.3), "sum to"),
        (lambda a: a["action_probabilities"].update(sampled_action="CULL" if a["action"] == "WAIT" else "WAIT"),
         "is not the executed op"),
        (lambda a: a.update(joint_behavior_prob=0.5), "joint_behavior_prob 0.5 is not in"),
        (lambda a: a.update(joint_behavior_logp=0.0), "is not log(joint_behavior_prob)"),
        (lambda a: a.pop("action_probabilities"), "no behaviour probabilities"),
    ],
)
def test_behavior_probability_consistency(edit: Any, problem: str) -> None:
    episodes = good_dataset()
    assert check_behavior_probability_consistency(episodes).level == "ok"
    edit(episodes[2]["decisions"][1]["action"])
    error = check_behavior_probability_consistency(episodes)
    assert (error.passed, error.level) == (False, "error")
    assert problem in error.details["examples"][0] and error.details["examples"][0].startswith("e2[1]")


def test_lifecycle_coverage() -> None:
    assert check_lifecycle_coverage(good_dataset()).level == "ok"
    none_end = [make_episode(f"e{i}", fossilized=0, culled=0) for i in range(5)]
    assert check_lifecycle_coverage(none_end).level == "error"
    culled_only = [make_episode(f"e{i}", fossilized=0, culled=1) for i in range(5)]
    assert check_lifecycle_coverage(culled_only).level == "ok"
    rarely = [make_episode(f"e{i}", created=int(i < 3), fossilized=int(i < 3)) for i in range(5)]  # 60 % germinate
    warn = check_lifecycle_coverage(rarely)
    assert (warn.passed, warn.level, warn.details["germinating_share"]) == (True, "warning", 0.6)
    assert check_lifecycle_coverage([]).level == "error"


@pytest.mark.parametrize(
    ("edit", "where"),
    [
        (lambda e: e["decisions"][1]["observation"]["features"].__setitem__(5, math.nan), "e1[1]: features"),
        (lambda e: e["decisions"][1]["observation"]["features"].__setitem__(5, None), "e1[1]: features"),
        (lambda e: e["decisions"][2]["outcome"].update(reward=math.inf), "e1[2]: reward"),
        (lambda e: e["decisions"][0]["rewards"]["loss"].update(total=None), "e1[0]: rewards.loss"),
        (lambda e: e["final_features"].__setitem__(0, -math.inf), "e1: final_features"),
    ],
)
def test_finite_values(edit: Any, where: str) -> None:
    episodes = good_dataset()
    assert check_finite_values(episodes).level == "ok"
    edit(episodes[1])
    error = check_finite_values(episodes)
    assert (error.passed, error.level) == (False, "error") and error.details["examples"] == [where]


def test_threshold_validation() -> None:
    with pytest.raises(ValueError, match="action coverage"):
        DatasetHealthCheck(action_coverage_min=0.1, action_coverage_warn=0.05)
    with pytest.raises(ValueError, match="policy diversity"):
        DatasetHealthCheck(policy_diversity_min=9)


def test_print_report(tmp_path: Path) -> None:
    checker = DatasetHealthCheck()
    out = io.StringIO()
    checker.print_report(checker.run_all(good_dataset()), Console(file=out, width=140))
    assert "All critical checks passed" in out.getvalue() and "✓" in out.getvalue()
    out = io.StringIO()
    bad = {"x": HealthCheckResult("x", False, "error", "broken")}
    checker.print_report(bad, Console(file=out, width=140))
    assert "BLOCKING ERRORS FOUND" in out.getvalue() and "✗" in out.getvalue() and "broken" in out.getvalue()


def test_save_report_and_load_episodes(tmp_path: Path) -> None:
    for episode in good_dataset()[:3]:
        write_strict_json(tmp_path / f"{episode['episode_id']}.json", episode)
    write_strict_json(tmp_path / "manifest.json", {"matrix_hash": "x"})
    write_strict_json(tmp_path / ".generation_progress.json", {"completed": []})
    episodes = load_episodes(tmp_path)
    assert [e["episode_id"] for e in episodes] == ["e0", "e1", "e2"]
    checker = DatasetHealthCheck(policy_diversity_min=1, policy_diversity_warn=1)
    save_report(checker.run_all(episodes), tmp_path / "health_report.json")
    report = json.loads((tmp_path / "health_report.json").read_text())
    assert report["policy_diversity"]["level"] == "ok" and set(report["mask_validity"]) == {
        "name", "passed", "level", "message", "details"}
