"""Host-device synchronizations per env-epoch, by phase, of a comparison's paired episode (a diagnostic script).

    .venv/bin/python benchmarks/count_syncs.py                      # static, heuristic, fixed:, grow:, ppo-init
    .venv/bin/python benchmarks/count_syncs.py --epochs 12 --calls  # longer, with the call sites of every read

One paired episode of `--controllers` (one env group, as `esper compare` runs it: every controller on the same host
seed and data, the plain `static` env serving as the static twin) runs `--epochs` epochs in this process on the CPU
under `esper.execution.syncs.SyncCounter`, which counts the reads that would make the host wait for a GPU. `ppo-init`,
registered here, is a freshly initialized PPO policy that samples its actions (the learned controller's decision
path without training one first). Each read is attributed to the phase that made it (`epoch_phases.py` lists
them).

The table gives reads per env-epoch (env-epochs: the deciding envs × epochs) and per group-epoch; `--calls` adds
every (phase, call, call site) with its count.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import torch
from epoch_phases import PHASES, attributed
from rich.console import Console
from rich.table import Table

from esper.data.tasks import DataCache, DataOptions, get_task_spec
from esper.env import driver
from esper.env.features import obs_dim
from esper.evaluation.comparison import parse_controllers
from esper.evaluation.episodes import run_controller_episodes
from esper.evaluation.study import evaluation_plan
from esper.execution.syncs import SyncCounter
from esper.simic.normalization import RunningMeanStd
from esper.simic.ppo.agent import PPOAgent
from esper.simic.ppo.config import TrainingConfig
from esper.simic.ppo.controller import PPOPolicy
from esper.tamiyo import ControllerContext, register_controller


@register_controller("ppo-init", summary="a freshly initialized PPO policy, sampling (benchmarks only)")
def _ppo_init(argument: str | None, context: ControllerContext) -> PPOPolicy:
    ppo = TrainingConfig.preset("quick").ppo
    dim = obs_dim(context.space, ppo.use_telemetry)
    agent = PPOAgent(ppo, seed=context.seed % 2**31, state_dim=dim, space=context.space, device=context.device)
    return PPOPolicy(agent, RunningMeanStd(dim, device=context.device), use_telemetry=ppo.use_telemetry)


def count(controllers: list[str], epochs: int, train_samples: int, val_samples: int, cache: DataCache
          ) -> tuple[SyncCounter, int]:
    """The reads of one paired episode of `controllers`, and its env-epochs."""
    config = TrainingConfig.preset("quick").with_overrides(max_epochs=epochs, max_train_samples=train_samples,
                                                           max_val_samples=val_samples, device="cpu")
    plan = evaluation_plan(config, max_test_samples=val_samples)
    specs = parse_controllers(controllers)
    with driver.EnvPool(plan.workers, cache) as pool, SyncCounter() as counter, \
            attributed(counter.phase, lambda: counter.current_phase):
        run_controller_episodes(specs, plan, 1, pool)
    return counter, len(specs) * epochs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--controllers", nargs="+",
                        default=["static", "heuristic", "fixed:norm@early", "grow:conv_light@mid", "ppo-init"])
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--train-samples", type=int, default=192)
    parser.add_argument("--val-samples", type=int, default=96)
    parser.add_argument("--calls", action="store_true", help="also list every (phase, call, call site)")
    parser.add_argument("--data-dir", type=Path, default=Path(os.environ.get("ESPER_DATA_DIR", "data")))
    args = parser.parse_args()

    torch.set_num_threads(1)
    cache = DataCache(DataOptions(data_dir=args.data_dir))
    counter, env_epochs = count(args.controllers, args.epochs, args.train_samples, args.val_samples, cache)
    task = get_task_spec("synthetic")
    console = Console(width=140)
    console.print(f"{task.name}: one paired episode of {', '.join(args.controllers)}; {args.epochs} epochs on "
                  f"{args.train_samples} / {args.val_samples} samples; {env_epochs} env-epochs, "
                  f"{args.epochs} group-epochs")
    table = Table(title="Host-device synchronizations (counted on CPU)")
    for column in ("phase", "syncs", "per env-epoch", "per group-epoch"):
        table.add_column(column, justify="right")
    totals = counter.by_phase()
    for phase in PHASES:
        n = totals.get(phase, 0)
        table.add_row(phase, str(n), f"{n / env_epochs:.2f}", f"{n / args.epochs:.2f}")
    outside = sum(n for p, n in totals.items() if p not in ("decision", "other"))
    table.add_row("all but decision, other", str(outside), f"{outside / env_epochs:.2f}",
                  f"{outside / args.epochs:.2f}")
    console.print(table)
    if args.calls:
        calls = Table(title="Reads by call site")
        for column in ("phase", "call", "site", "syncs"):
            calls.add_column(column)
        for (phase, call, site), n in sorted(counter.counts.items()):
            calls.add_row(phase, call, site, str(n))
        console.print(calls)


if __name__ == "__main__":
    main()
