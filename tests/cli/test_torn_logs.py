"""A torn or lost line in history.jsonl, steps.jsonl or episodes.jsonl, then a resume: the work the line belonged to
is recomputed (the logs end equal to an uninterrupted run's) or, where a checkpoint has already learned from it, the
resume is refused with one line naming the file and the fix, before anything is changed."""

from __future__ import annotations

import contextlib
import io
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from esper.cli.main import main
from esper.storage.rundir import read_jsonl

pytestmark = pytest.mark.smoke

OUTPUT = ["--no-tui", "--no-tensorboard", "--telemetry-level", "minimal", "--device", "cpu"]
PPO = ["train", "ppo", "--preset", "quick", "--set", "max_train_samples=256", "--set", "max_val_samples=128", "--set",
       "max_epochs=3", "--set", "n_envs=2", "--set", "group_size=1", "--reward-family", "contribution", *OUTPUT]
SMALL = ["--max-epochs", "3", "--max-train-samples", "192", "--max-val-samples", "96", "--max-test-samples", "64",
         "--param-cost", "1.0", *OUTPUT]
EPISODE_RUNS = {"compare": ["compare", "--controllers", "static", "random", "heuristic", "--episodes", "2", *SMALL],
                "heuristic": ["train", "heuristic", "--episodes", "2", *SMALL]}
LOGS = ("history.jsonl", "steps.jsonl", "episodes.jsonl")
TIMED = {"rollout_seconds", "update_seconds", "env_epochs_per_second", "wall_seconds", "anomalies"}
"""Fields no two runs share (times), and the anomaly flags, judged against n_episodes (a run first asked for fewer
episodes is judged in another phase of training)."""


def run(argv: list[str]) -> tuple[int, str]:
    """main(argv) in-process; (exit code, stderr)."""
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        code = main(argv)
    return code, err.getvalue()


def untimed(path: Path) -> list[dict[str, Any]]:
    return [{k: v for k, v in row.items() if k not in TIMED} for row in read_jsonl(path)]


def tear_last_line(path: Path) -> None:
    """Cut the file inside its last line, as a kill (or a power cut) mid-write leaves it."""
    text = path.read_text(encoding="utf-8")
    start = text.rstrip("\n").rfind("\n") + 1
    path.write_text(text[:start + (len(text) - start) // 2], encoding="utf-8")


@pytest.fixture(scope="module")
def ppo_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """"straight": 2 batches in one go; "half": its first batch only."""
    root = tmp_path_factory.mktemp("torn_ppo")
    for name, episodes in (("straight", 4), ("half", 2)):
        assert run([*PPO, "--set", f"n_episodes={episodes}", "--run-dir", str(root / name)])[0] == 0
    return {"straight": root / "straight", "half": root / "half"}


@pytest.mark.parametrize("log", LOGS)
def test_a_line_the_checkpoint_counts_is_refused_naming_the_file_and_the_fix(log: str, ppo_runs: dict[str, Path],
                                                                             tmp_path: Path) -> None:
    """The last line of a finished run (batch 1: the checkpoint has learned from it) torn, then the run extended: it
    cannot be rerun, so the resume stops before it changes anything (it used to continue with batch 1 missing)."""
    target = tmp_path / "run"
    shutil.copytree(ppo_runs["straight"], target)
    tear_last_line(target / log)
    before = {p.name: p.read_bytes() for p in target.iterdir() if p.is_file()}
    code, err = run([*PPO, "--set", "n_episodes=6", "--run-dir", str(target)])
    assert code == 2
    [line] = err.strip().splitlines()
    assert f"{target / log} lacks" in line and "--overwrite" in line and str(target) in line
    assert {p.name: p.read_bytes() for p in target.iterdir() if p.is_file()} == before


@pytest.mark.parametrize("log", LOGS)
def test_a_torn_line_past_the_checkpoint_is_recomputed(log: str, ppo_runs: dict[str, Path], tmp_path: Path) -> None:
    """Killed while writing batch 1's rows (its checkpoint not saved): the rerun drops the torn line and writes
    batch 1 again, exactly as the uninterrupted run did."""
    target = tmp_path / "run"
    shutil.copytree(ppo_runs["half"], target)
    straight = ppo_runs["straight"]
    first_of_batch_1 = next(line for line in (straight / log).read_text().splitlines()
                            if json.loads(line)["batch"] == 1)
    with open(target / log, "a", encoding="utf-8") as f:
        f.write(first_of_batch_1[:len(first_of_batch_1) // 2])
    assert run([*PPO, "--set", "n_episodes=4", "--run-dir", str(target)])[0] == 0
    for name in LOGS:
        assert untimed(target / name) == untimed(straight / name), name


@pytest.fixture(scope="module")
def episode_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("torn_episodes")
    for name, argv in EPISODE_RUNS.items():
        assert run([*argv, "--run-dir", str(root / name)])[0] == 0
    return {name: root / name for name in EPISODE_RUNS}


@pytest.mark.parametrize("log", ["steps.jsonl", "episodes.jsonl"])
@pytest.mark.parametrize("command", list(EPISODE_RUNS))
def test_an_episode_with_a_torn_line_is_run_again(command: str, log: str, episode_runs: dict[str, Path],
                                                  tmp_path: Path) -> None:
    """The last episode's last line torn after the run finished (its result row may be intact: a step is missing
    then): rerunning the command runs that episode again, and the logs equal the uninterrupted run's (a torn step
    used to be dropped silently, leaving the episode one decision short)."""
    target = tmp_path / "run"
    shutil.copytree(episode_runs[command], target)
    tear_last_line(target / log)
    assert run([*EPISODE_RUNS[command], "--run-dir", str(target)])[0] == 0
    for name in ("steps.jsonl", "episodes.jsonl"):
        assert untimed(target / name) == untimed(episode_runs[command] / name), name
