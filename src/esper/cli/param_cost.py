"""`param_cost: "auto"` and `compute_cost: "auto"` for the learning commands (`train ppo`, `study`): the charge's λ
measured for the run's task, episode length, sample caps and augmentation before training starts (the static host at
three widths, with a progress line; one measurement gives λ_p and λ_c), cached under the data directory, and reused by
every later run of the same setting. A run across a task family measures λ_p per training type, in that type's own
setting (`esper.simic.ppo.settings` says why)."""

from __future__ import annotations

import argparse

from esper.cli.common import console, data_options
from esper.data.families import family_task, get_family
from esper.data.tasks import DataCache, get_task_spec
from esper.env.charges import AUTO_COST, CHARGES, Charge
from esper.env.setting import EpisodeSetting
from esper.evaluation.param_cost import WIDTHS, ParamCostSetting, Progress, cached_costs
from esper.execution.devices import resolve_device
from esper.simic.ppo.config import TrainingConfig


def _progress(symbol: str) -> Progress:
    def progress(done: int, total: int, elapsed: float) -> None:
        widths = "/".join(f"{w:.1f}" for w in WIDTHS)
        console.print(f"measuring {symbol}: paired episode {done}/{total} of the static host at widths {widths} · "
                      f"elapsed {elapsed:.0f} s · ETA {elapsed / done * (total - done):.0f} s")
    return progress


def _measured(episode: EpisodeSetting, device: str, charge: Charge, task: str, max_train_samples: int | None,
              args: argparse.Namespace, cache: DataCache) -> float:
    """λ of `charge` for `episode`'s setting on `task` at `max_train_samples` (a family's type: its own task and cap),
    measured on `device` or reused from the cache."""
    setting = ParamCostSetting(task, episode.max_epochs, max_train_samples, episode.max_val_samples,
                               episode.batch_size, episode.lr_schedule, augment=episode.augment)
    symbol = CHARGES[charge].symbol
    costs, path, measured = cached_costs(get_task_spec(task), setting, cache, args.data_dir,
                                         device=resolve_device(device), progress=_progress(symbol))
    console.print(f"{symbol} {costs[charge]:.3f} for {task} at {episode.max_epochs} epochs, caps "
                  f"{max_train_samples or 'all'} / {episode.max_val_samples or 'all'}: "
                  f"{'measured now and cached in' if measured else 'reused from'} {path}")
    return costs[charge]


def resolve_auto_cost(config: TrainingConfig, args: argparse.Namespace) -> TrainingConfig:
    """`config` with a measured (or cached) λ in place of "auto" (λ_p across a family: one per training type); any
    other config unchanged."""
    episode, reward, device = config.episode, config.reward, config.execution.device
    if AUTO_COST not in (reward.param_cost, reward.compute_cost):
        return config
    cache = DataCache(data_options(args))
    if reward.compute_cost == AUTO_COST:
        return config.with_overrides(**{"reward.compute_cost": _measured(
            episode, device, "compute", episode.task, episode.max_train_samples, args, cache)})
    if config.family is None:
        return config.with_overrides(**{"reward.param_cost": _measured(
            episode, device, "param", episode.task, episode.max_train_samples, args, cache)})
    family = get_family(config.family)
    costs = {t.name: _measured(episode, device, "param", family_task(family, t), t.max_train_samples, args, cache)
             for t in family.training}
    return config.with_overrides(**{"reward.param_cost": None, "reward.type_param_costs": costs})
