"""`esper study`'s hooks: the study's notes on the console, each phase directory's telemetry hub (JSONL events,
TensorBoard, the live dashboard or progress lines) with its event log cut back to the finished work on a resume, and
Ctrl+C during a training run (finish the current step, keep the last checkpoint, stop the study)."""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from esper.cli.common import console, make_hub, phase_progress
from esper.cli.train_ppo import StopAfterStep, print_training_setting
from esper.evaluation.resume import EventFilter
from esper.evaluation.studies import PhaseTelemetry, StudyHooks
from esper.nissa import trim_event_log
from esper.simic.ppo.config import TrainingConfig
from esper.storage.rundir import RunDirectory

__all__ = ["console_hooks"]


def _note(text: str) -> None:
    console.print(text, soft_wrap=True, markup=False, highlight=False)  # a path or command stays one line to copy


def console_hooks(args: argparse.Namespace, stop: StopAfterStep) -> StudyHooks:
    """The hooks of the command line's flags (telemetry level, dashboard, TensorBoard); `stop` is the Ctrl+C handler
    installed during each training run."""

    @contextmanager
    def telemetry(run_dir: RunDirectory, hparams: dict[str, Any], kept: EventFilter | None
                  ) -> Iterator[PhaseTelemetry]:
        if kept is not None:
            trim_event_log(run_dir.path / "events.jsonl", kept)
        hub, progress = make_hub(args, run_dir, hparams)
        try:
            yield PhaseTelemetry(hub, progress, phase_progress(progress))
        finally:
            hub.close()

    @contextmanager
    def training(config: TrainingConfig, preset: str | None) -> Iterator[None]:
        print_training_setting(config, preset=preset, debug=args.telemetry_level == "debug")
        with stop.installed():
            yield

    return StudyHooks(note=_note, should_stop=lambda: stop.requested, telemetry=telemetry, training=training,
                      telemetry_level=args.telemetry_level)
