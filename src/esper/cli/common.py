"""What every command shares at run time: its consoles, data loading, the telemetry hub and progress display, the
printed commands and next steps, and the error → exit-code mapping (the shared flags: `esper.cli.options`)."""

from __future__ import annotations

import argparse
import os
import shlex
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TextIO

import torch
from rich.cells import cell_len
from rich.console import Console
from rich.text import Text

from esper.data.readers import DataWarning, Split
from esper.data.tasks import DataCache, DataOptions, TaskSpec
from esper.evaluation.run_data import load_splits
from esper.execution.devices import DeviceError
from esper.execution.workers import WorkerFailed
from esper.leyline import (
    TelemetryEventType,
    TelemetryLevel,
    TelemetrySink,
    UserInputError,
    emit_if_wanted,
)
from esper.nissa import NissaHub, ProgressBackend, build_hub
from esper.storage.rundir import RunDirectory
from esper.storage.rundirs import USER_ERRORS, save_traceback, saved_traceback

EXIT_OK, EXIT_ERROR, EXIT_USAGE, EXIT_PARTIAL, EXIT_INTERRUPTED = 0, 1, 2, 3, 130

# Piped output (CI logs, files) gets a wide fixed width so result tables stay on one line per row.
console = Console(width=None if sys.stdout.isatty() else 160)
err_console = Console(stderr=True, soft_wrap=True)


def uses_tui(args: argparse.Namespace) -> bool:
    """The live dashboard draws on a terminal unless --no-tui."""
    return not args.no_tui and sys.stdout.isatty()


def data_options(args: argparse.Namespace) -> DataOptions:
    """Data options; a --data-path that cannot be read fails here, naming the file, before anything is written."""
    path = args.data_path
    if path is not None:
        if not path.exists():
            raise FileNotFoundError(f"--data-path {path} does not exist: pass a text or JSONL file")
        if not path.is_file():
            raise UserInputError(f"--data-path {path} is not a file: pass a text or JSONL file")
        if not os.access(path, os.R_OK):
            raise PermissionError(f"--data-path {path} is not readable: check its permissions")
    return DataOptions(data_dir=args.data_dir, data_path=path, download=args.download)


def preload_data(args: argparse.Namespace, task: TaskSpec, devices: Sequence[torch.device],
                 splits: tuple[Split, ...]) -> DataCache:
    """Load every split a run needs before anything is written (`load_splits` of the data flags)."""
    return load_splits(data_options(args), task, devices, splits, console.print)


def make_hub(args: argparse.Namespace, run_dir: RunDirectory, hparams: dict[str, Any]
             ) -> tuple[NissaHub, ProgressBackend]:
    """The run's telemetry hub (JSONL always, TensorBoard unless disabled, live TUI on a TTY else console lines) and
    its progress display (in the TUI header, a bar on a terminal without it, periodic lines otherwise)."""
    level = TelemetryLevel[args.telemetry_level.upper()]
    tui = uses_tui(args)
    progress = ProgressBackend("none" if tui else "bar" if console.is_terminal else "lines", console)
    hub = build_hub(level, run_dir.path, console=not tui, tui=tui, tensorboard=not args.no_tensorboard,
                    hparams=hparams, progress=progress, screen=console)
    return hub, progress


def phase_progress(progress: ProgressBackend) -> Callable[[str, int, int], None]:
    """`progress(phase, done, total)` for library phases that emit no events (distillation, fitted-Q evaluation);
    the training phase counts env-epochs, the others steps."""
    return lambda phase, done, total: progress.phase(phase, done, total,
                                                     unit="env-epochs" if phase == "training" else "steps")


def emit(hub: TelemetrySink, event_type: TelemetryEventType, message: str, data: dict[str, Any]) -> None:
    emit_if_wanted(hub, event_type, message, data)


@contextmanager
def closing_hub(hub: NissaHub, run_dir: RunDirectory) -> Iterator[NissaHub]:
    try:
        yield hub
    finally:
        hub.close()
        run_dir.close()


def describe_os_error(exc: OSError) -> str:
    """"<what the system said>: <file>" plus the usual fix, for file system errors that carry no message of ours."""
    if exc.strerror is None:  # raised by esper with its own message
        return str(exc)
    where = f": {exc.filename}" if exc.filename else ""
    return f"{exc.strerror}{where} (check that the path exists, is of the right kind, and is writable)"


@contextmanager
def data_warnings_as_lines() -> Iterator[None]:
    """Inside the block, a `DataWarning` (data a run leaves out) shows as one line, `warning: ...`, the way errors
    show; other warnings as Python shows them."""
    previous = warnings.showwarning

    def show(message: Warning | str, category: type[Warning], filename: str, lineno: int, file: TextIO | None = None,
             line: str | None = None) -> None:
        if issubclass(category, DataWarning):
            err_console.print(Text("warning: ", style="bold yellow") + Text(" ".join(str(message).split())))
        else:
            previous(message, category, filename, lineno, file, line)

    warnings.showwarning = show
    try:
        yield
    finally:
        warnings.showwarning = previous


def run_guarded(fn: Callable[[argparse.Namespace], int], args: argparse.Namespace) -> int:
    """Map errors to exit codes: 2 for bad input (clear message, no traceback unless --debug), 130 for Ctrl+C."""
    try:
        return fn(args)
    except KeyboardInterrupt:
        err_console.print("[yellow]Interrupted.[/yellow] Completed work in the run directory is kept; rerun the "
                          "same command to continue it.")
        return EXIT_INTERRUPTED
    except USER_ERRORS as exc:
        if args.debug:
            raise
        message = describe_os_error(exc) if isinstance(exc, OSError) else str(exc)
        if isinstance(exc, DeviceError):
            message += " (pass --device cpu, or a cuda:N this machine has)"
        err_console.print(Text("error: ", style="bold red") + Text(" ".join(message.split())))
        return EXIT_USAGE
    except WorkerFailed as exc:  # the machine's fault, not the code's: no traceback to report
        err_console.print(Text("error: ", style="bold red") + Text(
            f"{' '.join(str(exc).split())}; the work in flight was discarded: rerun the same command to continue"))
        return EXIT_ERROR
    except Exception as exc:
        if args.debug:
            raise
        path = saved_traceback(exc) or save_traceback(
            exc, Path(tempfile.gettempdir()) / f"esper-traceback-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.txt")
        message = " ".join(str(exc).split())
        err_console.print(Text("unexpected error: ", style="bold red") + Text(
            f"{type(exc).__name__}: {message}. This is a bug in esper, not in your input; the traceback is in "
            f"{path} (please attach it to a bug report)"))
        return EXIT_ERROR


CommandGroups = Sequence[Sequence[str | Path]]
"""A command line as groups of arguments (the program, then each flag with its values): where a printed command
must break, it breaks between groups."""


def command_text(groups: CommandGroups, *, width: int, label: str = "") -> str:
    """`label` and the command, each argument shell-quoted, so that pasting it runs it: broken only between `groups`,
    every broken line ending in ` \\` and the next aligned under the first; no line is wider than `width` unless a
    single group is (an argument is never split)."""
    parts = [shlex.join(map(str, group)) for group in groups if group]
    lines = [label + parts[0]]
    for part in parts[1:]:
        if cell_len(lines[-1]) + cell_len(part) + 3 <= width:  # " " + part, and room for a later " \\"
            lines[-1] += " " + part
        else:
            lines[-1] += " \\"
            lines.append(" " * cell_len(label) + part)
    return "\n".join(lines)


def print_command(label: str, groups: CommandGroups) -> None:
    """Print a command to copy (`command_text` at the console's width): rich itself never wraps or styles it."""
    console.print(command_text(groups, width=console.width, label=label), soft_wrap=True, markup=False,
                  highlight=False)


def print_run_start(run_dir: Path, *, tensorboard: bool) -> None:
    """Where a run writes, printed before it starts, so a long run can be watched (TensorBoard) from its start."""
    watch = f" (watch it: {shlex.join(['tensorboard', '--logdir', str(run_dir / 'tb')])})" if tensorboard else ""
    console.print(Text("Run directory: ") + Text(str(run_dir), style="bold") + Text(watch),
                  soft_wrap=True)  # one line, to copy as is


def print_next_steps(run_dir: Path, *, tensorboard: bool, plots: Path | None) -> None:
    """Where the run is, and the commands that show it (`plots`: the directory `esper report` can draw, if any)."""
    console.print(Text("\nRun directory: ") + Text(str(run_dir), style="bold"), soft_wrap=True)
    if tensorboard:
        print_command("TensorBoard:   ", [["tensorboard"], ["--logdir", run_dir / "tb"]])
    if plots is not None:
        print_command("Plots:         ", [["esper", "report", plots]])
