"""Where an env-epoch's time goes in a study preset's setting, and what the memory format saves (a benchmark script).

    .venv/bin/python benchmarks/epoch_costs.py                           # the synthetic preset's setting
    .venv/bin/python benchmarks/epoch_costs.py --preset fashion_mnist --epochs 10
    .venv/bin/python benchmarks/epoch_costs.py --epochs 2 --max-train-samples 64 --max-val-samples 32  # a smoke run

One paired episode of `--controllers` (as `esper compare` runs it: the same host seed and data, the plain `static` env
serving as the static twin) runs in the preset's setting (caps, batch size, episode length unless `--epochs`) in this
process on one intra-op thread, twice: with the CNN hosts' inputs in channels_last (as esper runs) and contiguous.
The default controllers are the synthetic study's chosen best-fixed and best-rule, so the episode has blended seeds
(counterfactuals) and TRAINING seeds (incubator steps and probes).

Each phase (`epoch_phases.py`) is charged the process CPU time spent inside it and not inside a nested phase, so the
figures hold on a busy machine; wall time is shown beside. What the table says about the per-epoch options:
* validation cadence: every epoch validates, because each decision observes this epoch's validation accuracy and
  each reward is paid from it; validating every k-th epoch would save at most (1 − 1/k) of the validation,
  counterfactual and probe rows together;
* counterfactuals and probes: the extra validation forwards that measure each seed's contribution, as a multiple of
  the plain validation forward;
* memory format: the CPU time per env-epoch contiguous over channels_last.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from unittest import mock

import torch
from epoch_phases import PHASES, attributed
from rich.console import Console
from rich.table import Table

from esper.data.tasks import DataCache, DataOptions, get_task_spec
from esper.env import driver
from esper.evaluation.comparison import parse_controllers
from esper.evaluation.episodes import run_controller_episodes
from esper.evaluation.study import evaluation_plan
from esper.kasmina.hosts import CNNHost
from esper.simic.ppo.config import TrainingConfig

CONTROLLERS = ["static", "fixed:conv_light@early,conv_light@mid,depthwise@late",
               "grow:conv_light@early,conv_light@mid,conv_light@late"]


class PhaseClock:
    """Process CPU time and wall time per phase, each charged only to the innermost phase running."""

    def __init__(self) -> None:
        self.cpu: Counter[str] = Counter()
        self.wall: Counter[str] = Counter()
        self._stack = ["other"]
        self._mark = (time.process_time(), time.perf_counter())

    def _charge(self) -> None:
        cpu, wall = time.process_time(), time.perf_counter()
        self.cpu[self._stack[-1]] += cpu - self._mark[0]
        self.wall[self._stack[-1]] += wall - self._mark[1]
        self._mark = (cpu, wall)

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        self._charge()
        self._stack.append(name)
        try:
            yield
        finally:
            self._charge()
            self._stack.pop()

    @property
    def current_phase(self) -> str:
        return self._stack[-1]

    def close(self) -> None:
        self._charge()


def timed_episode(config: TrainingConfig, controllers: list[str], cache: DataCache, *, channels_last: bool
                  ) -> PhaseClock:
    """The phase clock of one paired episode of `controllers` in the setting of `config`."""
    plan = evaluation_plan(config, max_test_samples=config.episode.max_val_samples)
    specs = parse_controllers(controllers)
    clock = PhaseClock()
    layout = contextlib.nullcontext() if channels_last else mock.patch.object(
        CNNHost, "_enter", lambda self, x: x.contiguous())
    with layout, driver.EnvPool(plan.workers, cache) as pool, attributed(clock.phase, lambda: clock.current_phase):
        run_controller_episodes(specs, plan, 1, pool)
    clock.close()
    return clock


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", default="synthetic", help="the study preset whose setting is timed")
    parser.add_argument("--controllers", nargs="+", default=CONTROLLERS)
    parser.add_argument("--epochs", type=int, default=None, help="episode length (default: the preset's)")
    parser.add_argument("--max-train-samples", type=int, default=None, help="training cap (default: the preset's)")
    parser.add_argument("--max-val-samples", type=int, default=None, help="validation cap (default: the preset's)")
    parser.add_argument("--data-dir", type=Path, default=Path(os.environ.get("ESPER_DATA_DIR", "data")))
    args = parser.parse_args()

    torch.set_num_threads(1)
    config = TrainingConfig.preset(args.preset).with_overrides(device="cpu", charge="param", param_cost=0.0,
                                                               compute_cost=None)
    changes = {"max_epochs": args.epochs, "max_train_samples": args.max_train_samples,
               "max_val_samples": args.max_val_samples}
    config = config.with_overrides(**{key: value for key, value in changes.items() if value is not None})
    cache = DataCache(DataOptions(data_dir=args.data_dir))
    episode = config.episode
    cache.preload(get_task_spec(episode.task), [torch.device("cpu")], ("train", "val", "test"))  # in neither timing
    env_epochs = len(args.controllers) * episode.max_epochs
    clocks = {layout: timed_episode(config, args.controllers, cache, channels_last=layout == "channels_last")
              for layout in ("channels_last", "contiguous")}

    console = Console(width=140)
    console.print(f"{episode.task}: one paired episode of {', '.join(args.controllers)}; {episode.max_epochs} epochs "
                  f"on {episode.max_train_samples} / {episode.max_val_samples} samples at batch {episode.batch_size}; "
                  f"{env_epochs} env-epochs in process on 1 thread")
    fast = clocks["channels_last"]
    total = sum(fast.cpu.values())
    table = Table(title="Per env-epoch, channels_last (CPU ms: process time; wall ms beside)")
    for column in ("phase", "CPU ms", "share", "wall ms"):
        table.add_column(column, justify="right")
    for phase in PHASES:
        table.add_row(phase, f"{1000 * fast.cpu[phase] / env_epochs:.1f}", f"{fast.cpu[phase] / total:.1%}",
                      f"{1000 * fast.wall[phase] / env_epochs:.1f}")
    table.add_row("all", f"{1000 * total / env_epochs:.1f}", "100.0%",
                  f"{1000 * sum(fast.wall.values()) / env_epochs:.1f}")
    console.print(table)
    measuring = fast.cpu["validation"] + fast.cpu["counterfactuals"] + fast.cpu["probes"]
    console.print(f"validation with counterfactuals and probes: {measuring / total:.1%} of an env-epoch "
                  f"(validating every 2nd epoch would save at most {measuring / total / 2:.1%}); counterfactuals "
                  f"and probes add {(fast.cpu['counterfactuals'] + fast.cpu['probes']) / fast.cpu['validation']:.2f}× "
                  f"the plain validation forward")
    slow_total = sum(clocks["contiguous"].cpu.values())
    console.print(f"memory format: contiguous / channels_last CPU time per env-epoch = {slow_total / total:.2f}× "
                  f"(train {clocks['contiguous'].cpu['train'] / fast.cpu['train']:.2f}×, validation "
                  f"{clocks['contiguous'].cpu['validation'] / fast.cpu['validation']:.2f}×)")


if __name__ == "__main__":
    main()
