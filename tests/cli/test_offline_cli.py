"""The offline half end to end on tiny budgets: datagen → train iql (with live evaluation) → evaluate-offline →
PPO started from the IQL policy; and the offline commands' bad inputs (exit 2, one line)."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest
import torch

from esper.cli.main import main
from esper.storage.rundir import read_jsonl

pytestmark = pytest.mark.smoke
QUIET = ["--no-tui", "--no-tensorboard", "--telemetry-level", "minimal"]
TINY_IQL = ["--set", "epochs=2", "--set", "steps_per_epoch=30", "--set", "hidden_sizes=[16,16]", "--set",
            "batch_size=16", "--device", "cpu"]


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("offline") / "data"
    code = main(["datagen", "--output-dir", str(out), "--task", "synthetic", "--envs", "baseline", "--policies",
                 "random", "baseline", "periodic", "--episodes-per-combo", "2", "--max-epochs", "4",
                 "--max-train-samples", "96", "--max-val-samples", "48"])
    assert code in (0, 1)  # a tiny dataset may fail the diversity health checks, which is not what is tested here
    return out


@pytest.fixture(scope="module")
def iql_run(dataset: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    run = tmp_path_factory.mktemp("offline") / "iql"
    assert main(["train", "iql", "--dataset", str(dataset), *TINY_IQL, "--eval-episodes", "1", "--run-dir",
                 str(run), *QUIET]) == 0
    return run


def test_train_iql_writes_history_checkpoints_and_a_live_evaluation(iql_run: Path) -> None:
    history = read_jsonl(iql_run / "history.jsonl")
    assert [h["epoch"] for h in history] == [1, 2] and all(0.0 <= h["agreement"] <= 1.0 for h in history)
    final = torch.load(iql_run / "checkpoints" / "final.pt", weights_only=True)
    assert final["format"] == "esper-iql-v1"
    results = json.loads((iql_run / "eval" / "results.json").read_text())
    assert results["controllers"] == ["static", "heuristic", "iql:final"]
    config = json.loads((iql_run / "config.json").read_text())
    assert config["command"] == "train iql" and config["config"]["dataset_settings"]["task"] == "synthetic"
    assert main(["report", str(iql_run), "--out", str(iql_run.parent / "iql_report")]) == 0
    assert (iql_run.parent / "iql_report" / "learning.png").is_file()
    assert (iql_run.parent / "iql_report" / "eval" / "compare_final_accuracy.png").is_file()


def test_rerunning_a_finished_iql_run_keeps_its_epochs(iql_run: Path, dataset: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    capsys.readouterr()
    assert main(["train", "iql", "--dataset", str(dataset), *TINY_IQL, "--eval-episodes", "0", "--run-dir",
                 str(iql_run), *QUIET]) == 0
    assert len(read_jsonl(iql_run / "history.jsonl")) == 2
    assert capsys.readouterr().out.count(f"Run directory: {iql_run}") == 2  # before any work, and at the end


def test_a_resumed_iql_run_drops_the_epoch_logged_after_its_checkpoint(iql_run: Path, dataset: Path,
                                                                       tmp_path: Path) -> None:
    run = tmp_path / "iql"
    shutil.copytree(iql_run, run)
    with open(run / "history.jsonl", "a", encoding="utf-8") as f:  # a kill between the log line and the checkpoint
        f.write(json.dumps({**read_jsonl(run / "history.jsonl")[-1], "epoch": 3}) + "\n")
    tiny_three_epochs = [*TINY_IQL[:1], "epochs=3", *TINY_IQL[2:]]
    assert main(["train", "iql", "--dataset", str(dataset), *tiny_three_epochs, "--eval-episodes", "0", "--run-dir",
                 str(run), *QUIET]) == 0
    assert [h["epoch"] for h in read_jsonl(run / "history.jsonl")] == [1, 2, 3]


def test_a_torn_epoch_the_checkpoint_counts_is_refused(iql_run: Path, dataset: Path, tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    """Epoch 2's row torn after its checkpoint was saved: the checkpoint has learned from it, so the run cannot go on
    (it used to, leaving history.jsonl with epochs 1 and 3)."""
    run = tmp_path / "iql"
    shutil.copytree(iql_run, run)
    history = run / "history.jsonl"
    history.write_text(history.read_text()[:-20])
    before = history.read_text()
    tiny_three_epochs = [*TINY_IQL[:1], "epochs=3", *TINY_IQL[2:]]
    capsys.readouterr()
    assert main(["train", "iql", "--dataset", str(dataset), *tiny_three_epochs, "--eval-episodes", "0", "--run-dir",
                 str(run), *QUIET]) == 2
    err = capsys.readouterr().err
    assert f"{history} lacks the row of epoch 2" in err and "--overwrite" in err
    assert history.read_text() == before


def test_a_rerun_on_other_data_is_refused(iql_run: Path, dataset: Path, tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    other = tmp_path / "other"
    shutil.copytree(dataset, other)
    capsys.readouterr()
    assert main(["train", "iql", "--dataset", str(other), *TINY_IQL, "--eval-episodes", "0", "--run-dir",
                 str(iql_run), *QUIET]) == 2
    assert "datasets" in capsys.readouterr().err


def test_evaluate_offline_reports_both_estimators(iql_run: Path, dataset: Path, tmp_path: Path) -> None:
    out = tmp_path / "ope.json"
    assert main(["evaluate-offline", "--data", str(dataset), "--controller", f"iql:{iql_run}", "--n-bootstrap", "20",
                 "--set", "fqe_iterations=3", "--set", "fqe_bootstrap=2", "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    assert {"pdwis", "fqe", "behavior"} <= set(result)
    assert all(math.isfinite(result["fqe"][k]) for k in ("value", "ci_low", "ci_high"))  # 2 fits: no CI to trust
    pdwis = result["pdwis"]  # undefined (null) when no logged episode follows the target at every decision
    assert pdwis["value"] is None or pdwis["ci_low"] <= pdwis["value"] <= pdwis["ci_high"]
    assert {b["policy"] for b in result["behavior"]} >= {"all", "baseline", "periodic"}


def test_ppo_starts_from_the_distilled_iql_policy(iql_run: Path, tmp_path: Path) -> None:
    run = tmp_path / "ppo"
    assert main(["train", "ppo", "--preset", "quick", "--set", "n_episodes=4", "--set", "max_epochs=3", "--set",
                 "max_train_samples=96", "--set", "max_val_samples=48", "--init-from", f"iql:{iql_run}",
                 "--device", "cpu", "--run-dir", str(run), *QUIET]) == 0
    init = torch.load(run / "checkpoints" / "init.pt", weights_only=True)
    assert init["config"]["ppo"]["init_from"] == f"iql:{iql_run}"
    assert init["obs_normalizer"]["update_count"] == 1  # fitted to the dataset before the first rollout


@pytest.mark.parametrize("case", ["empty", "not-a-dataset", "older-schema", "nan-reward", "all-invalid-mask"])
def test_offline_bad_input_exits_2_with_one_line(case: str, dataset: Path, tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad"
    if case == "empty":
        bad.mkdir()
    elif case == "not-a-dataset":
        bad.mkdir()
        (bad / "x.json").write_text("[1, 2]")
    else:
        shutil.copytree(dataset, bad)
        path = sorted(p for p in bad.glob("*.json") if not p.name.startswith(".")
                      and p.name not in ("manifest.json", "health_report.json"))[0]
        episode = json.loads(path.read_text())
        if case == "older-schema":
            episode["schema_version"] = "2.1.0"
        elif case == "all-invalid-mask":
            first = episode["decisions"][0]
            first["valid_joint_actions"] = [False] * len(first["valid_joint_actions"])
        else:
            episode["decisions"][0]["rewards"]["gap"]["total"] = episode["decisions"][0]["outcome"]["reward"] = None
        path.write_text(json.dumps(episode))
    code = main(["train", "iql", "--dataset", str(bad), *TINY_IQL, "--run-dir", str(tmp_path / "run"), *QUIET])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and err.startswith("error:") and "Traceback" not in err
    assert case != "all-invalid-mask" or "no valid action" in err
    assert case != "older-schema" or "regenerate the dataset into a new directory with `esper datagen" in err
    assert case != "nan-reward" or "rewards holds NaN" in err
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("tool", ["export", "health-check", "evaluate-offline", "train iql", "datagen into it"])
def test_a_run_directory_given_to_a_datagen_tool_is_named_with_the_fix(tool: str, tmp_path: Path,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    """A compare directory used to fail on its config.json: "episode schema None"."""
    run = tmp_path / "compare_run"
    run.mkdir()
    (run / "config.json").write_text(json.dumps({"command": "compare", "config": {}}))
    (run / "results.json").write_text("{}")
    argv = {"export": ["datagen", "export", str(run), "--format", "minari", "--out", "x-v0"],
            "health-check": ["datagen", "--health-check", str(run)],
            "evaluate-offline": ["evaluate-offline", "--data", str(run), "--controller", "heuristic"],
            "train iql": ["train", "iql", "--dataset", str(run), *TINY_IQL, "--run-dir", str(tmp_path / "iql")],
            "datagen into it": ["datagen", "--output-dir", str(run), "--task", "synthetic"]}[tool]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert f"{run} is the run directory of `esper compare`, not a datagen dataset: " in err
    assert ("another --output-dir" if tool == "datagen into it" else "esper datagen --output-dir DIR") in err


def test_train_iql_checks_the_live_setting_before_any_epoch() -> None:
    """A dataset's task and blueprint head must exist here before IQL trains for its live evaluation, not after."""
    from esper.cli.train_iql import check_live_setting
    from esper.data.tasks import get_task_spec
    from esper.leyline import ActionSpace
    from esper.leyline.errors import UserInputError

    check_live_setting("synthetic", get_task_spec("synthetic").action_space)  # the built-in head: nothing to say
    widened = ActionSpace("cnn", (*get_task_spec("synthetic").action_space.head, "pointwise"))
    with pytest.raises(UserInputError, match=r"pass the --plugin flags the dataset was generated with"):
        check_live_setting("synthetic", widened)
    with pytest.raises(UserInputError, match=r"Unknown task 'stripes'"):
        check_live_setting("stripes", widened)
