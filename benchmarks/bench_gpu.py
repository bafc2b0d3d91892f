"""How env-epochs per second scale with the envs sharing one device, in one process and on workers (a script).

    .venv/bin/python benchmarks/bench_gpu.py --device cuda:0               # 1, 2, 4, 8 envs; in process and workers
    .venv/bin/python benchmarks/bench_gpu.py --device cuda:0 --study synthetic --study-devices cuda:0 cpu
    .venv/bin/python benchmarks/bench_gpu.py --device cpu --envs 1 2 --max-epochs 2 --train-samples 64 \
        --val-samples 32                                                   # a CPU run in seconds

For every k in `--envs`, PPO rollouts of k envs (`--preset`, default `synthetic`, shortened to `--max-epochs` and the
sample caps; groups of `--group-size`; λ_p fixed) run two batches on `--device`: once in this process, and once on
one worker process per group (`--no-workers` leaves that out). The figure is the second batch's env-epochs/s
(starting workers and loading data fall in the first), so a row measures how well k envs share the device. Every
process computes with `--threads` intra-op threads, so every row computes the same numbers. Ratios: `× 1 env`
against the same placement with the first k, `× first` against the first row. On CUDA the GPU's mean utilization
during each run is shown (nvidia-smi, sampled every 0.2 s).

`--study PRESET` then runs `esper study --preset PRESET` (plus `--study-args`, e.g. "--runs 1 --seeds 2") once per
device of `--study-devices` (default: `--device`) and prints each phase's wall time beside each device's: selection
rounds, training runs, replay sources, evaluation and the final report. Phases run one after another, so a phase's
time is from the end of the one before it to the last file it wrote.
"""

from __future__ import annotations

import argparse
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from bench_workers import FIXED_CHARGE, gpu_utilization, ppo_rate
from rich.console import Console
from rich.table import Table

from esper.data.tasks import DataCache, DataOptions, get_task_spec
from esper.simic.ppo.config import TrainingConfig


def device_name(device: str) -> str:
    """The card's name on CUDA, the processor's core count on CPU."""
    if device.startswith("cuda"):
        return f"{device} ({torch.cuda.get_device_name(torch.device(device))})"
    return f"cpu ({os.cpu_count()} cores)"


def scaling_table(base: TrainingConfig, envs: list[int], workers: bool, cache: DataCache, root: Path) -> Table:
    """Env-epochs/s of each k in `envs`, in process and (when asked) on one worker per group, with ratios."""
    table = Table(title=f"PPO rollouts on {device_name(base.execution.device)}: env-epochs/s of the second batch")
    for column in ("envs", "where", "env-ep/s", "× 1 env", "× first", "wall s", "GPU %"):
        table.add_column(column, justify="right")
    placements = [0, *([None] if workers else [])]  # None: one worker per group
    single: dict[int | None, float] = {}
    first: float | None = None
    for k in envs:
        for placement in placements:
            count = k // base.ppo.group_size if placement is None else placement
            config = base.with_overrides(n_envs=k, n_episodes=2 * k, workers=count)
            rate, wall, gpu = ppo_rate(config, cache, root)
            first = first or rate
            single.setdefault(placement, rate)
            where = "in process" if count == 0 else f"{count} worker{'s' * (count > 1)}"
            table.add_row(str(k), where, f"{rate:.2f}", f"{rate / single[placement]:.2f}", f"{rate / first:.2f}",
                          f"{wall:.1f}", "—" if gpu is None else f"{gpu:.0f}")
    return table


def phase_seconds(study: Path, started: float, finished: float) -> dict[str, float]:
    """Wall seconds of each phase of a finished study directory: from the previous phase's last write to its own
    (every run directory of the study is a phase; `report` is what follows the last one)."""
    ends = {}
    for config in study.rglob("config.json"):
        phase = config.parent
        if phase != study:
            ends[str(phase.relative_to(study))] = max(f.stat().st_mtime for f in phase.rglob("*") if f.is_file())
    seconds, previous = {}, started
    for name, end in sorted(ends.items(), key=lambda item: item[1]):
        seconds[name], previous = end - previous, end
    seconds["report"] = finished - previous
    return seconds


def study_seconds(preset: str, device: str, extra: list[str], root: Path) -> tuple[dict[str, float], float | None]:
    """Each phase's wall seconds of `esper study --preset preset` on `device`, and the mean GPU utilization."""
    run_dir = Path(tempfile.mkdtemp(dir=root)) / "study"
    argv = [sys.executable, "-m", "esper", "study", "--preset", preset, "--device", device, "--run-dir", str(run_dir),
            "--no-tui", "--no-tensorboard", "--telemetry-level", "minimal", *extra]
    started = time.time()
    with gpu_utilization(device) as samples:
        subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)
    return phase_seconds(run_dir, started, time.time()), statistics.fmean(samples) if samples else None


def study_table(preset: str, devices: list[str], extra: list[str], root: Path) -> Table:
    """The study's phases (rows) by device (columns), with the total and the GPU's mean utilization."""
    timed = [study_seconds(preset, device, extra, root) for device in devices]
    table = Table(title=f"esper study --preset {preset}: wall seconds per phase",
                  caption=f"more arguments: {shlex.join(extra)}" if extra else None)
    table.add_column("phase")
    for device in devices:
        table.add_column(device_name(device), justify="right")
    for phase in dict.fromkeys(name for seconds, _ in timed for name in seconds):
        table.add_row(phase, *(f"{seconds[phase]:.1f}" if phase in seconds else "—" for seconds, _ in timed))
    table.add_row("total", *(f"{sum(seconds.values()):.1f}" for seconds, _ in timed))
    table.add_row("GPU %", *("—" if gpu is None else f"{gpu:.0f}" for _, gpu in timed))
    return table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", default="synthetic")
    parser.add_argument("--device", default="cuda:0" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--envs", type=int, nargs="+", default=[1, 2, 4, 8])
    parser.add_argument("--group-size", type=int, default=1)
    parser.add_argument("--no-workers", action="store_true", help="only the in-process loop")
    parser.add_argument("--max-epochs", type=int, default=5)
    parser.add_argument("--train-samples", type=int)
    parser.add_argument("--val-samples", type=int)
    parser.add_argument("--threads", type=int, default=1, help="intra-op threads of every process (default 1)")
    parser.add_argument("--study", metavar="PRESET", help="also time `esper study --preset PRESET`'s phases")
    parser.add_argument("--study-devices", nargs="+", help="devices the study runs on (default: --device)")
    parser.add_argument("--study-args", default="", help="more `esper study` arguments, e.g. \"--runs 1 --seeds 2\"")
    parser.add_argument("--data-dir", type=Path, default=Path(os.environ.get("ESPER_DATA_DIR", "data")))
    args = parser.parse_args()

    overrides = {"device": args.device, "max_epochs": args.max_epochs, "group_size": args.group_size,
                 "threads": args.threads, **FIXED_CHARGE}
    if args.train_samples is not None:
        overrides["max_train_samples"] = args.train_samples
    if args.val_samples is not None:
        overrides["max_val_samples"] = args.val_samples
    base = TrainingConfig.preset(args.preset).with_overrides(**overrides)
    cache = DataCache(DataOptions(data_dir=args.data_dir))
    cache.preload(get_task_spec(base.episode.task), [torch.device(args.device)], ("train", "val", "test"))
    console = Console(width=120)
    episode = base.episode
    console.print(f"{episode.task} ({args.preset} preset), {episode.max_epochs}-epoch episodes, caps "
                  f"{episode.max_train_samples} / {episode.max_val_samples}, group size {base.ppo.group_size}; device "
                  f"{device_name(args.device)}, {os.cpu_count()} cores, torch {torch.__version__}, {args.threads} "
                  f"intra-op thread(s) per process")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        console.print(scaling_table(base, args.envs, not args.no_workers, cache, root))
        if args.study:
            console.print(study_table(args.study, args.study_devices or [args.device], shlex.split(args.study_args),
                                      root))


if __name__ == "__main__":
    main()
