"""`esper study --family` end to end on a tiny family: the pre-check runs on the training types only, prints its table
first, keeps it in the study directory, refuses a family below the threshold (exit 3, naming --ignore-precheck) and
goes on when told to: best-rule on the training types, each held-out type's VBS search and its references on
evaluation seeds, K PPO runs across the training types, each run's replay read from its episodes on the training
types' selection seeds, and every run's init, final policy and replay on the references' evaluation seeds. Rerunning
the command retrains and reruns nothing; flags a family study cannot take are refused."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from esper.cli.main import main
from esper.data.families import Family, InstanceType, register_family
from esper.evaluation import heldout, precheck
from esper.storage.rundir import read_jsonl

pytestmark = pytest.mark.smoke

TINY = register_family(Family("tiny-cli", 1, "synthetic", (
    InstanceType("plain", "synthetic", 128), InstanceType("narrow-noisy", "synthetic", 128, width=0.5,
                                                          corruption=("gaussian_noise", 2)),
    InstanceType("held", "synthetic", 128, corruption=("fog", 2)),
), held_out=("held",), selection_seeds=1, seeds=2))
OUTPUT = ["--no-tui", "--no-tensorboard", "--telemetry-level", "minimal", "--device", "cpu"]
STUDY = ["study", "--family", TINY.key, "--set", "max_epochs=2", "--set",
         "max_val_samples=64", "--max-test-samples", "64", *OUTPUT]
POLICY = ["--runs", "2", "--set", "n_episodes=8", "--set", "param_cost=null", "--set",
          'type_param_costs={"plain": 0.5, "narrow-noisy": 2.0}']
"""Two runs of one batch (two env groups) each, with a λ_p per training type given (measuring them is
test_param_cost_auto's)."""


def test_a_family_study_runs_end_to_end_refuses_below_the_threshold_goes_on_when_told_and_resumes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "study"
    argv = [*STUDY, *POLICY, "--data-dir", str(tmp_path / "data"), "--run-dir", str(run)]
    monkeypatch.setattr(precheck, "GAP_THRESHOLD_PP", 1000.0)  # no family gains this much
    assert main(argv) == 3
    out = capsys.readouterr().out
    assert "Pre-check of family tiny-cli-v1" in out and "Pre-check refused" in out and "--ignore-precheck" in out
    recorded = json.loads((run / "precheck" / precheck.PRECHECK_FILE).read_text())
    assert not recorded["passed"] and set(recorded["best_fixed"]) == {"plain", "narrow-noisy"}
    assert recorded["sbs"].startswith(("fixed:", "static"))
    assert not (run / "precheck" / "held").exists()  # a held-out type is never searched
    table = (run / "precheck" / "summary.md").read_text()
    assert "| plain |" in table and "| narrow-noisy |" in table and "| held |" not in table
    for itype in ("plain", "narrow-noisy"):
        rounds = sorted((run / "precheck" / itype / "selection").glob("round-*"))
        assert rounds and (run / "precheck" / itype / "portfolio" / "results.json").is_file()
        config = json.loads((rounds[0] / "config.json").read_text())["config"]
        assert config["training"]["episode"]["task"] == f"family:tiny-cli-v1/{itype}"
        assert config["training"]["episode"]["max_train_samples"] == 128

    assert not (run / "train").exists()  # no policy trains on a refused family

    # told to, the same study goes on from its finished pre-check: best-rule on the training types, then each held-out
    # type's own VBS search and its references on evaluation seeds, then the policy
    assert main([*argv, "--ignore-precheck"]) == 0
    out = capsys.readouterr().out
    assert "overridden (--ignore-precheck)" in out and "Held-out types of family tiny-cli-v1" in out
    assert {p.name for p in (run / "rules").iterdir() if p.is_dir()} == {"plain", "narrow-noisy"}
    recorded_heldout = json.loads((run / "heldout" / heldout.HELDOUT_FILE).read_text())
    (held,) = recorded_heldout["types"]
    assert held["name"] == "held" and held["specs"][heldout.SBS] == recorded["sbs"]
    assert set(held["specs"]) == {"static:0.5", "static", "static:1.5", "static:2", heldout.SBS, "best-rule",
                                  "heuristic", heldout.VBS}
    assert held["specs"]["best-rule"].startswith(("behavior:", "grow:"))
    assert held["closed"][heldout.SBS] in (0.0, None) and held["search_cost"]["env_epochs"] > 0
    evaluation = json.loads((run / "heldout" / "held" / "eval" / "config.json").read_text())["config"]
    assert evaluation["seed_stream"] == "evaluation" and evaluation["episodes"] == TINY.seeds
    searched = {e["env_seed"] for p in (run / "heldout" / "held").glob("*/round-*/episodes.jsonl") for e in
                read_jsonl(p)}
    evaluated = {e["env_seed"] for e in read_jsonl(run / "heldout" / "held" / "eval" / "episodes.jsonl")}
    assert searched and evaluated and not searched & evaluated
    _check_the_policy(run, recorded_heldout["policy"], out)

    # the same command again: everything is finished, so nothing trains or runs again
    finished = _logs(run)
    monkeypatch.setattr(precheck, "GAP_THRESHOLD_PP", -1000.0)  # every family gains this much
    assert main([*argv, "--ignore-precheck"]) == 0
    out = capsys.readouterr().out
    assert "Pre-check passed" in out and "Training run 0: finished" in out and "Training run 1: finished" in out
    assert _logs(run) == finished and "episode done" not in out


def _logs(run: Path) -> dict[Path, str]:
    """Every episode and training log of the study: a retrained run or a rerun phase would change one."""
    return {p: p.read_text() for name in ("episodes.jsonl", "history.jsonl") for p in sorted(run.rglob(name))}


def _check_the_policy(run: Path, policy: dict[str, Any], out: str) -> None:
    """Two runs across the training types, their replays read from the training types' selection episodes, and
    each run's init, final policy and replay on the held-out type's evaluation seeds, reported against the
    references."""
    for r in range(2):
        config = json.loads((run / "train" / f"run-{r}" / "config.json").read_text())["config"]
        assert config["family"] == TINY.key
        assert config["reward"]["type_param_costs"] == {"plain": 0.5, "narrow-noisy": 2.0}
        assert len(read_jsonl(run / "train" / f"run-{r}" / "episodes.jsonl")) == 8
        for itype in ("plain", "narrow-noisy"):  # the replay source: every training type, none held out
            source = json.loads((run / "replay-source" / f"run-{r}" / itype / "config.json").read_text())["config"]
            assert source["seed_stream"] == "selection"
            assert source["training"]["episode"]["task"] == f"family:tiny-cli-v1/{itype}"
        assert sorted(p.name for p in (run / "replay-source" / f"run-{r}").iterdir()) == ["narrow-noisy", "plain"]
    references = read_jsonl(run / "heldout" / "held" / "eval" / "episodes.jsonl")
    policies = read_jsonl(run / "heldout" / "held" / "policies" / "episodes.jsonl")
    assert {e["controller"] for e in policies} == {"ppo[0] (init)", "ppo[0] (final)", "replay[0]", "ppo[1] (init)",
                                                   "ppo[1] (final)", "replay[1]"}
    assert {e["env_seed"] for e in policies} == {e["env_seed"] for e in references}  # the same paired seeds
    assert policy["runs"] == 2 and {(c["run"], c["type"]) for c in policy["per_run"]} == {(0, "held"), (1, "held")}
    for cell in policy["per_run"]:
        assert set(cell["deltas"]) == {heldout.SBS, "best-rule", "ppo (init)", "replay"}
    assert set(policy["aggregate"]) == {"gap closed", heldout.SBS, "best-rule", "ppo (init)", "replay"}
    assert policy["aggregate"][heldout.SBS]["runs"] == 2 and policy["gflops_per_episode"]["held"]["ppo (final)"] > 0
    assert all(cost["env_epochs"] == 16 for cost in policy["training"])
    summary = (run / "heldout" / "summary.md").read_text()
    assert "The policy trained across the training types" in summary and "| 1 | held |" in summary
    assert "The policy observes" in out and "Δ vs best-rule" in out


@pytest.mark.parametrize(("extra", "message"), [
    (["--preset", "synthetic"], "--preset does not apply to --family"),
    (["--set", "param_cost=0.5"], "charges each training type its own λ_p"),
    (["--set", "max_train_samples=512"], "max_train_samples per instance type"),
    (["--selection-seeds", "0"], "--family needs selection seeds"),
])
def test_flags_a_family_study_cannot_take_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                     extra: list[str], message: str) -> None:
    assert main([*STUDY, *extra, "--run-dir", str(tmp_path / "s")]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "s").exists()


def test_ignore_precheck_needs_a_family(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["study", "--ignore-precheck", *OUTPUT, "--run-dir", str(tmp_path / "s")]) == 2
    assert "--ignore-precheck" in capsys.readouterr().err


@pytest.mark.parametrize("setting", [f"family={TINY.key}", 'type_param_costs={"plain": 1.0}'])
def test_a_single_task_study_refuses_to_train_across_a_family(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                              setting: str) -> None:
    assert main(["study", "--preset", "quick", "--set", setting, *OUTPUT, "--run-dir", str(tmp_path / "s")]) == 2
    assert "run `esper study --family NAME` instead" in capsys.readouterr().err
    assert not (tmp_path / "s").exists()
