"""Env-epochs per second of PPO's rollouts (and of a comparison's paired episodes) in process and on worker processes.

Run (a standalone script, not a test):

    .venv/bin/python benchmarks/bench_workers.py                                   # 8 envs: in process, 1, 2 workers
    .venv/bin/python benchmarks/bench_workers.py --workers 0 2 4 8 --group-size 1  # a 16-core machine
    .venv/bin/python benchmarks/bench_workers.py --device cuda:0 --envs 1 4 8 --workers 0 4 8 --group-size 1
    .venv/bin/python benchmarks/bench_workers.py --compare-episodes 4               # also `esper compare`'s episodes

Setup: `TrainingConfig.preset(--preset)` (default `synthetic`: CNN host, 25-epoch episodes shortened to
`--max-epochs`, 192 / 96 samples; λ_p fixed) with `n_envs` = k and `group_size` = `--group-size` (a group, its envs
and its static twin, is what one worker runs, so k / group_size groups bound the useful workers). For every k in
`--envs` and every w in `--workers` (0: the in-process loop) `train_ppo` runs two rollout batches; the figure is the
second batch's `env_epochs_per_second` (k · max_epochs / rollout seconds), so starting workers and loading their data
(the first batch) is left out; `wall s` is the whole run, startup included. Every process (the in-process loop, each
worker, the learner) computes with `--threads` intra-op threads (default 1, esper's default), so every row computes
the same numbers. Ratios: `× in-process` against the in-process loop
at the same k, `× first` against the first row (the grid's k = envs[0] in process).

`--compare-episodes N` then times N paired episodes of static, heuristic and random (run_comparison) in process and
on each w > 0, as env-epochs/s over the whole phase (workers included; paired episodes are independent, so w
workers run w of them side by side).

On a CUDA device the GPU's mean utilization during each run (nvidia-smi, sampled every 0.2 s) is shown too.
Every run of one invocation computes the same logs (see tests/integration/test_workers.py); only time differs.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch
from rich.console import Console
from rich.table import Table

from esper.data.tasks import DataCache, DataOptions, get_task_spec
from esper.evaluation.comparison import parse_controllers, run_comparison
from esper.evaluation.study import evaluation_plan
from esper.simic.ppo.config import TrainingConfig
from esper.simic.ppo.train import PPORun, train_ppo
from esper.storage.rundir import RunDirectory, read_jsonl

FIXED_CHARGE = {"charge": "param", "param_cost": 1.0, "compute_cost": None}
"""The rollouts' reward charges a fixed λ_p instead of a preset's measured `auto` (it changes rewards, not the work a
rollout does)."""


@contextmanager
def gpu_utilization(device: str) -> Iterator[list[float]]:
    """Samples of the GPU's utilization (%) while the block runs (empty off CUDA or without nvidia-smi)."""
    samples: list[float] = []
    if not device.startswith("cuda") or shutil.which("nvidia-smi") is None:
        yield samples
        return
    index = torch.device(device).index or 0
    stop = threading.Event()

    def poll() -> None:
        while not stop.wait(0.2):
            out = subprocess.run(["nvidia-smi", f"--id={index}", "--query-gpu=utilization.gpu",
                                  "--format=csv,noheader,nounits"], capture_output=True, text=True)
            if out.returncode == 0 and out.stdout.strip():
                samples.append(float(out.stdout.strip()))

    thread = threading.Thread(target=poll, daemon=True)
    thread.start()
    try:
        yield samples
    finally:
        stop.set()
        thread.join()


def ppo_rate(config: TrainingConfig, cache: DataCache, root: Path) -> tuple[float, float, float | None]:
    """(second batch's env-epochs/s, wall seconds, mean GPU utilization) of a two-batch run."""
    run_dir = RunDirectory(Path(tempfile.mkdtemp(dir=root)))
    started = time.perf_counter()
    with gpu_utilization(config.execution.device) as samples:
        train_ppo(config, PPORun(run_dir, data=cache))
    wall = time.perf_counter() - started
    rows = read_jsonl(run_dir.path / "history.jsonl")
    return float(rows[-1]["env_epochs_per_second"]), wall, statistics.fmean(samples) if samples else None


def compare_rate(config: TrainingConfig, episodes: int, cache: DataCache, root: Path) -> float:
    """Env-epochs/s of `episodes` paired episodes of static, heuristic and random, workers started included."""
    specs = parse_controllers(["static", "heuristic", "random"])
    plan = evaluation_plan(config)
    run_dir = RunDirectory(Path(tempfile.mkdtemp(dir=root)))
    started = time.perf_counter()
    run_comparison(specs, plan, episodes, cache, run_dir=run_dir, tie_threshold=0.0)
    return episodes * len(specs) * config.episode.max_epochs / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
                                     allow_abbrev=False)
    parser.add_argument("--preset", default="synthetic")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--envs", type=int, nargs="+", default=[8])
    parser.add_argument("--workers", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--max-epochs", type=int, default=5)
    parser.add_argument("--train-samples", type=int)
    parser.add_argument("--val-samples", type=int)
    parser.add_argument("--threads", type=int, default=1, help="intra-op threads of every process (default 1)")
    parser.add_argument("--compare-episodes", type=int, default=0)
    parser.add_argument("--data-dir", type=Path, default=Path(os.environ.get("ESPER_DATA_DIR", "data")))
    args = parser.parse_args()

    base = TrainingConfig.preset(args.preset)
    overrides = {"device": args.device, "max_epochs": args.max_epochs, "group_size": args.group_size,
                 "threads": args.threads, **FIXED_CHARGE}
    if args.train_samples is not None:
        overrides["max_train_samples"] = args.train_samples
    if args.val_samples is not None:
        overrides["max_val_samples"] = args.val_samples
    base = base.with_overrides(**overrides)
    cache = DataCache(DataOptions(data_dir=args.data_dir))
    cache.preload(get_task_spec(base.episode.task), [torch.device(args.device)], ("train", "val", "test"))
    device = torch.cuda.get_device_name(torch.device(args.device)) if args.device.startswith("cuda") else "CPU"
    console = Console(width=120)
    console.print(f"{base.episode.task} ({args.preset} preset), {base.episode.max_epochs}-epoch episodes, caps "
                  f"{base.episode.max_train_samples} / {base.episode.max_val_samples}, group size {args.group_size}; "
                  f"{os.cpu_count()} cores, device {args.device} ({device}), torch {torch.__version__}, "
                  f"{args.threads} intra-op thread(s) per process")

    table = Table(title="PPO rollouts: env-epochs/s of the second batch")
    for column in ("envs", "workers", "env-ep/s", "× in-process", "× first", "wall s", "GPU %"):
        table.add_column(column, justify="right")
    first: float | None = None
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for k in args.envs:
            in_process: float | None = None
            for w in args.workers:
                config = base.with_overrides(n_envs=k, n_episodes=2 * k, workers=w)
                rate, wall, gpu = ppo_rate(config, cache, root)
                first = first or rate
                in_process = rate if w == 0 else in_process
                table.add_row(str(k), "in process" if w == 0 else str(w), f"{rate:.2f}",
                              "—" if in_process is None else f"{rate / in_process:.2f}", f"{rate / first:.2f}",
                              f"{wall:.1f}", "—" if gpu is None else f"{gpu:.0f}")
        console.print(table)
        if args.compare_episodes:
            compare = Table(title=f"{args.compare_episodes} paired episodes of static, heuristic, random")
            for column in ("workers", "env-ep/s", "× in-process"):
                compare.add_column(column, justify="right")
            baseline: float | None = None
            for w in args.workers:
                rate = compare_rate(base.with_overrides(workers=w), args.compare_episodes, cache, root)
                baseline = baseline or rate
                compare.add_row("in process" if w == 0 else str(w), f"{rate:.2f}", f"{rate / baseline:.2f}")
            console.print(compare)


if __name__ == "__main__":
    main()
