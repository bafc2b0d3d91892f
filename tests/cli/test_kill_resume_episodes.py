"""Kill `esper train heuristic` / `esper compare` with SIGKILL mid-run (no cleanup at all), rerun the same command:
it resumes from the finished episodes and ends with exactly the results of an uninterrupted run; events.jsonl holds
each epoch once; an interrupted comparison leaves a results.json that `esper report` reads."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from esper.cli.main import main
from esper.leyline.seeding import SeedStream, episode_seeds
from esper.report.render import render_report
from esper.storage.rundir import read_jsonl

pytestmark = pytest.mark.smoke

SMALL = ["--max-epochs", "4", "--max-train-samples", "128", "--max-val-samples", "64", "--param-cost", "1.0",
         "--no-tui", "--no-tensorboard", "--device", "cpu"]
HEURISTIC = ["train", "heuristic", "--episodes", "4", *SMALL]
COMPARE = ["compare", "--controllers", "static", "random", "heuristic", "static:matched", "--episodes", "3", *SMALL]
SRC = Path(__file__).resolve().parents[2] / "src"


def _env() -> dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(SRC)}


def _kill_when(argv: list[str], run: Path, ready: Callable[[Path], bool]) -> None:
    """Start the command (with `--run-dir run`, or in the default directory under `run` when argv names
    `--runs-root`), SIGKILL it as soon as `ready(run_dir)`, and check that it was killed mid-run (not after it
    finished)."""
    named = "--runs-root" not in argv
    proc = subprocess.Popen([sys.executable, "-m", "esper", *argv, *(["--run-dir", str(run)] if named else [])],
                            env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and proc.poll() is None:
        found = [run] if named else [d for d in run.iterdir() if d.is_dir()] if run.is_dir() else []
        if found and ready(found[0]):
            break
        time.sleep(0.01)
    running = proc.poll() is None
    proc.send_signal(signal.SIGKILL)
    _, err = proc.communicate()
    assert running, f"the run ended before it could be killed: {err.decode()[-2000:]}"


def _episode_row_with(text: str) -> Callable[[Path], bool]:
    def ready(run: Path) -> bool:
        # Only a whole line counts: under load a reader can catch a row half-copied into the file.
        path = run / "episodes.jsonl"
        return path.exists() and any(text in line and line.endswith("\n")
                                     for line in path.read_text().splitlines(keepends=True))
    return ready


def _untimed(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows without `wall_seconds`, the one field no two runs share."""
    return [{k: v for k, v in row.items() if k != "wall_seconds"} for row in rows]


def _untimed_results(path: Path) -> dict[str, Any]:
    """results.json without the episodes' `wall_seconds` and the per-controller mean of them."""
    data: dict[str, Any] = json.loads(path.read_text())
    data["episodes"] = _untimed(data["episodes"])
    data["per_controller"] = {c: {k: v for k, v in s.items() if k != "wall_seconds"}
                              for c, s in data["per_controller"].items()}
    return data


def _same_results(killed: Path, straight: Path) -> None:
    for name in ("episodes.jsonl", "steps.jsonl"):
        # rows hold no timestamps; an episode's wall_seconds is its own measured time
        assert _untimed(read_jsonl(killed / name)) == _untimed(read_jsonl(straight / name)), name
    if (straight / "results.json").exists():
        assert _untimed_results(killed / "results.json") == _untimed_results(straight / "results.json")


def _epochs_once(run: Path) -> Counter[tuple[object, ...]]:
    """EPOCH_COMPLETED events per (controller, episode, epoch): each exactly once after the resume."""
    events = read_jsonl(run / "events.jsonl")
    return Counter((e["data"]["controller"], e["data"]["episode"], e["data"]["epoch"]) for e in events
                   if e["event_type"] == "EPOCH_COMPLETED")


def _rerun(argv: list[str], run: Path, capsys: pytest.CaptureFixture[str]) -> str:
    assert main([*argv, "--run-dir", str(run)]) == 0
    return capsys.readouterr().out


def test_heuristic_killed_mid_run_resumes_to_the_uninterrupted_result(tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    straight, killed = tmp_path / "straight", tmp_path / "killed"
    _rerun(HEURISTIC, straight, capsys)
    _kill_when(HEURISTIC, killed, _episode_row_with('"episode": 0'))
    finished = len(read_jsonl(killed / "episodes.jsonl"))
    assert 1 <= finished < 4
    out = _rerun(HEURISTIC, killed, capsys)
    assert f"{finished} finished episode(s) kept" in out
    _same_results(killed, straight)
    counts = _epochs_once(killed)
    assert set(counts.values()) == {1} and len(counts) == 4 * 4
    config = json.loads((killed / "config.json").read_text())
    assert config["resumes"][0]["from_episodes"] == [finished]
    assert (killed / "checkpoints" / "model_final.pt").exists()


def test_rerun_with_other_arguments_is_refused_and_overwrite_starts_over(tmp_path: Path,
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "h"
    argv = ["train", "heuristic", "--episodes", "1", *SMALL]
    _rerun(argv, run, capsys)
    before = (run / "episodes.jsonl").read_text()
    assert main([*argv, "--run-dir", str(run), "--seed", "7"]) == 2
    err = capsys.readouterr().err
    assert "other arguments (seed: 42 then, 7 now)" in err and "--overwrite" in err
    assert (run / "episodes.jsonl").read_text() == before
    assert main([*argv, "--run-dir", str(run), "--episodes", "2"]) == 0  # more episodes extend the run
    assert [e["episode"] for e in read_jsonl(run / "episodes.jsonl")] == [0, 1]
    capsys.readouterr()
    assert main([*argv, "--run-dir", str(run), "--seed", "7", "--overwrite"]) == 0
    seeds = [e["env_seed"] for e in read_jsonl(run / "episodes.jsonl")]
    assert seeds == [episode_seeds(7, SeedStream.EVALUATION, 0)[0]]
    assert "resumes" not in json.loads((run / "config.json").read_text())


def test_a_run_dir_without_finished_episodes_is_reused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """What a run killed before its first episode leaves (config, events, partial steps) does not block a rerun,
    even with other arguments."""
    run = tmp_path / "h"
    run.mkdir()
    (run / "config.json").write_text(json.dumps({"command": "compare", "argv": [], "config": {"seed": 1}}))
    (run / "events.jsonl").write_text('{"event_type": "TRAINING_STARTED"}\n')
    (run / "steps.jsonl").write_text('{"episode": 0}\n{"epis')
    (run / "tb").mkdir()
    _rerun(["train", "heuristic", "--episodes", "1", *SMALL], run, capsys)
    assert json.loads((run / "config.json").read_text())["command"] == "heuristic"
    assert len(read_jsonl(run / "steps.jsonl")) == 3 and "TRAINING_STARTED" in (run / "events.jsonl").read_text()


@pytest.mark.parametrize("kill_in", ["first phase", pytest.param("static:matched", marks=pytest.mark.slow)])
def test_compare_killed_mid_run_resumes_to_the_uninterrupted_result(kill_in: str, tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """Rerunning the same command continues it without naming a run directory: the default one is named after the
    command's settings, so the rerun finds it, and the comparison ends in that one directory."""
    straight = tmp_path / "straight"
    _rerun(COMPARE, straight, capsys)
    root = tmp_path / "runs"
    command = [*COMPARE, "--runs-root", str(root)]
    _kill_when(command, root, (lambda run: (run / "results.json").exists()) if kill_in == "first phase"
               else _episode_row_with('"controller": "static:matched"'))
    [killed] = list(root.iterdir())
    partial = json.loads((killed / "results.json").read_text())  # written after every finished paired episode
    done = partial["per_controller"]["static"]["episodes"]
    assert done >= 1
    # ... and says that it is unfinished: static:matched runs once the others are done
    assert (partial["complete"], partial["episodes_done"], partial["episodes_planned"]) == (False, done, 3)
    assert partial["pending_controllers"] == ["static:matched"]
    note = f"incomplete: {done} of 3 paired episodes; static:matched still to run"
    csv = (killed / "results.csv").read_text()  # written just before results.json: as far, or one episode further
    assert csv.startswith("# incomplete: ") and "of 3 paired episodes; static:matched still to run" in csv
    capsys.readouterr()
    assert render_report(killed)  # an interrupted comparison can be plotted as it is
    assert note in " ".join(capsys.readouterr().out.split())  # the console wraps long lines
    assert main(command) == 0
    assert "finished episode(s) kept" in capsys.readouterr().out
    final = json.loads((killed / "results.json").read_text())
    assert (final["complete"], final["episodes_done"], final["pending_controllers"]) == (True, 3, [])
    assert (killed / "results.csv").read_text().startswith("controller,")
    assert list(root.iterdir()) == [killed]
    _same_results(killed, straight)
    counts = _epochs_once(killed)
    assert set(counts.values()) == {1} and len(counts) == 4 * 3 * 4
