"""`esper train ppo`: train the Tamiyo policy with PPO (config-first; resumable)."""

from __future__ import annotations

import argparse
import json
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import Any

from rich.table import Table

from esper.cli.common import (
    EXIT_INTERRUPTED,
    EXIT_OK,
    USER_ERRORS,
    closing_hub,
    console,
    data_options,
    make_hub,
    phase_progress,
    preload_data,
    print_command,
    print_next_steps,
    print_run_start,
)
from esper.cli.config_flags import add_config_flags, config_changes
from esper.cli.options import (
    SCALE_FIELDS,
    add_scale_options,
    add_shared_options,
    add_worker_options,
    one_of,
    run_settings,
)
from esper.data.families import family_task, get_family
from esper.data.tasks import get_task_spec
from esper.evaluation.param_cost import resolve_auto_cost
from esper.evaluation.ppo_runs import TrainingDir, open_training_dir, training_result_lines
from esper.evaluation.studies.paired import WORKER_FIELDS
from esper.execution.devices import env_device_map, resolve_devices
from esper.execution.plugins import loaded_plugins
from esper.execution.workers import WorkerOptions
from esper.leyline.errors import UserInputError
from esper.nissa import ProgressBackend, trim_event_log
from esper.simic.ppo.checkpoint import read_policy_checkpoint, resume_config, saved_config
from esper.simic.ppo.config import PRESETS, TrainingConfig, charge_fields, family_fields
from esper.simic.ppo.train import PPORun, train_ppo
from esper.storage.rundir import checkpoint_file, checkpoints_dir, default_run_dir, run_dir_of
from esper.storage.rundirs import discard_on_error

PRESET_FIELDS = frozenset(k for preset in PRESETS.values() for k in preset)
FLAGS_ELSEWHERE = frozenset({*SCALE_FIELDS, "seed", *WORKER_FIELDS, "threads"})
"""TrainingConfig settings whose flags the shared option groups add (scale and augmentation, seed, workers)."""


def add_ppo_parser(sub: Any) -> None:
    p = sub.add_parser("ppo", help="train the Tamiyo policy with PPO on vectorized environments")
    p.add_argument("--preset", type=one_of(PRESETS, "preset"), choices=sorted(PRESETS),
                   help="hyperparameter preset (default: the preset named after --task if there is one, else cifar10)")
    p.add_argument("--resume", type=Path, help="checkpoint file or run directory (its checkpoints/latest.pt)")
    add_scale_options(p, defaults=None)
    add_config_flags(p, TrainingConfig(), skip=FLAGS_ELSEWHERE, flag_names={"n_episodes": "episodes"},
                     preset_fields=PRESET_FIELDS)
    add_worker_options(p)
    add_shared_options(p, seed_default=None, run_dir_name=("ppo", "<task>"))
    p.set_defaults(func=cmd_train_ppo)


def flag_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The TrainingConfig settings the command line sets, by dotted key (a flag wins over --set of the same setting);
    an unknown or ambiguous key is refused here."""
    return TrainingConfig.dotted(config_changes(TrainingConfig, args))  # the worker flags too, stored by their names


def preset_of(args: argparse.Namespace) -> str:
    """--preset, or the preset of --family's family, or the preset made for --task (a synthetic run must not inherit
    CIFAR-10's settings)."""
    if args.preset is not None:
        return str(args.preset)
    family = flag_overrides(args).get("family")
    if isinstance(family, str):
        return get_family(family).preset
    task = (args.task or "").lower()
    return task if task in PRESETS else "cifar10"


def effective_config(args: argparse.Namespace) -> TrainingConfig:
    """preset → --config-json → flags and --set (a param_cost of "auto" measured, or reused from the cache); --family
    sets the task and sample cap a run across the family has."""
    config = TrainingConfig.preset(preset_of(args))
    if args.config_json is not None:
        config = TrainingConfig.from_json(args.config_json, base=config)
    overrides = flag_overrides(args)
    if isinstance(overrides.get("family"), str):  # a family run owns its charge
        overrides = family_fields(get_family(overrides["family"]), config.reward, overrides)
    else:
        overrides = charge_fields(config.reward, overrides)
    return resolve_auto_cost(config.with_overrides(**overrides), data_options(args), console.print)


def _resume_target(args: argparse.Namespace) -> Path | None:
    """--resume, or an existing run directory of an interrupted PPO run (rerunning the command resumes it)."""
    if args.resume is not None:
        if args.overwrite:
            raise UserInputError("--overwrite starts a new run and --resume continues one: pass only one of them")
        if not args.resume.exists():
            raise FileNotFoundError(f"--resume {args.resume} not found: pass a PPO run directory or a checkpoint file "
                                    f"(e.g. RUN/checkpoints/latest.pt)")
        target = checkpoint_file(args.resume, "latest.pt")
        if not target.is_file():
            raise FileNotFoundError(f"--resume {args.resume}: {target} not found (the run has no checkpoint yet, "
                                    f"so there is nothing to resume); start it again without --resume")
        if args.run_dir is not None and args.run_dir.resolve() != run_dir_of(target).resolve():
            raise UserInputError(f"--resume {args.resume} continues in its own run directory {run_dir_of(target)}; "
                                 f"drop --run-dir {args.run_dir}")
        return target
    latest = None if args.run_dir is None else checkpoints_dir(args.run_dir) / "latest.pt"
    if latest is not None and latest.is_file() and not args.overwrite:
        return latest
    return None


def _config_for_resume(args: argparse.Namespace, checkpoint: Path, requested: TrainingConfig | None) -> TrainingConfig:
    """The checkpoint's config is authoritative; flags may only change the resumable fields (`requested`: the
    command's own config, None under --resume, where the flags apply to the saved one)."""
    saved = saved_config(read_policy_checkpoint(checkpoint), checkpoint)
    if requested is None:
        requested = resolve_auto_cost(saved.with_overrides(**flag_overrides(args)), data_options(args), console.print)
    return resume_config(saved, requested)


def recorded_preset(run_dir: Path) -> str | None:
    """The preset a PPO run directory's config.json says its run started from (a resume reports that one, whatever
    flags it was given)."""
    try:
        preset = json.loads((run_dir / "config.json").read_text(encoding="utf-8"))["runtime"]["preset"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return preset if isinstance(preset, str) else None


def config_table(config: TrainingConfig) -> Table:
    table = Table(title="Effective TrainingConfig", show_header=False)
    for key, value in config.dotted_dict().items():
        table.add_row(key, json.dumps(value))
    return table


def config_summary(config: TrainingConfig, preset: str | None) -> str:
    """One line: the preset and every setting that differs from it (the full table is printed at --telemetry-level
    debug and stored in config.json)."""
    base = (TrainingConfig.preset(preset) if preset in PRESETS else TrainingConfig()).dotted_dict()
    changed = [f"{k}={json.dumps(v)}" for k, v in config.dotted_dict().items() if base.get(k) != v]
    return (f"Config: preset {preset or '—'}" + (f"; changed: {', '.join(changed)}" if changed else "")
            + " (full config in config.json)")


def device_summary(n_envs: int, execution: WorkerOptions) -> str:
    """Env → device as counts per device ("Envs: 4 (cpu×4)"), one line however many envs."""
    mapping = [str(d) for d in env_device_map(n_envs, resolve_devices(execution.device, execution.devices))]
    counts = {d: mapping.count(d) for d in dict.fromkeys(mapping)}
    return f"Envs: {n_envs} ({', '.join(f'{d}×{n}' for d, n in counts.items())})"


class StopAfterStep:
    """First Ctrl+C: finish the current env step and stop (the last batch checkpoint stays); second: abort."""

    def __init__(self) -> None:
        self.requested = False

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True
        console.print("[yellow]Stopping after the current step (Ctrl+C again to abort)...[/yellow]")

    @contextmanager
    def installed(self) -> Iterator[StopAfterStep]:
        """Ctrl+C handled by this object for the duration of the block (the previous handler restored after)."""
        previous = signal.signal(signal.SIGINT, self)
        try:
            yield self
        finally:
            signal.signal(signal.SIGINT, previous)


def print_training_setting(config: TrainingConfig, *, preset: str | None, debug: bool) -> None:
    """The config (in full at debug level) and the envs' devices."""
    console.print(config_table(config) if debug else config_summary(config, preset))
    console.print(device_summary(config.ppo.n_envs, config.execution))


def print_training_start(config: TrainingConfig, progress: ProgressBackend, *, preset: str | None, debug: bool,
                         episodes_done: int) -> None:
    """`print_training_setting`, and the progress display's training phase started."""
    print_training_setting(config, preset=preset, debug=debug)
    ppo, max_epochs = config.ppo, config.episode.max_epochs
    progress.start("training", ppo.total_episodes() * max_epochs, done=episodes_done * max_epochs,
                   round_size=ppo.n_envs)


def compare_hint(config: TrainingConfig, run: Path) -> list[list[str]]:
    """An `esper compare` of the trained policy in exactly the setting it learned in (every setting that changes the
    result, the plugins it was trained with included), on the held-out evaluation seeds of its base seed (a seed stream
    its training never draws from); a policy trained across a family on its first held-out type."""
    episode, reward = config.episode, config.reward
    task, cap = episode.task, episode.max_train_samples
    cost = None if config.family is not None else reward.charged_param_cost()  # a held-out type's is only logged
    charge = [] if reward.charge == "param" else [["--charge", reward.charge]]
    if config.family is not None:
        family = get_family(config.family)
        held = family.held_out_types[0]
        task, cap = family_task(family, held), held.max_train_samples
    groups = [["esper", "compare"], ["--controllers", "static", "heuristic", f"ppo:{run}"], ["--task", task],
              *(["--plugin", p] for p in loaded_plugins() if not p.startswith("ep:")),
              ["--max-epochs", str(episode.max_epochs)], ["--slots", *episode.slots],
              ["--reward-family", reward.reward_family.value], ["--seed", str(config.seed)],
              ["--batch-size", str(episode.batch_size)], ["--lr-schedule", episode.lr_schedule], *charge]
    for flag, value in (("--max-train-samples", cap), ("--max-val-samples", episode.max_val_samples),
                        ("--max-seeds", episode.max_seeds), ("--param-cost", cost),
                        ("--compute-cost", reward.charged_compute_cost()), ("--augment", episode.augment)):
        if value is not None:
            groups.append([flag, str(value)])
    return groups


def cmd_train_ppo(args: argparse.Namespace) -> int:
    requested = effective_config(args) if args.resume is None else None
    if args.run_dir is None and requested is not None:  # the same command finds (and continues) its own directory
        args.run_dir = default_run_dir(args.runs_root, "ppo", requested.episode.task, requested.seed,
                                       run_settings(args))
    checkpoint = _resume_target(args)
    config = _config_for_resume(args, checkpoint, requested) if checkpoint is not None else \
        requested or effective_config(args)
    episodes_done = int(read_policy_checkpoint(checkpoint)["episodes_completed"]) if checkpoint is not None else 0
    execution = config.execution
    cache = preload_data(args, get_task_spec(config.episode.task), resolve_devices(execution.device, execution.devices),
                         ("train", "val"))
    path = run_dir_of(checkpoint) if checkpoint is not None else args.run_dir
    preset = recorded_preset(path) if checkpoint is not None else preset_of(args)
    run_dir, kept = open_training_dir(path, config, checkpoint, cache, preset, TrainingDir(
        args.argv, overwrite=args.overwrite, telemetry_level=args.telemetry_level, note=console.print))
    if kept is not None:
        trim_event_log(path / "events.jsonl", kept)
    print_run_start(run_dir.path, tensorboard=not args.no_tensorboard)
    stop = StopAfterStep()
    with discard_on_error(run_dir, fresh=checkpoint is None, errors=USER_ERRORS):
        hub, progress = make_hub(args, run_dir, config.to_dict())
        with closing_hub(hub, run_dir):
            run = PPORun(run_dir, sink=hub, data=cache, resume_from=checkpoint, should_stop=lambda: stop.requested,
                         progress=phase_progress(progress))
            print_training_start(config, progress, preset=preset, debug=args.telemetry_level == "debug",
                                 episodes_done=episodes_done)
            with stop.installed():  # Ctrl+C: stop after the current step (the last batch checkpoint stays)
                result = train_ppo(config, run)
            for line in training_result_lines(config.ppo.n_episodes, run, result, stopped=stop.requested):
                console.print(line)
    if stop.requested:
        if (run_dir.checkpoints / "latest.pt").exists():
            print_command("Stopped. Resume with: ", [["esper", "train", "ppo"], ["--resume", run_dir.path]])
        else:
            console.print("Stopped before the first rollout batch finished: nothing to resume.")
        return EXIT_INTERRUPTED
    if checkpoint is not None and not result.history:
        console.print("[yellow]Pass a larger --episodes to continue it.[/yellow]")
    print_next_steps(run_dir.path, tensorboard=not args.no_tensorboard, plots=run_dir.path)
    print_command("Compare:       ", compare_hint(config, run_dir.path))
    return EXIT_OK
