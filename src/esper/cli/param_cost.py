"""`param_cost: "auto"` for the learning commands (`train ppo`, `study`): λ_p measured for the run's task, episode
length, sample caps and augmentation before training starts (the static host at three widths, with a progress line),
cached under the data directory, and reused by every later run of the same setting. A run across a task family
measures one per training type, in that type's own setting (`esper.simic.ppo.settings` says why)."""

from __future__ import annotations

import argparse

from esper.cli.common import console, data_options
from esper.evaluation.param_cost import WIDTHS, ParamCostSetting, cached_param_cost
from esper.runtime.devices import resolve_device
from esper.runtime.families import family_task, get_family
from esper.runtime.param_costs import AUTO_PARAM_COST
from esper.runtime.tasks import DataCache, get_task_spec
from esper.simic.ppo.config import TrainingConfig


def _progress(done: int, total: int, elapsed: float) -> None:
    widths = "/".join(f"{w:.1f}" for w in WIDTHS)
    console.print(f"measuring λ_p: paired episode {done}/{total} of the static host at widths {widths} · elapsed "
                  f"{elapsed:.0f} s · ETA {elapsed / done * (total - done):.0f} s")


def _measured(config: TrainingConfig, task: str, max_train_samples: int | None, args: argparse.Namespace,
              cache: DataCache) -> float:
    setting = ParamCostSetting(task, config.max_epochs, max_train_samples, config.max_val_samples, config.batch_size,
                               config.lr_schedule, augment=config.augment)
    value, path, measured = cached_param_cost(get_task_spec(task), setting, cache, args.data_dir,
                                              device=resolve_device(config.device), progress=_progress)
    console.print(f"λ_p {value:.3f} for {task} at {config.max_epochs} epochs, caps {max_train_samples or 'all'} / "
                  f"{config.max_val_samples or 'all'}: {'measured now and cached in' if measured else 'reused from'} "
                  f"{path}")
    return value


def resolve_auto_param_cost(config: TrainingConfig, args: argparse.Namespace) -> TrainingConfig:
    """`config` with a measured (or cached) λ_p in place of "auto" (across a family, one per training type); any
    other config unchanged."""
    if config.param_cost != AUTO_PARAM_COST:
        return config
    cache = DataCache(data_options(args))
    if config.family is None:
        return config.with_overrides(param_cost=_measured(config, config.task, config.max_train_samples, args, cache))
    family = get_family(config.family)
    costs = {t.name: _measured(config, family_task(family, t), t.max_train_samples, args, cache)
             for t in family.training}
    return config.with_overrides(param_cost=None, type_param_costs=costs)
