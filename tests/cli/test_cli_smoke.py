"""End-to-end CLI smoke tests on tiny budgets."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from esper.cli.main import main
from esper.data.tasks import get_task_spec
from esper.kasmina.model import MorphogeneticModel
from esper.leyline.seeding import SeedStream, episode_seeds
from esper.storage.checkpoint import load_model_checkpoint
from esper.storage.rundir import read_jsonl

TINY = ["--max-train-samples", "256", "--max-val-samples", "128", "--no-tui", "--no-tensorboard",
        "--telemetry-level", "minimal", "--param-cost", "1.0"]


def test_train_heuristic_writes_a_complete_run_dir(tmp_path: Path) -> None:
    run = tmp_path / "h"
    assert main(["train", "heuristic", "--task", "synthetic", "--episodes", "1", "--max-epochs", "3",
                 "--run-dir", str(run), *TINY]) == 0
    config = json.loads((run / "config.json").read_text())
    assert config["command"] == "heuristic" and config["config"]["max_epochs"] == 3
    assert set(config) >= {"argv", "runtime", "versions", "started_at"}
    steps = read_jsonl(run / "steps.jsonl")
    assert [s["epoch"] for s in steps] == [1, 2]  # decisions after epochs 1 .. T-1
    assert all(abs(s["reward"] - s["reward_components"]["total"]) < 1e-12 for s in steps)
    [episode] = read_jsonl(run / "episodes.jsonl")
    assert episode["controller"] == "heuristic" and len(episode["accuracy_curve"]) == 3
    task = get_task_spec("synthetic")
    fresh = MorphogeneticModel(task.host_factory(), slots=["early", "mid", "late"], lifecycle=task.lifecycle)
    load_model_checkpoint(fresh, run / "checkpoints" / "model_final.pt")
    torch.load(run / "checkpoints" / "model_final.pt", weights_only=True)
    [started] = [e for e in read_jsonl(run / "events.jsonl") if e["event_type"] == "TRAINING_STARTED"]
    assert started["data"]["reward"] == "gap, λ_p 1"


def test_a_run_prints_the_parameter_cost_its_sample_cap_resolves_to(tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    argv = [a for a in TINY if a not in ("--param-cost", "1.0")]
    assert main(["train", "heuristic", "--max-epochs", "2", "--run-dir", str(tmp_path / "h"), *argv]) == 0
    assert "reward gap, λ_p 3.918" in capsys.readouterr().out  # 256 → the 192 cap


def test_console_prints_epoch_detail_only_at_debug(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = [a for a in TINY if a not in ("--telemetry-level", "minimal")]
    assert main(["train", "heuristic", "--max-epochs", "2", "--run-dir", str(tmp_path / "n"), *argv]) == 0
    actions = [e for e in read_jsonl(tmp_path / "n" / "events.jsonl") if e["event_type"] == "ACTION_TAKEN"]
    assert actions and all((e["severity"] == "debug") == (e["data"]["op"] == "WAIT") for e in actions)
    normal = capsys.readouterr().out
    assert "epoch 2/2" not in normal and "episode done" in normal and "ETA" in normal
    assert main(["train", "heuristic", "--max-epochs", "2", "--run-dir", str(tmp_path / "d"), *argv,
                 "--telemetry-level", "debug"]) == 0
    assert "epoch 2/2" in capsys.readouterr().out


def test_existing_run_dir_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "h"
    run.mkdir()
    (run / "keep.txt").write_text("precious")
    code = main(["train", "heuristic", "--max-epochs", "2", "--run-dir", str(run), *TINY])
    assert code == 2 and "already exists" in capsys.readouterr().err
    assert (run / "keep.txt").read_text() == "precious"
    file = run / "keep.txt"
    assert main(["train", "heuristic", "--max-epochs", "2", "--run-dir", str(file), *TINY]) == 2
    assert "is a file" in capsys.readouterr().err and file.read_text() == "precious"


def test_compare_runs_controllers_on_identical_seeds(tmp_path: Path) -> None:
    run = tmp_path / "c"
    assert main(["compare", "--controllers", "static", "random", "heuristic", "--task", "synthetic", "--episodes",
                 "2", "--max-epochs", "3", "--run-dir", str(run), *TINY]) == 0
    results = json.loads((run / "results.json").read_text())
    assert results["controllers"] == ["static", "random", "heuristic"]
    for label in ("random", "heuristic"):
        pair = results["pairwise"][label]["static"]
        assert pair["wins"] + pair["losses"] + pair["ties"] == 2
    episodes = read_jsonl(run / "episodes.jsonl")
    assert len(episodes) == 6
    for i in range(2):
        seeds = {e["env_seed"] for e in episodes if e["episode"] == i}
        assert seeds == {episode_seeds(42, SeedStream.EVALUATION, i)[0]}
    # identical host init and data: within an episode static and heuristic agree until the heuristic first acts
    # (a seed that has not blended changes nothing); across episodes, other seeds train other hosts
    steps = read_jsonl(run / "steps.jsonl")
    for i in range(2):
        first = min((s["epoch"] for s in steps if s["episode"] == i and s["controller"] == "heuristic"
                     and s["op"] != "WAIT"), default=3)
        curves = {e["controller"]: e["accuracy_curve"] for e in episodes if e["episode"] == i}
        assert curves["heuristic"][:first] == curves["static"][:first]
    static = [e for e in episodes if e["controller"] == "static"]
    assert static[0]["accuracy_curve"] != static[1]["accuracy_curve"]


@pytest.mark.parametrize(("argv", "named"), [
    (["train", "heuristic", "--task", "imagenet"], "imagenet"),
    (["train", "heuristic", "--max-epochs", "0"], "--max-epochs"),
    (["compare", "--controllers", "static", "oracle"], "oracle"),
    (["train", "heuristic", "--slots", "deep"], "deep"),
])
def test_bad_input_exits_nonzero_with_message(argv: list[str], named: str, tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    code = main([*argv, "--run-dir", str(tmp_path / "x"), *TINY])
    assert code == 2
    assert named in capsys.readouterr().err  # the message names what was wrong


def test_missing_dataset_is_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["train", "heuristic", "--task", "cifar10", "--max-epochs", "2", "--data-dir", str(tmp_path / "d"),
                 "--run-dir", str(tmp_path / "r"), *TINY])
    err = capsys.readouterr().err
    assert code == 2 and "cifar-10-batches-py" in err and "--download" in err
    assert not (tmp_path / "r").exists()  # nothing is left behind, so the same command can be rerun


def test_module_entry_point_help() -> None:
    out = subprocess.run([sys.executable, "-m", "esper", "--help"], capture_output=True, text=True, check=True)
    assert "train" in out.stdout and "compare" in out.stdout and "report" in out.stdout


def test_telemetry_off_filters_events_but_keeps_tensorboard_curves(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    argv = [a for a in TINY if a not in ("--telemetry-level", "minimal", "--no-tensorboard")]
    run = tmp_path / "off"
    assert main(["compare", "--controllers", "static", "heuristic", "--max-epochs", "2", "--episodes", "1",
                 "--telemetry-level", "off", "--run-dir", str(run), *argv]) == 0
    out = capsys.readouterr().out
    assert (run / "events.jsonl").read_text() == "" and "TensorBoard:" in out and "progress:" in out
    acc = EventAccumulator(str(run / "tb"))
    acc.Reload()
    tags = set(acc.Tags()["scalars"])
    assert {"epoch/val_accuracy/static", "epoch/val_accuracy/heuristic", "epoch/seed_params/heuristic",
            "episode/static/final_accuracy"} <= tags
    assert [p.step for p in acc.Scalars("epoch/val_loss/heuristic")] == [1, 2]

    assert main(["train", "heuristic", "--max-epochs", "2", "--run-dir", str(tmp_path / "no_tb"), *TINY]) == 0
    assert "TensorBoard:" not in capsys.readouterr().out and not (tmp_path / "no_tb" / "tb").exists()


def test_normal_level_without_a_terminal_prints_well_under_a_line_per_env_epoch(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = [a for a in TINY if a not in ("--telemetry-level", "minimal")]
    assert main(["compare", "--controllers", "static", "heuristic", "random", "--episodes", "2", "--max-epochs", "4",
                 "--run-dir", str(tmp_path / "c"), *argv]) == 0
    lines = capsys.readouterr().out.splitlines()
    env_epochs = 3 * 2 * 4
    streamed = [line for line in lines if line.startswith("[")]  # events and progress, not the final table
    assert len(streamed) <= env_epochs / 2
    assert any("ETA" in line for line in streamed)
    assert len(lines) <= env_epochs + 12  # the closing table and the next-step lines included
