"""`esper study` chooses best-fixed and best-rule on selection seeds and evaluates them beside the policy under
study; `esper compare --match` picks what static:matched is widened to; the default tie threshold is one test
sample's worth of accuracy. Tiny budgets: seconds each."""

from __future__ import annotations

import csv
import itertools
import json
from pathlib import Path
from typing import Any

import pytest
from matplotlib.colors import to_rgba
from matplotlib.figure import Figure

from esper.cli.main import main
from esper.data.synthetic import SYNTHETIC_SPLIT_SIZES
from esper.evaluation.results import ComparisonResult
from esper.evaluation.runs import RunLabels
from esper.evaluation.selection import BEST_FIXED, BEST_RULE, chosen_blueprints
from esper.report import study as report_study
from esper.simic.ppo.checkpoint import read_policy_checkpoint
from esper.storage.rundir import read_jsonl

pytestmark = pytest.mark.smoke

OUTPUT = ["--no-tui", "--no-tensorboard", "--telemetry-level", "minimal", "--device", "cpu"]
STUDY = ["study", "--preset", "synthetic", "--runs", "1", "--set", "n_episodes=2", "--set", "max_epochs=3",
         "--set", "n_envs=2", "--set", "group_size=1", "--set", "max_train_samples=64", "--set", "max_val_samples=32",
         "--seeds", "2", "--selection-seeds", "1", "--max-test-samples", "64", *OUTPUT]
RUN = RunLabels(0)
TINY = ["--task", "synthetic", "--episodes", "2", "--max-epochs", "3", "--max-train-samples", "256",
        "--max-val-samples", "128", "--param-cost", "1.0", *OUTPUT]
COMPARE = ["compare", "--controllers", "static", "fixed:norm@early", "heuristic", "static:matched", *TINY]


def _results(run: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((run / "results.json").read_text())
    return data


def test_study_chooses_best_fixed_and_best_rule_on_selection_seeds_and_evaluates_them(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_study_plots: None) -> None:
    run = tmp_path / "study"
    assert main([*STUDY, "--data-dir", str(tmp_path / "data"), "--run-dir", str(run)]) == 0
    results = _results(run)
    chosen = results["study"]["chosen"]
    assert set(chosen) == {BEST_FIXED, BEST_RULE}
    assert chosen[BEST_FIXED].startswith("fixed:") and chosen[BEST_RULE].startswith(("behavior:", "grow:"))

    # chosen by mean final validation accuracy on the selection seeds (the first candidate on a tie), over greedy
    # rounds: round 1 tries single modules and presets, each later one the best fixed:/grow: spec with one module more
    rounds = sorted((run / "selection").glob("round-*"))
    selections = [_results(r) for r in rounds]
    means = {c: r["per_controller"][c]["final_accuracy"]["mean"] for r in selections for c in r["controllers"]}
    assert all(r["per_controller"][c]["episodes"] == 1 for r in selections for c in r["controllers"])
    first = selections[0]["controllers"]
    assert all(c.startswith("behavior:") or "," not in c for c in first)
    for label, prefixes in ((BEST_FIXED, ("fixed:",)), (BEST_RULE, ("behavior:", "grow:"))):
        candidates = [c for c in means if c.startswith(prefixes)]
        assert len(candidates) > 1, label
        assert chosen[label] == max(candidates, key=lambda c: means[c])
        so_far: list[str] = []
        for before, after in itertools.pairwise(selections):
            so_far += [c for c in before["controllers"] if c.startswith(prefixes)]
            best = max(so_far, key=lambda c: means[c])
            grown = [c for c in after["controllers"] if c.startswith(prefixes)]
            if grown:  # the next round extends the best so far, found in this round, by one module in a free slot
                assert best in before["controllers"] and best.startswith(("fixed:", "grow:"))
                assert all(c.count(",") == best.count(",") + 1 for c in grown)
                assert all(set(best.split(":")[1].split(",")) < set(c.split(":")[1].split(",")) for c in grown)
    table = (run / "selection" / "summary.md").read_text()
    assert f"Chosen: best-fixed = {chosen[BEST_FIXED]}, best-rule = {chosen[BEST_RULE]}." in table
    assert f"| {chosen[BEST_FIXED]} |" in table and f"| {chosen[BEST_RULE]} |" in table
    assert table.count("\n| ") == len(means) + 1  # header and one row per candidate of every round
    # the selection seeds are none of the evaluation seeds the chosen variants are reported on
    selection_seeds = {e["env_seed"] for r in rounds for e in read_jsonl(r / "episodes.jsonl")}
    evaluation_seeds = {e["env_seed"] for e in read_jsonl(run / "eval" / "episodes.jsonl")}
    assert len(evaluation_seeds) == 2 and not selection_seeds & evaluation_seeds

    per = results["per_controller"]
    for label in (BEST_FIXED, BEST_RULE, "static:matched", RUN.init, RUN.final, RUN.replay):
        assert per[label]["episodes"] == 2, label
        assert per[label]["final_test_accuracy"] is not None, label
    assert results["matched"]["matched_to"] == RUN.final
    assert results["tie_threshold"] == 100 / 64  # one of the 64 test samples scored
    assert {p["metric"] for row in results["pairwise"].values() for p in row.values()} == {"test_accuracy"}
    summary = (run / "summary.md").read_text()
    assert f"| best-fixed ({chosen[BEST_FIXED]}) |" in summary and f"| best-rule ({chosen[BEST_RULE]}) |" in summary
    assert f"matched to the mean final parameters of {RUN.final}" in summary
    # the run's init decides as its teacher in every state: its rows are the teacher's episodes, not run again
    teacher = results["study"]["teacher"]
    assert results["study"]["copies"] == {RUN.init: teacher} and per[RUN.init] == per[teacher]
    assert RUN.init not in {e["controller"] for e in read_jsonl(run / "eval" / "episodes.jsonl")}
    assert f"{RUN.init}: the residual is still zero on every head" in summary
    # groups of one env: no pair within a group prices an off-teacher decision, but the decisions are counted
    [effect] = results["study"]["off_teacher"]
    assert effect["per_decision"] is None and effect["episodes"] == len(read_jsonl(run / "train" / "run-0" /
                                                                                    "episodes.jsonl"))
    assert "**What did leaving the teacher return in training?**" in summary and "run 0 — (" in summary
    # the preset's λ_c is measured in the study's own setting before training (and cached), and recorded as that
    # number, never as "auto" or the null that means "the task's"
    cached = json.loads(next((tmp_path / "data" / "param_costs").glob("synthetic_*_b64_cosine_*.json")).read_text())
    assert results["study"]["training"]["reward"]["compute_cost"] == cached["compute_cost"]
    assert json.loads((run / "eval" / "config.json").read_text())["runtime"]["compute_cost"] == cached["compute_cost"]
    # results.csv: one row per controller and evaluation episode, the numbers of results.json
    with (run / "results.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 2 * len(results["controllers"])
    assert {r["controller"] for r in rows} == set(results["controllers"])
    first = results["episodes"][0]
    assert float(rows[0]["final_test_accuracy"]) == first["final_test_accuracy"]
    assert int(rows[0]["train_flops"]) == first["train_flops"]
    # `esper report` on the directory the study prints: every phase's plots (the study's own closing plots are
    # skipped here, no_study_plots; test_your_own.py checks that a study draws them)
    assert not (run / "report").exists()
    assert main(["report", str(run)]) == 0
    for phase, plot in (("train/run-0", "ppo_health.png"), ("selection/round-1", "compare_final_accuracy.png"),
                        ("replay-source/run-0", "compare_final_accuracy.png"), ("eval", "compare_final_accuracy.png"),
                        (".", "accuracy_vs_compute.png")):
        assert (run / "report" / phase / plot).is_file(), phase
    # the accuracy-vs-compute figure shows the study's results, the init copied from its teacher among them
    shown: list[ComparisonResult] = []
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(report_study, "compute_figure", lambda result, path: shown.append(result) or path)
        assert main(["report", str(run)]) == 0
    assert RUN.init in shown[0].controllers
    # in the accuracy-vs-compute figure the training runs' markers share no colour with a controller's point
    figures: list[Figure] = []
    monkeypatch.setattr(report_study.rp, "save", lambda fig, path: figures.append(fig) or path)
    report_study.compute_figure(ComparisonResult.from_dict(_results(run / "eval")), run / "again.png")
    ax = figures[0].axes[0]
    points = {to_rgba(container.lines[0].get_color()) for container in ax.containers}
    runs = {tuple(c.get_edgecolor()[0]) for c in ax.collections if "per " in str(c.get_label())}
    assert len(points) == len(ax.containers) >= 5 and len(runs) == 1 and not runs & points


def test_compare_matches_static_matched_to_the_named_controller(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "c"
    assert main([*COMPARE, "--match", "heuristic", "--max-test-samples", "50", "--run-dir", str(run)]) == 0
    results = _results(run)
    assert results["controllers"] == ["static", "fixed:norm@early", "heuristic", "static:matched"]
    matched = results["matched"]
    assert matched["matched_to"] == "heuristic"
    assert matched["target_params"] == pytest.approx(results["per_controller"]["heuristic"]["total_params"]["mean"])
    # the fixed module is built in from epoch 0: more parameters than static, and nothing grown
    fixed = results["per_controller"]["fixed:norm@early"]
    assert fixed["total_params"]["mean"] > results["per_controller"]["static"]["total_params"]["mean"]
    assert fixed["params_added"]["mean"] == 0
    # default tie threshold: one of the 50 test samples scored, in pp
    assert results["tie_threshold"] == 2.0
    assert all(e["final_test_accuracy"] is not None for e in results["episodes"])

    capsys.readouterr()
    for match in ("nosuch", "static:matched"):  # static:matched cannot be matched to itself
        bad = tmp_path / f"bad-{match}"
        assert main([*COMPARE, "--match", match, "--run-dir", str(bad)]) == 2
        err = capsys.readouterr().err
        assert f"--match {match}" in err and "Traceback" not in err
        assert all(label in err for label in ("static", "fixed:norm@early", "heuristic")), err
        assert not bad.exists()  # refused before anything ran or was written


def test_default_tie_threshold_is_one_sample_of_the_whole_test_split(tmp_path: Path) -> None:
    run = tmp_path / "c"
    assert main(["compare", "--controllers", "static", "heuristic", *TINY, "--episodes", "1",
                 "--run-dir", str(run)]) == 0
    assert _results(run)["tie_threshold"] == pytest.approx(100 / SYNTHETIC_SPLIT_SIZES["test"])
    run = tmp_path / "set"
    assert main(["compare", "--controllers", "static", "heuristic", *TINY, "--episodes", "1", "--tie-threshold",
                 "0.25", "--max-test-samples", "50", "--run-dir", str(run)]) == 0
    assert _results(run)["tie_threshold"] == 0.25  # an explicit threshold wins


def test_blueprints_from_selection_trains_the_policy_on_best_fixed_blueprints(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], no_study_plots: None) -> None:
    run = tmp_path / "study"
    argv = [*STUDY, "--set", "teacher=none", "--set", 'initial_op_bias={"GERMINATE": 3}',
            "--set", "compute_cost=1.0",  # λ_c given: measuring it is the study above's
            "--blueprints-from-selection", "--data-dir", str(tmp_path / "data"), "--run-dir", str(run)]
    assert main(argv) == 0
    best_fixed = _results(run)["study"]["chosen"][BEST_FIXED]
    allowed = chosen_blueprints(best_fixed)
    assert allowed and all(f"{b}@" in best_fixed for b in allowed)
    # the trained policy carries the restriction, and every germination it made in training obeys it
    for name in ("init.pt", "final.pt"):
        saved = read_policy_checkpoint(run / "train" / "run-0" / "checkpoints" / name)["config"]
        assert saved["ppo"]["blueprints"] == allowed
    germinated = [step["blueprint"] for step in read_jsonl(run / "train" / "run-0" / "steps.jsonl")
                  if step["op"] == "GERMINATE" and step["success"]]
    assert germinated and set(germinated) <= set(allowed)
    assert _results(run)["study"]["training"]["ppo"]["blueprints"] == allowed
    assert f"may germinate only {', '.join(allowed)}" in (run / "summary.md").read_text()

    # a rerun continues the same study: selection is not redone, nothing is trained again
    episodes = read_jsonl(run / "selection" / "round-1" / "episodes.jsonl")
    capsys.readouterr()
    assert main(argv) == 0
    assert "Training run 0: finished" in capsys.readouterr().out
    assert read_jsonl(run / "selection" / "round-1" / "episodes.jsonl") == episodes


@pytest.mark.parametrize("extra", [["--selection-seeds", "0"], ["--set", 'blueprints=["norm"]'],
                                   ["--ppo", "somewhere"]])
def test_blueprints_from_selection_refuses_what_contradicts_it(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                               extra: list[str]) -> None:
    run = tmp_path / "study"
    assert main([*STUDY, *extra, "--blueprints-from-selection", "--data-dir", str(tmp_path / "data"),
                 "--run-dir", str(run)]) == 2
    err = capsys.readouterr().err
    assert "--blueprints-from-selection" in err and "Traceback" not in err
    assert not run.exists()


def test_chosen_blueprints_are_the_modules_of_the_fixed_variant() -> None:
    assert chosen_blueprints("fixed:norm@early") == ["norm"]
    assert chosen_blueprints("fixed:norm@early,conv_light@mid,norm@late") == ["conv_light", "norm"]
