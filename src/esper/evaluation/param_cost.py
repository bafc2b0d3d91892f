"""Measuring the `gap` reward's charges: what widening the static host buys per parameter (λ_p) and per unit of
training compute (λ_c).

The static host runs at widths 1.0, 1.5 and 2.0 on paired seeds (the same seeds, data subsets and batch order for
each width). One set of episodes gives both: λ_p is the least-squares slope of mean final validation accuracy against
the added-parameter ratio params(w) / params(1) − 1, λ_c against the added-training-compute ratio F(w) / F(1) − 1
(F: an episode's training FLOPs as the env's FlopMeter counts them, the same for every seed of a width), each in pp
per 100 % (floored at 0) with a paired-bootstrap 95 % interval over episodes. They depend on the task, the episode
length, the sample caps, the batch size and the augmentation, so a measurement is cached under the data directory
keyed by all of them (and by the host's parameter count, which changes when the host does) and reused by every run
with the same key. `resolve_auto_cost` is how a learning run (`train ppo`, a study) asks for it: `"auto"` in its config
becomes the measured (or cached) λ of its setting, one λ_p per training type across a task family.
"""

from __future__ import annotations

import dataclasses
import json
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from esper.data.augment import Augment
from esper.data.families import family_task, get_family
from esper.data.optim import LRSchedule
from esper.data.tasks import DataCache, DataOptions, TaskSpec, get_task_spec
from esper.env.charges import AUTO_COST, CHARGES, Charge
from esper.env.driver import EnvPool
from esper.env.setting import EpisodeSetting
from esper.evaluation.comparison import host_params, parse_controllers
from esper.evaluation.episodes import EpisodePlan, run_controller_episodes
from esper.evaluation.stats import bootstrap_counts, percentile_interval
from esper.execution.devices import resolve_device
from esper.leyline import UserInputError
from esper.leyline.seeding import SeedStream
from esper.simic.ppo.config import TrainingConfig
from esper.storage.rundir import task_slug, write_json_atomic

__all__ = ["WIDTHS", "ParamCostMeasurement", "ParamCostSetting", "cached_costs", "measure_param_cost",
           "resolve_auto_cost"]

WIDTHS = (1.0, 1.5, 2.0)
CACHE_DIR = "param_costs"
CACHE_VERSION = 3  # 2: episodes on the calibration seed stream; 3: λ_c beside λ_p. Another version is measured again
BOOTSTRAP_RESAMPLES = 1000

Progress = Callable[[int, int, float], None]
"""Called after each paired episode with (episodes done, episodes in all, seconds elapsed)."""


@dataclass(frozen=True)
class ParamCostSetting:
    """Everything λ_p and λ_c depend on: a measurement serves exactly the runs with the same setting."""

    task: str
    max_epochs: int
    max_train_samples: int | None
    max_val_samples: int | None
    batch_size: int
    lr_schedule: LRSchedule = "constant"
    episodes: int = 5
    seed: int = 7  # base of the calibration seed stream, which no run's episodes draw from
    augment: Augment | None = None  # the training batches' augmentation; None: the task's own

    def cache_file(self, data_dir: Path, task: TaskSpec) -> Path:
        """Where the measurement of this setting on `task` is cached: named by every value of the setting, the
        augmentation in force and the host's parameter count (which changes when the host does)."""
        caps = f"train{self.max_train_samples or 'all'}_val{self.max_val_samples or 'all'}"
        augment = task.augment_in_force(self.augment).replace(",", "-")
        name = (f"{task_slug(self.task)}_h{host_params(task, 1.0)}_e{self.max_epochs}_{caps}_b{self.batch_size}_"
                f"{self.lr_schedule}_aug-{augment}_n{self.episodes}_s{self.seed}_v{CACHE_VERSION}.json")
        return data_dir / CACHE_DIR / name


@dataclass(frozen=True)
class ParamCostMeasurement:
    """λ_p and λ_c (the slopes floored at 0), the fitted slopes with their bootstrap intervals, and the points they
    were fitted to (one per width)."""

    setting: ParamCostSetting
    param_cost: float
    slope: float
    ci95: tuple[float, float]
    added_param_ratios: tuple[float, ...]
    mean_final_accuracy: tuple[float, ...]
    seconds: float
    compute_cost: float
    compute_slope: float
    compute_ci95: tuple[float, float]
    added_flop_ratios: tuple[float, ...]
    train_gflops: tuple[float, ...]  # per width, one episode's

    def cost(self, charge: Charge) -> float:
        return self.param_cost if charge == "param" else self.compute_cost

    def to_dict(self) -> dict[str, Any]:
        return {"version": CACHE_VERSION, **dataclasses.asdict(self), "widths": list(WIDTHS)}


def _slope(xs: list[float], ys: list[float]) -> float:
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum((x - mx) ** 2 for x in xs)


def _fit(ratios: list[float], per_width: list[list[float]], seed: int) -> tuple[float, tuple[float, float]]:
    """The slope of mean final accuracy against `ratios`, and its paired-bootstrap 95 % interval: whole paired seeds
    are resampled (each seed's widths stay together), one weighted mean per width and resample."""
    episodes = len(per_width[0])
    fitted = _slope(ratios, [statistics.fmean(acc) for acc in per_width])
    weights = bootstrap_counts(episodes, BOOTSTRAP_RESAMPLES, seed)[1:] / episodes
    means = weights @ torch.tensor(per_width, dtype=torch.float64).T  # [resamples, widths]
    boot = torch.tensor([_slope(ratios, row) for row in means.tolist()], dtype=torch.float64)
    return fitted, percentile_interval(boot)


def measure_param_cost(task: TaskSpec, setting: ParamCostSetting, cache: DataCache, *,
                       device: torch.device | None = None, progress: Progress | None = None) -> ParamCostMeasurement:
    """Run the static host at every width of `WIDTHS` for `setting.episodes` paired seeds and fit λ_p and λ_c."""
    episode = EpisodeSetting(task=task.name, max_epochs=setting.max_epochs, max_train_samples=setting.max_train_samples,
                             max_val_samples=setting.max_val_samples, augment=setting.augment,
                             batch_size=setting.batch_size, lr_schedule=setting.lr_schedule)
    plan = EpisodePlan(episode=episode, seed=setting.seed, devices=[device or torch.device("cpu")],
                       reward_family="contribution",  # static hosts: the reward is irrelevant, and needs no λ_p
                       stream=SeedStream.CALIBRATION)
    specs = parse_controllers([f"static:{w}" for w in WIDTHS])
    started = time.perf_counter()

    def report(episode: int, *_: object) -> None:
        if progress is not None:
            progress(episode + 1, setting.episodes, time.perf_counter() - started)

    with EnvPool(plan.workers, cache) as pool:
        results = run_controller_episodes(specs, plan, setting.episodes, pool, on_episode=report)
    base = host_params(task, 1.0)
    ratios = [host_params(task, w) / base - 1.0 for w in WIDTHS]
    # An episode's FLOPs are a function of the shapes it ran on: every paired seed of a width counts the same.
    flops = [statistics.fmean(r.train_flops for r in results if r.controller == s.label) for s in specs]
    flop_ratios = [f / flops[0] - 1.0 for f in flops]
    per_width = [[r.final_accuracy for r in results if r.controller == s.label] for s in specs]
    fitted, interval = _fit(ratios, per_width, setting.seed)
    compute_fitted, compute_interval = _fit(flop_ratios, per_width, setting.seed)
    return ParamCostMeasurement(setting, max(fitted, 0.0), fitted, interval, tuple(ratios),
                                tuple(statistics.fmean(acc) for acc in per_width), time.perf_counter() - started,
                                max(compute_fitted, 0.0), compute_fitted, compute_interval, tuple(flop_ratios),
                                tuple(f / 1e9 for f in flops))


def cached_costs(task: TaskSpec, setting: ParamCostSetting, cache: DataCache, data_dir: Path, *,
                 device: torch.device | None = None, progress: Progress | None = None
                 ) -> tuple[dict[Charge, float], Path, bool]:
    """(λ per charge, their cache file, whether they were measured now): the cached measurement of `setting` when
    there is one, else a new measurement, written atomically to the cache before it is returned."""
    path = setting.cache_file(data_dir, task)
    if path.is_file():
        try:
            stored = json.loads(path.read_text(encoding="utf-8"))
            return {"param": float(stored["param_cost"]), "compute": float(stored["compute_cost"])}, path, False
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise UserInputError(f"The cached charges {path} are unreadable ({exc}): delete it and rerun to "
                                 f"measure them again") from None
    measured = measure_param_cost(task, setting, cache, device=device, progress=progress)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json_atomic(path, measured.to_dict())
    return {"param": measured.param_cost, "compute": measured.compute_cost}, path, True


def _measured(episode: EpisodeSetting, device: str, charge: Charge, task: str, max_train_samples: int | None,
              data_dir: Path, cache: DataCache, note: Callable[[str], None]) -> float:
    """λ of `charge` for `episode`'s setting on `task` at `max_train_samples` (a family's type: its own task and cap),
    measured on `device` or reused from the cache."""
    setting = ParamCostSetting(task, episode.max_epochs, max_train_samples, episode.max_val_samples,
                               episode.batch_size, episode.lr_schedule, augment=episode.augment)
    symbol = CHARGES[charge].symbol

    def progress(done: int, total: int, elapsed: float) -> None:
        widths = "/".join(f"{w:.1f}" for w in WIDTHS)
        note(f"measuring {symbol}: paired episode {done}/{total} of the static host at widths {widths} · elapsed "
             f"{elapsed:.0f} s · ETA {elapsed / done * (total - done):.0f} s")

    costs, path, measured = cached_costs(get_task_spec(task), setting, cache, data_dir,
                                         device=resolve_device(device), progress=progress)
    note(f"{symbol} {costs[charge]:.3f} for {task} at {episode.max_epochs} epochs, caps {max_train_samples or 'all'} / "
         f"{episode.max_val_samples or 'all'}: {'measured now and cached in' if measured else 'reused from'} {path}")
    return costs[charge]


def resolve_auto_cost(config: TrainingConfig, data: DataOptions, note: Callable[[str], None]) -> TrainingConfig:
    """`config` with a measured (or cached, under `data`'s directory) λ in place of "auto" (λ_p across a family: one
    per training type, in that type's own setting), each measurement's progress and result told to `note`; any other
    config unchanged."""
    episode, reward, device = config.episode, config.reward, config.execution.device
    if AUTO_COST not in (reward.param_cost, reward.compute_cost):
        return config
    cache = DataCache(data)
    if reward.compute_cost == AUTO_COST:
        return config.with_overrides(**{"reward.compute_cost": _measured(
            episode, device, "compute", episode.task, episode.max_train_samples, data.data_dir, cache, note)})
    if config.family is None:
        return config.with_overrides(**{"reward.param_cost": _measured(
            episode, device, "param", episode.task, episode.max_train_samples, data.data_dir, cache, note)})
    family = get_family(config.family)
    costs = {t.name: _measured(episode, device, "param", family_task(family, t), t.max_train_samples, data.data_dir,
                               cache, note) for t in family.training}
    return config.with_overrides(**{"reward.param_cost": None, "reward.type_param_costs": costs})
