"""Shared pieces of the CUDA tests: a recording telemetry sink and a quick-preset PPO run with an env spy.

The tests themselves skip without (enough) GPUs; these helpers are device-agnostic.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from esper.env.groups import EnvHost
from esper.leyline import TelemetryEvent, TelemetryEventType
from esper.simic.ppo.config import TrainingConfig
from esper.simic.ppo.train import PPORun, PPOTrainingResult, train_ppo
from esper.storage.rundir import RunDirectory


class RecordingSink:
    """A minimal TelemetrySink that keeps every event."""

    def __init__(self) -> None:
        self.events: list[TelemetryEvent] = []

    def emit(self, event: TelemetryEvent) -> None:
        self.events.append(event)

    def wants(self, event_type: TelemetryEventType) -> bool:
        return True

    def escalate(self, epochs: int) -> None:
        pass

    def tick(self) -> None:
        pass

    def of(self, event_type: TelemetryEventType) -> list[TelemetryEvent]:
        return [e for e in self.events if e.event_type == event_type]


@dataclass
class QuickRun:
    sink: RecordingSink
    built: list[dict[str, Any]]  # one entry per env built: device facts captured after its episode
    result: PPOTrainingResult
    path: Path


QuickRunner = Callable[..., QuickRun]


@pytest.fixture
def quick_ppo_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> QuickRunner:
    """Run `train_ppo` (quick preset, synthetic, one env per device in groups of one, 2 epochs, tiny caps)."""

    def run(devices: Sequence[str], *, amp: bool = False) -> QuickRun:
        config = TrainingConfig.preset("quick").with_overrides(
            n_envs=len(devices), devices=list(devices), device=devices[0], n_episodes=len(devices), max_epochs=2,
            max_train_samples=256, max_val_samples=128, amp=amp, group_size=1, param_cost=1.0)
        built: list[dict[str, Any]] = []
        real_finish = EnvHost.finish

        def spy(host: EnvHost) -> Any:
            for env in (env for run, _ in host.runs for env in run.envs):  # at the episode's end: every seed is there
                built.append({
                    "env_id": env.env_id, "spec_device": str(env.spec.device),
                    "param_devices": {str(p.device) for p in env.model.parameters()},
                    "stream": env.ts.stream, "scaler": env.ts.scaler,
                })
            return real_finish(host)

        monkeypatch.setattr(EnvHost, "finish", spy)  # the in-process host: the run keeps its envs in this process
        sink = RecordingSink()
        path = tmp_path / "run"
        run_dir = RunDirectory(path)
        try:
            result = train_ppo(config, PPORun(run_dir, sink=sink))
        finally:
            run_dir.close()
            monkeypatch.undo()
        return QuickRun(sink, built, result, path)

    return run
