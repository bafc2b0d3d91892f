"""Measure a task's charges for the `gap` reward: what widening the static host buys per parameter (λ_p) and per
unit of training compute (λ_c).

    python benchmarks/calibrate_param_cost.py --task synthetic --episodes 10 --max-epochs 25 \
        --max-train-samples 2048 --max-val-samples 512

Runs the static host at widths 1.0, 1.5 and 2.0 on paired seeds and prints the slopes of final validation accuracy
against the added-parameter ratio and against the added-training-FLOP ratio (pp per 100 %), each with a
paired-bootstrap 95 % interval, ready to be recorded in `esper.env.charges` (`esper.evaluation.param_cost`
holds the method; `--set param_cost='"auto"'` or `--set compute_cost='"auto"'` on `train ppo` and `study` runs the
same measurement and caches it). Use the episode length, sample caps and batch size of the runs whose rewards will
use it: both depend on them.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

from esper.data.optim import LR_SCHEDULES
from esper.data.tasks import DataCache, DataOptions, get_task_spec
from esper.evaluation.comparison import host_params
from esper.evaluation.param_cost import WIDTHS, ParamCostSetting, measure_param_cost


def progress(done: int, total: int, elapsed: float) -> None:
    print(f"paired episode {done}/{total} done · elapsed {elapsed:.0f} s · ETA {elapsed / done * (total - done):.0f} s",
          flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    parser.add_argument("--task", default="synthetic", help="a registered task (e.g. synthetic) or npz:PATH.npz")
    parser.add_argument("--episodes", type=int, default=10)
    parser.add_argument("--max-epochs", type=int, default=25)
    parser.add_argument("--max-train-samples", type=int)
    parser.add_argument("--max-val-samples", type=int)
    parser.add_argument("--data-dir", type=Path, default=Path("data"))
    parser.add_argument("--batch-size", type=int, help="training batch size (default: the task's)")
    parser.add_argument("--lr-schedule", choices=LR_SCHEDULES, default="constant")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--out", type=Path, help="write the measurement as JSON here too")
    args = parser.parse_args()

    task = get_task_spec(args.task)
    setting = ParamCostSetting(task.name, args.max_epochs, args.max_train_samples, args.max_val_samples,
                               args.batch_size or task.default_batch_size, args.lr_schedule, episodes=args.episodes,
                               seed=args.seed)
    measured = measure_param_cost(task, setting, DataCache(DataOptions(data_dir=args.data_dir)),
                                  device=torch.device(args.device), progress=progress)
    for w, r, f, g, m in zip(WIDTHS, measured.added_param_ratios, measured.added_flop_ratios, measured.train_gflops,
                             measured.mean_final_accuracy, strict=True):
        print(f"width {w:.1f}: params {host_params(task, w):,} (+{100 * r:.0f} %), training {g:,.1f} GFLOPs "
              f"(+{100 * f:.0f} %), mean final accuracy {m:.2f} %")
    low, high = measured.ci95
    print(f"slope: {measured.slope:.3f} pp per 100 % added parameters, 95 % CI [{low:.3f}, {high:.3f}]; "
          f"param_cost = {measured.param_cost:.3f}")
    low, high = measured.compute_ci95
    print(f"slope: {measured.compute_slope:.3f} pp per 100 % more training compute, 95 % CI [{low:.3f}, {high:.3f}]; "
          f"compute_cost = {measured.compute_cost:.3f} ({measured.seconds:.0f} s)")
    if args.out is not None:
        record = {**measured.to_dict(), "command": "python " + " ".join(sys.argv)}
        args.out.write_text(json.dumps(record, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
