"""Throughput of PPO over vectorized, batch-first training environments.

Run (a standalone script, not a test):

    .venv/bin/python benchmarks/bench_vectorized.py [--device cpu|cuda:0] [--envs 1 2 4] [--group-size G] \
        [--max-epochs E] [--train-samples N] [--val-samples N] [--threads T]
    .venv/bin/python benchmarks/bench_vectorized.py --envs 1 2 --max-epochs 2 --train-samples 64 --val-samples 32
                                                                                # a smoke run in seconds

Setup: `TrainingConfig.preset("quick")` (synthetic task, CNN host) with `max_epochs`, `max_train_samples` and
`max_val_samples` overridden (defaults 3, 1024, 256); `--threads` sets torch's intra-op threads. For every k in
`--envs`, `train_ppo` runs with `n_envs = n_episodes = k`, i.e. exactly one rollout batch of k envs
advancing together on one device, in groups of `--group-size` (default 1: every env trains beside its own static
twin, so every k trains twice its envs' models and the ratios compare like with like; every k must be a multiple of
it), into a fresh `RunDirectory` under a temporary directory, telemetry off
(`sink=None`). One `DataCache` is shared by all runs (and filled before timing), so no run pays for building the
dataset; an untimed warm-up run of one group comes first.

Columns:

- `wall s`: end-to-end `time.perf_counter` around the call (agent construction, rollout, PPO update, logs,
  checkpoints). `e2e env-ep/s` = k · max_epochs / wall s; `e2e ×1` is that rate divided by the first (smallest k) run's.
- `rollout s`, `update s`: the history row's `rollout_seconds` (building envs + all epochs of all envs, including
  policy forwards and reward/step logging) and `update_seconds` (PPO updates + observation-normalizer update).
- `env-ep/s`: the history row's `env_epochs_per_second` = k · max_epochs / rollout_seconds (env-steps per second:
  one env-step is one training epoch of one env); `×1` is its ratio to the first run's.
- `PPO share`: update_seconds / (rollout_seconds + update_seconds), the share of wall time spent in PPO updates.
- `batch loads`: the history row's `batch_loads`, train + validation batch materializations on the device over the
  whole rollout. `expected` = (train batches + val batches per epoch) × max_epochs, the count for loading each shared
  batch once per device per epoch. Batch-first means `batch loads` == `expected` for every k (loads do not grow
  with the number of envs; a per-env loader would load k × expected).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from rich.console import Console
from rich.table import Table

from esper.data.tasks import DataCache, DataOptions, get_task_spec
from esper.env import EpochData
from esper.execution.devices import resolve_device
from esper.simic.ppo.config import TrainingConfig
from esper.simic.ppo.train import PPORun, train_ppo
from esper.storage.rundir import RunDirectory


@dataclass(frozen=True)
class Measurement:
    n_envs: int
    wall_seconds: float
    row: dict[str, Any]


def run_once(config: TrainingConfig, n_envs: int, cache: DataCache, root: Path, label: str) -> Measurement:
    """One rollout batch of `n_envs` envs (n_episodes = n_envs), timed end to end."""
    cfg = config.with_overrides(n_envs=n_envs, n_episodes=n_envs)
    run_dir = RunDirectory(root / label)
    try:
        started = time.perf_counter()
        result = train_ppo(cfg, PPORun(run_dir, data=cache))
        if cfg.execution.device.startswith("cuda"):
            torch.cuda.synchronize()
        wall = time.perf_counter() - started
    finally:
        run_dir.close()
    if len(result.history) != 1:
        raise RuntimeError(f"expected one rollout batch for n_envs={n_envs}, got {len(result.history)}")
    return Measurement(n_envs, wall, result.history[0].to_dict())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--device", default="cpu", help="cpu or cuda:N (default cpu)")
    parser.add_argument("--envs", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--group-size", type=int, default=1, help="envs sharing one static twin (default 1)")
    parser.add_argument("--max-epochs", type=int, default=3)
    parser.add_argument("--train-samples", type=int, default=1024)
    parser.add_argument("--val-samples", type=int, default=256)
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's)")
    args = parser.parse_args()
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    env_counts = sorted(set(args.envs))
    if args.group_size < 1 or any(k < 1 or k % args.group_size for k in env_counts):
        parser.error("--envs values must be positive multiples of --group-size")

    config = TrainingConfig.preset("quick").with_overrides(
        max_epochs=args.max_epochs, max_train_samples=args.train_samples, max_val_samples=args.val_samples,
        group_size=args.group_size, device=args.device, devices=None)
    spec = get_task_spec(config.episode.task)
    device = resolve_device(config.execution.device)
    cache = DataCache(DataOptions())
    # Public layout of one epoch on one device: the same iterators train_ppo builds.
    episode = config.episode
    layout = EpochData.build(spec, cache, [device], batch_size=episode.batch_size, seed=config.seed,
                             max_train_samples=episode.max_train_samples, max_val_samples=episode.max_val_samples)
    train_batches, val_batches = len(layout.train), len(layout.val)
    expected_loads = (train_batches + val_batches) * config.episode.max_epochs

    with tempfile.TemporaryDirectory(prefix="bench_vectorized_") as tmp:
        root = Path(tmp)
        run_once(config.with_overrides(max_epochs=2), config.ppo.group_size, cache, root, "warmup")
        results = [run_once(config, k, cache, root, f"envs{k}") for k in env_counts]

    base = results[0]
    base_e2e = base.n_envs * config.episode.max_epochs / base.wall_seconds
    base_rate = float(base.row["env_epochs_per_second"])
    console = Console()
    if console.width < 150:  # keep the table readable when piped or in a narrow terminal
        console = Console(width=150)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    table = Table(title=(
        f"bench_vectorized — torch {torch.__version__}, device {device}, threads {torch.get_num_threads()}, "
        f"quick preset: {episode.task}, group size {config.ppo.group_size}, max_epochs {episode.max_epochs}, "
        f"{episode.max_train_samples} train / {episode.max_val_samples} val samples, batch {episode.batch_size} "
        f"({train_batches} train + {val_batches} val batches/epoch), load avg {load:.2f}"))
    columns = ("envs", "wall s", "e2e env-ep/s", "e2e ×1", "rollout s", "update s", "env-ep/s", "×1",
               "PPO share", "batch loads", "expected", "loads/env")
    for col in columns:
        table.add_column(col, justify="right")
    for m in results:
        rollout, update = float(m.row["rollout_seconds"]), float(m.row["update_seconds"])
        rate = float(m.row["env_epochs_per_second"])
        e2e = m.n_envs * config.episode.max_epochs / m.wall_seconds
        loads = int(m.row["batch_loads"])
        ok = "green" if loads == expected_loads else "red"
        table.add_row(
            str(m.n_envs), f"{m.wall_seconds:.2f}", f"{e2e:.2f}", f"{e2e / base_e2e:.2f}",
            f"{rollout:.2f}", f"{update:.3f}", f"{rate:.2f}", f"{rate / base_rate:.2f}",
            f"{update / (rollout + update):.1%}", f"[{ok}]{loads}[/]", str(expected_loads),
            f"{loads / m.n_envs:.1f}")
    console.print(table)

    batch_first = all(int(m.row["batch_loads"]) == expected_loads for m in results)
    last = results[-1]
    speedup = float(last.row["env_epochs_per_second"]) / base_rate
    shares = [float(m.row["update_seconds"]) / (float(m.row["rollout_seconds"]) + float(m.row["update_seconds"]))
              for m in results]
    console.print(
        f"Interpretation: {last.n_envs} envs step {speedup:.2f}× as many env-epochs/s as {base.n_envs} env "
        f"(rollout rate; > 1 means shared per-batch work is amortized, ≈ 1 that per-env training dominates); "
        f"PPO updates take "
        f"{min(shares):.1%}–{max(shares):.1%} of rollout+update time; batch loads "
        + (f"stay at {expected_loads} for every env count (each shared batch loaded once per device: batch-first)."
           if batch_first else f"[red]differ from the expected {expected_loads}: NOT batch-first[/]."))


if __name__ == "__main__":
    main()
