"""Ray actors change where the work runs, never what a run computes: PPO on two actors writes the in-process logs
(kept apart from test_workers.py so that the two spread over the suite's processes: Ray starts slowly)."""

from __future__ import annotations

from pathlib import Path

import pytest

from integration.workers_support import PPO, PPO_LOGS, logs, run_esper


def test_ray_actors_write_the_in_process_logs(in_process_ppo: Path, tmp_path: Path) -> None:
    pytest.importorskip("ray")
    done = run_esper(PPO, tmp_path / "ray", "--workers", "2", "--executor", "ray")
    assert done.returncode == 0, done.stderr
    assert logs(tmp_path / "ray", PPO_LOGS) == logs(in_process_ppo, PPO_LOGS)

