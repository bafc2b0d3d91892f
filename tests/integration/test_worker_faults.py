"""PPO, compare and datagen run on the same worker layer, so one suite checks them alike: a worker killed mid-run
stops the run with one line naming the worker and its work, leaves no process behind, and the same command then
resumes to the files of an uninterrupted run; Ctrl+C stops the run with exit 130 and no traceback; a killed run leaves
no worker behind. The default suite kills a worker of each command; Ctrl+C and a killed run it checks on PPO, and
`make test-slow` on compare and datagen too."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from integration.workers_support import PPO, PPO_LOGS, logs, run_env
from unit.datagen.support import without_timestamps


def _workers_of(pid: int) -> list[int]:
    """The spawned worker processes of `pid` (its children running multiprocessing's spawn entry point)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            cmdline = (entry / "cmdline").read_bytes()
        except (OSError, IndexError, ValueError):
            continue
        if ppid == pid and b"spawn_main" in cmdline:
            found.append(int(entry.name))
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _wait_for(predicate: Any, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.1)
    return predicate()


SYNTHETIC = ["--task", "synthetic", "--max-epochs", "4", "--max-train-samples", "64", "--max-val-samples", "32"]


def _episodes_on_disk(out: Path) -> bool:
    """A finished paired episode: a whole row in episodes.jsonl (a reader can catch a row half-copied)."""
    path = out / "episodes.jsonl"
    return path.exists() and path.read_text().endswith("\n")


def _episode_files(out: Path) -> dict[str, Any]:
    """A datagen directory's episode and twin files, without what differs between runs (times, attempts)."""
    files = sorted(p for p in out.rglob("*.json") if p.name != "manifest.json" and not p.name.startswith(".")
                   and p.name != "health_report.json")
    return {str(p.relative_to(out)): without_timestamps({k: v for k, v in json.loads(p.read_text()).items()
                                                          if k != "attempts"}) for p in files}


@dataclass(frozen=True)
class Command:
    """A command that runs workers: its tiny argv, where it writes, when it is mid-run, and what it writes."""

    argv: tuple[str, ...]
    out_flag: str
    mid_run: Callable[[Path], bool]
    files: Callable[[Path], Any]
    names_the_work: str


COMMANDS = {
    "ppo": Command((*PPO,), "--run-dir", lambda out: (out / "checkpoints" / "latest.pt").exists(),
                   lambda out: logs(out, PPO_LOGS), "while running the env group(s) of envs 2-3"),
    "compare": Command(("compare", "--controllers", "static", "heuristic", "random", "--episodes", "4",
                        "--max-test-samples", "64", "--device", "cpu", *SYNTHETIC, "--no-tui", "--no-tensorboard",
                        "--telemetry-level", "minimal"), "--run-dir", _episodes_on_disk,
                       lambda out: logs(out, ("episodes.jsonl", "steps.jsonl")), "while running the env group(s)"),
    "datagen": Command(("datagen", "--envs", "baseline", "--policies", "random", "periodic", "aggressive",
                        "--episodes-per-combo", "2", *SYNTHETIC), "--output-dir",
                       lambda out: any(out.glob("baseline_*.json")), _episode_files, "while computing "),
}


def _start(name: str, out: Path, *extra: str, **popen: Any) -> subprocess.Popen[str]:
    command = COMMANDS[name]
    argv = [sys.executable, "-m", "esper", *command.argv, *extra, command.out_flag, str(out)]
    return subprocess.Popen(argv, env=run_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **popen)


def _finish(name: str, out: Path, *extra: str) -> int:
    """Run the command to its end; its exit code (datagen's tiny dataset fails its health check: 1)."""
    done = _start(name, out, *extra)
    stdout, stderr = done.communicate(timeout=900)
    assert done.returncode in (0, 1), stdout[-2000:] + stderr
    return done.returncode


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory: pytest.TempPathFactory, in_process_ppo: Path
                  ) -> Callable[[str], tuple[Path, int]]:
    """Each command's uninterrupted in-process run and its exit code (PPO's is the module's), made when a test first
    asks."""
    made: dict[str, tuple[Path, int]] = {"ppo": (in_process_ppo, 0)}

    def run(name: str) -> tuple[Path, int]:
        if name not in made:
            out = tmp_path_factory.mktemp(name) / "straight"
            made[name] = out, _finish(name, out)
        return made[name]
    return run


needs_proc = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="finds worker processes through /proc")
PPO_BY_DEFAULT = [pytest.param(name, marks=[] if name == "ppo" else [pytest.mark.slow]) for name in sorted(COMMANDS)]
"""Ctrl+C and a killed run reach the workers through what the three commands share: `esper.cli.main` maps Ctrl+C to
exit 130 for every command (run_guarded), and the worker pool's processes ignore SIGINT and leave when their parent
is gone (tests/unit/execution/test_actors.py). The default suite checks it end to end on PPO, `make test-slow` on
compare and datagen too."""


@needs_proc
@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_a_killed_worker_stops_the_run_and_the_rerun_resumes_exactly(name: str, tmp_path: Path,
                                                                     uninterrupted: Callable[[str], tuple[Path, int]]
                                                                     ) -> None:
    command, out = COMMANDS[name], tmp_path / "killed"
    proc = _start(name, out, "--workers", "2")
    assert _wait_for(lambda: (len(_workers_of(proc.pid)) == 2 and command.mid_run(out)) or proc.poll() is not None,
                     600)
    workers = sorted(_workers_of(proc.pid))
    assert proc.poll() is None and len(workers) == 2, "the run should still be going, with its two workers"
    os.kill(workers[1], signal.SIGKILL)
    killed_at = time.monotonic()
    _, stderr = proc.communicate(timeout=120)
    assert time.monotonic() - killed_at < 30
    assert proc.returncode == 1, stderr
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "worker 1 died" in lines[0] and command.names_the_work in lines[0], stderr
    assert "rerun the same command" in lines[0]
    assert _wait_for(lambda: not any(_alive(p) for p in workers), 15), "a worker outlived its run"

    code = _finish(name, out, "--workers", "2")
    straight, straight_code = uninterrupted(name)
    assert code == straight_code
    assert command.files(out) == command.files(straight)


@needs_proc
@pytest.mark.parametrize("name", PPO_BY_DEFAULT)
def test_ctrl_c_stops_the_run_and_its_workers_without_a_traceback(name: str, tmp_path: Path) -> None:
    """Ctrl+C as a terminal delivers it: to the whole process group, the workers included (they ignore it and leave
    the stopping to the run). The child starts with SIGINT's default disposition whatever the test process
    inherited (a process that starts with SIGINT ignored never raises KeyboardInterrupt)."""
    proc = _start(name, tmp_path / "run", "--workers", "2", start_new_session=True,
                  preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert _wait_for(lambda: len(_workers_of(proc.pid)) == 2 or proc.poll() is not None, 300)
    workers = _workers_of(proc.pid)
    time.sleep(1.0)  # the workers are computing now
    assert proc.poll() is None, "the run ended before it could be interrupted"
    os.killpg(proc.pid, signal.SIGINT)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr and len(stderr.splitlines()) <= 3, stderr
    assert _wait_for(lambda: not any(_alive(p) for p in workers), 15)


@needs_proc
@pytest.mark.parametrize("name", PPO_BY_DEFAULT)
def test_workers_do_not_outlive_a_killed_run(name: str, tmp_path: Path) -> None:
    proc = _start(name, tmp_path / "run", "--workers", "2")
    assert _wait_for(lambda: len(_workers_of(proc.pid)) == 2 or proc.poll() is not None, 300)
    workers = _workers_of(proc.pid)
    assert len(workers) == 2
    proc.send_signal(signal.SIGKILL)
    proc.communicate()
    assert _wait_for(lambda: not any(_alive(p) for p in workers), 30), "workers outlived their killed parent"
