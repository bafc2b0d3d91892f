"""What every command shares: run directory, telemetry hub, data options, devices, and error → exit-code mapping."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape

from esper.env.rewards import RewardFamily
from esper.leyline import CANONICAL_SLOTS, TelemetryEvent, TelemetryEventType, TelemetryLevel, TelemetrySink
from esper.nissa import NissaHub, build_hub
from esper.runtime.checkpoint import CheckpointFormatError
from esper.runtime.devices import DeviceError
from esper.runtime.readers import DatasetFormatError, DatasetNotFoundError
from esper.runtime.rundir import RunDirectory, RunDirectoryError, default_run_dir
from esper.runtime.tasks import TASKS, DataOptions

EXIT_OK, EXIT_ERROR, EXIT_USAGE, EXIT_PARTIAL, EXIT_INTERRUPTED = 0, 1, 2, 3, 130
USER_ERRORS = (ValueError, DeviceError, DatasetNotFoundError, DatasetFormatError, RunDirectoryError,
               CheckpointFormatError, FileNotFoundError)

# Piped output (CI logs, files) gets a wide fixed width so result tables stay on one line per row.
console = Console(width=None if sys.stdout.isatty() else 160)
err_console = Console(stderr=True, soft_wrap=True)


def add_shared_options(p: argparse.ArgumentParser, *, seed_default: int | None = 42) -> None:
    g = p.add_argument_group("run and telemetry")
    g.add_argument("--run-dir", type=Path, help="run directory (default: <runs-root>/<command>_<task>_<time>_s<seed>)")
    g.add_argument("--runs-root", type=Path, default=Path("runs"), help="parent of default run directories")
    g.add_argument("--data-dir", type=Path, default=Path(os.environ.get("ESPER_DATA_DIR", "data")),
                   help="dataset root (env ESPER_DATA_DIR, default ./data)")
    g.add_argument("--data-path", type=Path, help="text or JSONL file for language-model tasks")
    g.add_argument("--download", action="store_true", help="download CIFAR-10 into --data-dir if it is missing")
    g.add_argument("--telemetry-level", choices=[lv.name.lower() for lv in TelemetryLevel], default="normal")
    g.add_argument("--no-tui", action="store_true", help="plain console lines instead of the live dashboard")
    g.add_argument("--no-tensorboard", action="store_true", help="do not write TensorBoard logs")
    seed_help = f"base seed (default {seed_default})" if seed_default is not None else "base seed (default: config)"
    g.add_argument("--seed", type=int, default=seed_default, help=seed_help)
    g.add_argument("--debug", action="store_true", help="show tracebacks on errors")


def add_episode_options(p: argparse.ArgumentParser, *, episodes: int, task: str = "synthetic") -> None:
    p.add_argument("--task", choices=sorted(TASKS), default=task, type=str.lower)
    p.add_argument("--episodes", type=positive_int, default=episodes)
    p.add_argument("--max-epochs", type=positive_int, default=25)
    p.add_argument("--slots", nargs="+", choices=CANONICAL_SLOTS, default=list(CANONICAL_SLOTS))
    p.add_argument("--max-seeds", type=positive_int, help="seed budget (default: one per enabled slot)")
    p.add_argument("--device", default="auto", help="'auto', 'cpu' or 'cuda:N'")
    p.add_argument("--max-train-samples", type=positive_int, help="use a deterministic prefix of the train split")
    p.add_argument("--max-val-samples", type=positive_int, help="use a deterministic prefix of the val split")
    p.add_argument("--reward-family", choices=[f.value for f in RewardFamily], default=RewardFamily.GAP.value,
                   help="reward computed and logged per decision (gap: against the static twin, the default)")
    p.add_argument("--param-cost", type=non_negative_float,
                   help="gap reward's cost of added parameters, pp per 100 %% (default: the task's measured value)")


def non_negative_float(text: str) -> float:
    value = float(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


def uses_tui(args: argparse.Namespace) -> bool:
    """The live dashboard draws on a terminal unless --no-tui (or telemetry is off)."""
    return not args.no_tui and sys.stdout.isatty() and args.telemetry_level != "off"


def positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def data_options(args: argparse.Namespace) -> DataOptions:
    return DataOptions(data_dir=args.data_dir, data_path=args.data_path, download=args.download)


def open_run_dir(args: argparse.Namespace, command: str, task: str, *, resume: bool = False) -> RunDirectory:
    path = args.run_dir or default_run_dir(args.runs_root, command, task, args.seed)
    return RunDirectory(path, resume=resume)


def make_hub(args: argparse.Namespace, run_dir: RunDirectory, hparams: dict[str, Any]) -> NissaHub:
    """The run's telemetry hub: JSONL always, TensorBoard unless disabled, live TUI on a TTY else console lines."""
    level = TelemetryLevel[args.telemetry_level.upper()]
    tui = uses_tui(args)
    return build_hub(level, run_dir.path, console=not tui, tui=tui, tensorboard=not args.no_tensorboard,
                     hparams=hparams)


def emit(hub: TelemetrySink, event_type: TelemetryEventType, message: str, data: dict[str, Any]) -> None:
    if hub.wants(event_type):
        hub.emit(TelemetryEvent(event_type, message=message, data=data))


@contextmanager
def closing_hub(hub: NissaHub, run_dir: RunDirectory) -> Iterator[NissaHub]:
    try:
        yield hub
    finally:
        hub.close()
        run_dir.close()


def run_guarded(fn: Callable[[argparse.Namespace], int], args: argparse.Namespace) -> int:
    """Map errors to exit codes: 2 for bad input (clear message, no traceback unless --debug), 130 for Ctrl+C."""
    try:
        return fn(args)
    except KeyboardInterrupt:
        err_console.print("[yellow]Interrupted.[/yellow] Completed work in the run directory is kept.")
        return EXIT_INTERRUPTED
    except USER_ERRORS as exc:
        if args.debug:
            raise
        err_console.print(f"[bold red]error:[/bold red] {escape(str(exc))}")  # messages may hold [brackets]
        return EXIT_USAGE
    except Exception as exc:
        if args.debug:
            raise
        err_console.print(f"[bold red]unexpected error:[/bold red] {type(exc).__name__}: {escape(str(exc))} (rerun "
                          f"with --debug for the traceback)")
        return EXIT_ERROR


def print_next_steps(run_dir: Path, *, tensorboard: bool) -> None:
    console.print(f"\nRun directory: [bold]{run_dir}[/bold]")
    if tensorboard:
        console.print(f"TensorBoard:   tensorboard --logdir {run_dir / 'tb'}")
    console.print(f"Plots:         esper report {run_dir}")
