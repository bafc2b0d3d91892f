"""Measure a task's parameter cost λ_p for the `gap` reward: what widening the static host buys per parameter.

    python benchmarks/calibrate_param_cost.py --task synthetic --episodes 10 --max-epochs 25 \
        --max-train-samples 2048 --max-val-samples 512

Runs the static host at widths 1.0, 1.5 and 2.0 on paired seeds (the same seeds and data order for each width),
fits mean final validation accuracy against the added-parameter ratio p = params(w) / params(1) − 1 by least
squares, and prints the slope (pp per 100 % of added parameters) with a paired-bootstrap 95 % interval over
episodes, ready to be recorded in `esper.runtime.param_costs`. Use the same episode length and sample caps as the
runs whose rewards will use it: λ_p depends on them.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from pathlib import Path

import torch

from esper.env.driver import EnvPool
from esper.evaluation.comparison import host_params, parse_controllers
from esper.evaluation.episodes import EpisodePlan, run_controller_episodes
from esper.leyline import CANONICAL_SLOTS
from esper.runtime.tasks import TASKS, DataCache, DataOptions, get_task_spec

WIDTHS = (1.0, 1.5, 2.0)


def slope(xs: list[float], ys: list[float]) -> float:
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum((x - mx) ** 2 for x in xs)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--task", choices=sorted(TASKS), default="synthetic")
    parser.add_argument("--episodes", type=int, default=10)
    parser.add_argument("--max-epochs", type=int, default=25)
    parser.add_argument("--max-train-samples", type=int)
    parser.add_argument("--max-val-samples", type=int)
    parser.add_argument("--data-dir", type=Path, default=Path("data"))
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--out", type=Path, help="write the measurement as JSON here too")
    args = parser.parse_args()

    task = get_task_spec(args.task)
    devices = [torch.device(args.device)]
    plan = EpisodePlan(task=task, slots=tuple(CANONICAL_SLOTS), max_epochs=args.max_epochs, max_seeds=None,
                       seed=args.seed, devices=devices, batch_size=task.default_batch_size,
                       max_train_samples=args.max_train_samples, max_val_samples=args.max_val_samples,
                       reward_family="contribution")
    cache = DataCache(DataOptions(data_dir=args.data_dir))
    specs = parse_controllers([f"static:{w}" for w in WIDTHS])
    started = time.perf_counter()
    def report(episode: int, finished: object, models: object) -> None:
        elapsed = time.perf_counter() - started
        eta = elapsed / (episode + 1) * (args.episodes - episode - 1)
        print(f"paired episode {episode + 1}/{args.episodes} done · elapsed {elapsed:.0f} s · ETA {eta:.0f} s",
              flush=True)

    with EnvPool(plan.workers, cache) as pool:
        results = run_controller_episodes(specs, plan, args.episodes, pool, on_episode=report)
    seconds = time.perf_counter() - started

    base = host_params(task, 1.0)
    ratios = [host_params(task, w) / base - 1.0 for w in WIDTHS]
    per_width = [[r.final_accuracy for r in results if r.controller == s.label] for s in specs]
    means = [statistics.fmean(acc) for acc in per_width]
    fitted = slope(ratios, means)
    rng = random.Random(args.seed)
    boot = sorted(slope(ratios, [statistics.fmean(acc[i] for i in idx) for acc in per_width])
                  for idx in ([rng.randrange(args.episodes) for _ in range(args.episodes)] for _ in range(1000)))
    command = "python " + " ".join(sys.argv)
    record = {"task": args.task, "param_cost": max(fitted, 0.0), "slope": fitted, "ci95": [boot[25], boot[974]],
              "widths": list(WIDTHS), "added_param_ratios": ratios, "mean_final_accuracy": means,
              "episodes": args.episodes, "seconds": seconds, "command": command}
    for w, r, m, acc in zip(WIDTHS, ratios, means, per_width, strict=True):
        print(f"width {w:.1f}: params {host_params(task, w):,} (+{100 * r:.0f} %), final accuracy {m:.2f} % "
              f"(sd {statistics.pstdev(acc):.2f}, {len(acc)} episodes)")
    print(f"slope: {fitted:.3f} pp per 100 % added parameters, 95 % CI [{boot[25]:.3f}, {boot[974]:.3f}]; "
          f"param_cost = {record['param_cost']:.3f} ({seconds:.0f} s)")
    if args.out is not None:
        args.out.write_text(json.dumps(record, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
