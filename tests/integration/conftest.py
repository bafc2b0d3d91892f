"""Fixtures of the integration tests that more than one module uses."""

from __future__ import annotations

from pathlib import Path

import pytest

from integration.workers_support import PPO, run_esper


@pytest.fixture(scope="module")
def in_process_ppo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run_dir = tmp_path_factory.mktemp("ppo") / "in_process"
    done = run_esper(PPO, run_dir)
    assert done.returncode == 0, done.stderr
    return run_dir

