"""What tuning the heuristic searches: its thresholds, each over the range where a value changes its episodes.

Ranges follow from the setting. L, the latest epoch from which a seed can still reach its first chance to fossilize
(`HeuristicTamiyo.latest_germination_epoch`), bounds the germination timing: decisions come after epochs 1 .. T−1, a
first germination after L is never useful (the heuristic does not germinate then), a plateau longer than L epochs
cannot happen by then (L + 1 turns that trigger off), and a gap of L or more between germinations allows only one.
The cull and embargo thresholds run over the episode, 1 .. T−1 (0 where the field allows it). A drop in accuracy
that culls a seed is searched in quarter points up to 10 pp. Then the seed capacity (one live seed up to one per
slot), the blend, and which blueprint the rotation starts from (keeping its order). The blueprint penalties are left
at their defaults: they act after repeated culls of one blueprint, which a short episode with a few slots rarely sees.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import optuna

from esper.evaluation.episodes import EpisodePlan, build_controller
from esper.leyline import BLEND_IDS
from esper.leyline.errors import UserInputError
from esper.tamiyo import THRESHOLD_FIELDS, ControllerSpec, HeuristicTamiyo

__all__ = ["FIRST_BLUEPRINT", "SearchSpace"]

FIRST_BLUEPRINT = "first_blueprint"
"""The one searched parameter that is not a threshold: where the blueprint rotation starts."""
DROP_STEP, MAX_DROP = 0.25, 10.0


@dataclass(frozen=True)
class SearchSpace:
    """The heuristic's thresholds searched in one setting: integer ranges, the accuracy drop, and the choices."""

    defaults: dict[str, Any]  # every threshold of the default heuristic (the record's values where not searched)
    topology: str
    rotation: tuple[str, ...]  # the default rotation of the topology, less what the task cannot build
    integers: dict[str, tuple[int, int]]
    choices: dict[str, tuple[Any, ...]]

    @staticmethod
    def tunable(plan: EpisodePlan) -> bool:
        """Whether `plan`'s episodes are long enough for a seed to reach probation (else no threshold matters)."""
        heuristic = build_controller(ControllerSpec("heuristic"), plan, episode=0, index=0)
        assert isinstance(heuristic, HeuristicTamiyo)
        return heuristic.latest_germination_epoch(plan.episode.max_epochs) >= 1

    @classmethod
    def of(cls, plan: EpisodePlan) -> SearchSpace:
        """The space of `plan`'s setting; refused when its episodes are too short for any seed to be fossilized."""
        heuristic = build_controller(ControllerSpec("heuristic"), plan, episode=0, index=0)
        assert isinstance(heuristic, HeuristicTamiyo)
        config, last = heuristic.config, plan.episode.max_epochs - 1
        latest = heuristic.latest_germination_epoch(plan.episode.max_epochs)
        if not cls.tunable(plan):
            shortest = plan.episode.max_epochs + 1 - latest
            raise UserInputError(f"Episodes of {plan.episode.max_epochs} epochs are too short for a seed to reach "
                                 f"probation on {plan.task.name} (it trains {config.seed_training_epochs} and blends "
                                 f"{config.seed_blending_epochs} epochs), so no threshold changes what the heuristic "
                                 f"does: pass --max-epochs {shortest} or more")
        integers = {"min_epochs_before_germinate": (1, latest), "plateau_epochs_to_germinate": (0, latest + 1),
                    "min_epochs_between_germinations": (1, latest),
                    "cull_after_epochs_without_improvement": (1, last), "stall_training_epochs": (1, last),
                    "embargo_epochs_after_cull": (0, last)}
        if len(plan.episode.slots) > 1:
            integers["max_concurrent_seeds"] = (1, len(plan.episode.slots))
        rotation = tuple(b for b in config.blueprint_rotation[plan.task.topology]
                         if b in plan.task.action_space.buildable)
        choices: dict[str, tuple[Any, ...]] = {"blend_id": tuple(BLEND_IDS)}
        if len(rotation) > 1:
            choices[FIRST_BLUEPRINT] = rotation
        defaults = {k: v for k, v in config.to_dict().items() if k in THRESHOLD_FIELDS}
        return cls(defaults, plan.task.topology, rotation, integers, choices)

    def suggest(self, trial: optuna.Trial) -> dict[str, Any]:
        """One trial's parameters, drawn by the study's sampler."""
        params: dict[str, Any] = {name: trial.suggest_int(name, low, high)
                                  for name, (low, high) in self.integers.items()}
        params["cull_if_accuracy_drops_by"] = trial.suggest_float("cull_if_accuracy_drops_by", 0.0, MAX_DROP,
                                                                  step=DROP_STEP)
        params.update({name: trial.suggest_categorical(name, list(options)) for name, options in self.choices.items()})
        return params

    def default_params(self) -> dict[str, Any]:
        """The default heuristic's parameters, clamped into the space (equivalent values where one is outside)."""
        capacity = self.defaults["max_concurrent_seeds"]
        given = {**self.defaults, "max_concurrent_seeds": capacity if capacity is not None else 10**9,
                 FIRST_BLUEPRINT: self.rotation[0]}
        params = {name: min(max(given[name], low), high) for name, (low, high) in self.integers.items()}
        drop = round(given["cull_if_accuracy_drops_by"] / DROP_STEP) * DROP_STEP
        params["cull_if_accuracy_drops_by"] = min(max(drop, 0.0), MAX_DROP)
        params.update({name: given[name] for name in self.choices})
        return params

    def thresholds(self, params: dict[str, Any]) -> dict[str, Any]:
        """Every threshold of a trial: its parameters over the defaults, the rotation started at its first blueprint
        and the top of the seed capacity written as one per slot (None), as the default is."""
        searched = {k: v for k, v in params.items() if k != FIRST_BLUEPRINT}
        if searched.get("max_concurrent_seeds") == self.integers.get("max_concurrent_seeds", (0, 0))[1]:
            searched["max_concurrent_seeds"] = None
        rotation = list(self.rotation)
        start = rotation.index(params[FIRST_BLUEPRINT]) if FIRST_BLUEPRINT in params else 0
        rotations = {**self.defaults["blueprint_rotation"], self.topology: rotation[start:] + rotation[:start]}
        return {**self.defaults, **searched, "blueprint_rotation": rotations}
