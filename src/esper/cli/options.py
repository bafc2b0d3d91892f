"""The command-line options every command shares, and the bounded number types they parse with: one place that
decides what a flag means, so a setting keeps its name from the flag through the config to the logs."""

from __future__ import annotations

import argparse
import math
import os
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, NoReturn

import torch

from esper.cli.common import EXIT_USAGE
from esper.cli.config_flags import value_type
from esper.data.augment import AUGMENTS, Augment, parse_augment
from esper.data.optim import LR_SCHEDULES
from esper.data.tasks import TASKS, get_task_spec
from esper.env.charges import CHARGES, ComputeCost, ParamCost
from esper.env.rewards import RewardFamily
from esper.env.setting import EpisodeScale
from esper.evaluation.studies.paired import WORKER_FIELDS
from esper.execution.workers import MAX_THREADS, MAX_WORKERS, WorkerOptions
from esper.leyline import (
    CANONICAL_SLOTS,
    TelemetryLevel,
    UserInputError,
    did_you_mean,
)
from esper.leyline.constants import MAX_BATCH, MAX_EPISODE_LENGTH, MAX_SAMPLES
from esper.leyline.seeding import MAX_BASE_SEED
from esper.simic.ppo.ppo_config import MAX_EPISODES
from esper.storage.rundir import RUN_DIR_NAME


class Parser(argparse.ArgumentParser):
    """argparse with one-line usage errors (problem and where to look) instead of the usage block, and no
    abbreviated flags: a prefix that happens to be unique today (`--run` for `--runs-root`) would silently change
    meaning when a flag is added. Subparsers are of this class too (argparse makes them of their parent's)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs["allow_abbrev"] = False
        super().__init__(*args, **kwargs)

    def parse_known_args(self, args: Iterable[str] | None = None, namespace: Any = None) -> tuple[Any, list[str]]:
        """Unknown arguments are refused by the (sub)command that met them, so the error points to the help that
        lists its flags (`esper study --help`, not `esper --help`)."""
        parsed, unknown = super().parse_known_args(args, namespace)
        if unknown:
            self.error(f"unrecognized arguments: {' '.join(unknown)}")
        return parsed, unknown

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"error: {message} (see '{self.prog} --help')\n")


def int_in(low: int, high: int) -> Callable[[str], int]:
    """argparse type: an integer in [low, high] (bounds keep seeds and sizes within what the code can use)."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"must be an integer in [{low}, {high}], got {text}")
        return value
    return parse


def float_in(low: float, high: float) -> Callable[[str], float]:
    """argparse type: a finite number in [low, high] ("inf" and "nan" parse as floats, and are refused here)."""
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
        if not math.isfinite(value) or not low <= value <= high:
            raise argparse.ArgumentTypeError(f"must be a finite number in [{low:g}, {high:g}], got {text}")
        return value
    return parse


def one_of(names: Iterable[str], what: str) -> Callable[[str], str]:
    """argparse type: one of `names` (a preset, a family). argparse's own `choices` check lists them without saying
    which was meant; this one suggests it (pass `choices` too, so --help lists them)."""
    known = sorted(names)

    def parse(text: str) -> str:
        if text not in known:
            raise argparse.ArgumentTypeError(f"unknown {what} '{text}'{did_you_mean(text, known)}; choose from "
                                             f"{', '.join(known)}")
        return text
    return parse


SEED = int_in(0, MAX_BASE_SEED)
EPISODES = int_in(1, MAX_EPISODES)
SAMPLES = int_in(1, MAX_SAMPLES)


def add_plugin_option(p: argparse.ArgumentParser) -> None:
    """`--plugin MODULE`: every command loads the user's modules (and the installed `esper.plugins` entry points)
    before it reads its other arguments, so their blueprints and tasks can be named anywhere."""
    p.add_argument("--plugin", action="append", default=[], metavar="MODULE",
                   help="a module that registers blueprints or tasks: an importable name or a .py file (repeatable; "
                        "installed 'esper.plugins' entry points load always)")


def plugin_arguments(argv: Sequence[str]) -> argparse.Namespace:
    """The --plugin (and --debug) arguments of a command line, read before its parser exists: the parser's task
    names and the controllers' blueprints depend on what the plugins register."""
    early = argparse.ArgumentParser(add_help=False, allow_abbrev=False, exit_on_error=False)
    early.add_argument("--plugin", action="append", default=[])
    early.add_argument("--debug", action="store_true")
    try:
        return early.parse_known_args(argv)[0]
    except argparse.ArgumentError:  # a bare `--plugin`: the command's own parser refuses it with its message
        return argparse.Namespace(plugin=[], debug=False)


def task_name(text: str, canonical: Callable[[str], str] = lambda text: get_task_spec(text).name) -> str:
    """argparse type: a task (a registered name in any case, a plugin's included, or a form such as npz:PATH.npz),
    as its `canonical` name."""
    try:
        return canonical(text)
    except UserInputError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def task_help(default: str | None = None) -> str:
    shown = f" (default {default})" if default is not None else ""
    return f"the task: {', '.join(TASKS.usages())}{shown}; a plugin's tasks with --plugin"


def add_shared_options(p: argparse.ArgumentParser, *, seed_default: int | None = 42,
                       run_dir_name: tuple[str, str]) -> None:
    """Plugin, run-directory, data and telemetry flags. `run_dir_name`: (command, what names the run) as the default
    run directory spells them, e.g. ("compare", "<task>"), so --help shows the name the command really chooses."""
    add_plugin_option(p)
    command, named_by = run_dir_name
    default_name = RUN_DIR_NAME.format(command=command, task=named_by, seed="<seed>", digest="<digest>")
    g = p.add_argument_group("run and telemetry")
    g.add_argument("--run-dir", type=Path,
                   help=f"run directory (default: <runs-root>/{default_name}; the digest names every setting that "
                        f"changes the results, so rerunning the same command finds the same directory)")
    g.add_argument("--runs-root", type=Path, default=Path("runs"), help="parent of default run directories")
    g.add_argument("--overwrite", action="store_true",
                   help="replace an existing run directory instead of resuming or refusing it")
    g.add_argument("--data-dir", type=Path, default=Path(os.environ.get("ESPER_DATA_DIR", "data")),
                   help="dataset root (env ESPER_DATA_DIR, default ./data)")
    g.add_argument("--data-path", type=Path, help="text or JSONL file for language-model tasks")
    g.add_argument("--download", action="store_true", help="download CIFAR-10 into --data-dir if it is missing")
    g.add_argument("--telemetry-level", choices=[lv.name.lower() for lv in TelemetryLevel], default="normal",
                   help="which events are recorded and printed (TensorBoard, progress and run files are unaffected)")
    g.add_argument("--no-tui", action="store_true", help="plain console lines instead of the live dashboard")
    g.add_argument("--no-tensorboard", action="store_true", help="do not write TensorBoard logs")
    seed_help = f"base seed (default {seed_default})" if seed_default is not None else "base seed (default: config)"
    g.add_argument("--seed", type=SEED, default=seed_default, help=seed_help)
    g.add_argument("--debug", action="store_true", help="show tracebacks on errors")


SCALE_FIELDS = tuple(EpisodeScale.model_fields)
"""The scale-down flags every command that trains or evaluates episodes takes (`--task`, `--max-epochs`,
`--max-train-samples`, `--max-val-samples`, `--augment`): each flag's dest is the `EpisodeScale` field it sets (of
every command's `EpisodeSetting`, datagen's `GenerateOptions` and PPO's `episode`), so one name carries a setting from
the flag through the config to the logs."""


def _augment(text: str) -> Augment:
    """argparse type: an augmentation (`none`, `crop`, `flip`, `crop,flip` in any order)."""
    try:
        return parse_augment(text)
    except UserInputError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def augment_choice(args: argparse.Namespace) -> Augment | None:
    """--augment, or None where it was not given (the task's own augmentation)."""
    return getattr(args, "augment", None)


def scale_changes(args: argparse.Namespace) -> dict[str, Any]:
    """The `EpisodeScale` fields the scale flags give (one not given: absent, so its field keeps the command's base
    value)."""
    return {name: getattr(args, name) for name in SCALE_FIELDS if getattr(args, name, None) is not None}


def add_scale_options(p: argparse.ArgumentParser, *, defaults: tuple[str, int] | None, task_note: str = "",
                      accept_task: Callable[[str], str] = task_name) -> None:
    """The SCALE_FIELDS flags and --augment. `defaults`: the task and episode length of a command without a preset
    (it uses all of every split unless capped); None: the command's preset decides all four. `task_note` and
    `accept_task` (an argparse type giving the canonical name) narrow the tasks a command accepts. --augment is in the
    arguments only when given, so the default run directory of a command that does not give it is the one it always
    was."""
    task, max_epochs = defaults if defaults is not None else (None, None)
    preset = "the preset's"
    g = p.add_argument_group("task and scale")
    g.add_argument("--task", type=accept_task, default=task, metavar="TASK",
                   help=task_help(task or preset) + task_note)
    g.add_argument("--max-epochs", type=int_in(2, MAX_EPISODE_LENGTH), default=max_epochs,
                   help=f"episode length; decisions follow epochs 1 .. T-1 (default: {max_epochs or preset})")
    for split in ("train", "val"):
        g.add_argument(f"--max-{split}-samples", type=SAMPLES,
                       help=f"use a subset of the {split} split, drawn per episode from its data seed (default: "
                            f"{preset if defaults is None else 'all of it'})")
    g.add_argument("--augment", type=_augment, default=argparse.SUPPRESS, metavar="|".join(AUGMENTS),
                   help="the training batches' augmentation: random crops, random horizontal flips, both or none "
                        "(default: the task's own, none for your own data; docs/cli.md lists each task's)")


def add_episode_options(p: argparse.ArgumentParser, *, episodes: int, task: str = "synthetic") -> None:
    add_scale_options(p, defaults=(task, 25))
    p.add_argument("--episodes", type=EPISODES, default=episodes)
    add_setting_options(p)


def add_setting_options(p: argparse.ArgumentParser) -> None:
    """The flags of an episode's setting beyond its scale (slots, seed budget, device, batch, schedule, reward), as
    the episode commands (`episode_plan`) read them."""
    p.add_argument("--slots", nargs="+", choices=CANONICAL_SLOTS, default=list(CANONICAL_SLOTS))
    p.add_argument("--max-seeds", type=int_in(1, len(CANONICAL_SLOTS)),
                   help="seed budget (default: one per enabled slot)")
    p.add_argument("--device", default="auto", help="'auto', 'cpu' or 'cuda:N'")
    p.add_argument("--max-test-samples", type=SAMPLES,
                   help="score final models on a subset of the test split (default: all of it)")
    p.add_argument("--batch-size", type=int_in(1, MAX_BATCH),
                   help="training batch size (default: the task's)")
    p.add_argument("--lr-schedule", choices=LR_SCHEDULES, default="constant",
                   help="learning rates per epoch: constant, or annealed to 0 over the episode (cosine)")
    p.add_argument("--reward-family", choices=[f.value for f in RewardFamily], default=RewardFamily.GAP.value,
                   help="reward computed and logged per decision (gap: against the static twin, the default)")
    p.add_argument("--charge", choices=list(CHARGES), default="param",
                   help="what the gap reward charges growth: added parameters (--param-cost λ_p, and a small cost "
                        "per intervention) or training compute beyond the static twin (--compute-cost λ_c)")
    p.add_argument("--param-cost", type=value_type(ParamCost, "param_cost"),
                   help="gap reward's cost of added parameters, pp per 100 %% "
                        "(default: the task's value measured at the nearest --max-train-samples; where none is, "
                        "the term is not charged, since nothing learns from these commands' reward)")
    p.add_argument("--compute-cost", type=value_type(ComputeCost, "compute_cost"),
                   help="with --charge compute: gap reward's cost of training compute, pp per 100 %% more than the "
                        "static twin's (default: the task's value measured at the nearest --max-train-samples, else "
                        "not charged)")


def add_worker_options(p: argparse.ArgumentParser) -> None:
    """Where the work runs, the same flags on every command that runs workers. Placement only: a fixed-seed CPU run
    writes the same files with any number of workers."""
    g = p.add_argument_group("parallel workers")
    g.add_argument("--workers", type=int_in(0, MAX_WORKERS),
                   help="spread the work (env groups, paired episodes, datagen's twins and episodes) over N worker "
                        "processes or Ray actors (default 0: everything in this process)")
    g.add_argument("--executor", choices=["process", "ray"],
                   help="local worker processes (default) or Ray actors ('pip install esper[dist]')")
    g.add_argument("--ray-address", help="an existing Ray cluster (default: a local one, started for the run)")
    g.add_argument("--threads", type=int_in(1, MAX_THREADS),
                   help="torch intra-op threads of every process of the run (default 1; the numbers depend on it, "
                        "so use --workers, not threads, to put more cores to work)")




def worker_options(args: argparse.Namespace, devices: Iterable[str | torch.device]) -> WorkerOptions:
    """The worker flags as options (an unset flag keeps the default) for work on the env `devices` (Ray actors share
    the CUDA devices among them)."""
    given = {name: getattr(args, name) for name in (*WORKER_FIELDS, "threads") if getattr(args, name) is not None}
    return WorkerOptions.from_dict({**given, "devices": [str(d) for d in devices]})


PRESENTATION = frozenset({"run_dir", "runs_root", "overwrite", "no_tui", "no_tensorboard", "telemetry_level", "debug",
                          "argv", "func", *WORKER_FIELDS})
"""Arguments that change how a run is shown or where it computes, never what it computes."""


def run_settings(args: argparse.Namespace) -> dict[str, Any]:
    """The arguments that decide what a command computes: the same command has the same settings, so it finds the
    same default run directory."""
    return {k: v for k, v in sorted(vars(args).items()) if k not in PRESENTATION}
