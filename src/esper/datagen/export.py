"""Export a datagen directory as a Minari dataset (optional `[minari]` extra), for offline-RL libraries that read it.

Each episode becomes one Minari episode: observations are the 80 features of each decision plus the final
measurement (T − 1 decisions, T observations), actions the joint indices, rewards the stored `gap` rewards, and the
last decision terminates the episode (episodes always run their full length, so nothing is truncated). Infos follow
the Gymnasium convention of one entry per observation: `action_mask` (the 43 valid joint actions; none after the
end), `behavior_probs` (the behaviour policy's op probabilities in WAIT, GERMINATE, CULL, FOSSILIZE order, 0 for
invalid ops) and `joint_behavior_prob` (of the action taken there; NaN after the end), plus `epoch`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import warnings
from collections.abc import Iterator, Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from esper.datagen.configs import OP_NAMES
from esper.datagen.reader import read_episodes
from esper.datagen.schema import recorded_space
from esper.env.features import obs_dim
from esper.leyline.errors import UserInputError

__all__ = ["EXPORT_FORMATS", "export_minari", "import_minari"]

EXPORT_FORMATS: tuple[str, ...] = ("minari",)
MINARI_ROOT_VARIABLE = "MINARI_DATASETS_PATH"


def import_minari() -> ModuleType:
    """The minari package with a storage backend, or an error naming the extra to install."""
    try:
        import h5py  # noqa: F401  (Minari's default storage format)
        import minari
    except ImportError as error:
        raise UserInputError("Minari export needs the optional [minari] extra: pip install 'esper[minari]' "
                             f"({error.name} is missing)") from error
    return minari


@contextlib.contextmanager
def _datasets_root(root: Path | None) -> Iterator[None]:
    """Point Minari at `root` for the duration of the block (Minari reads its root from the environment)."""
    if root is None:
        yield
        return
    previous = os.environ.get(MINARI_ROOT_VARIABLE)
    os.environ[MINARI_ROOT_VARIABLE] = str(Path(root).resolve())
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop(MINARI_ROOT_VARIABLE, None)
        else:
            os.environ[MINARI_ROOT_VARIABLE] = previous


def _op_probs(decision: Mapping[str, Any]) -> list[float]:
    probs = decision["action"]["action_probabilities"]["behavior_probs"]
    return [float(probs.get(op, 0.0)) for op in OP_NAMES]


def _buffer(minari: ModuleType, index: int, episode: Mapping[str, Any]) -> Any:
    decisions = episode["decisions"]
    n = len(decisions)

    def number(value: Any) -> float:
        return math.nan if value is None else float(value)

    observations = np.array([[number(v) for v in d["observation"]["features"]] for d in decisions]
                            + [[number(v) for v in episode["final_features"]]], dtype=np.float32)
    masks = np.zeros((n + 1, recorded_space(episode).num_joint_actions), dtype=np.bool_)
    masks[:n] = np.array([d["valid_joint_actions"] for d in decisions], dtype=np.bool_)
    op_probs = np.zeros((n + 1, len(OP_NAMES)), dtype=np.float64)
    op_probs[:n] = [_op_probs(d) for d in decisions]
    joint = np.full(n + 1, math.nan, dtype=np.float64)
    joint[:n] = [number(d["action"]["joint_behavior_prob"]) for d in decisions]
    epochs = np.array([d["observation"]["epoch"] for d in decisions] + [int(episode["max_epochs"])], dtype=np.int64)
    return minari.data_collector.EpisodeBuffer(
        id=index,
        seed=int(episode["random_seed"]),
        observations=observations,
        actions=np.array([d["action"]["joint_index"] for d in decisions], dtype=np.int64),
        rewards=[number(d["outcome"]["reward"]) for d in decisions],
        terminations=[t == n - 1 for t in range(n)],
        truncations=[False] * n,
        infos={"action_mask": masks, "behavior_probs": op_probs, "joint_behavior_prob": joint, "epoch": epochs},
    )


SETTINGS = ("task", "max_epochs", "max_train_samples", "max_val_samples", "param_cost", "augment")
"""The generation settings every episode stores that `MorphoGymEnv` takes as keywords."""


def _env_spec(episode: Mapping[str, Any]) -> Any:
    """The Gymnasium spec `recover_environment()` rebuilds: `esper/Morpho-v0` in the dataset's setting (task, episode
    length, sample caps, λ_p, augmentation). Datagen's environment presets vary the host and optimizer beyond what the
    Gymnasium env exposes; the recovered env trains the task's own host."""
    import gymnasium

    from esper.env.gym import ENV_ID

    return dataclasses.replace(gymnasium.spec(ENV_ID), kwargs={k: episode[k] for k in SETTINGS if k in episode})


def export_minari(directory: Path, dataset_id: str, *, root: Path | None = None) -> Any:
    """Write the episodes of `directory` as Minari dataset `dataset_id` (e.g. `esper/synthetic-v0`)
    under `root` (default: Minari's datasets root); returns the loaded `MinariDataset`."""
    minari = import_minari()
    from gymnasium import spaces
    from minari.dataset.minari_dataset import parse_dataset_id

    try:
        parse_dataset_id(dataset_id)
    except ValueError:
        raise UserInputError(f"Minari dataset ids look like NAMESPACE/NAME-vVERSION (e.g. esper/synthetic-v0), got "
                             f"'{dataset_id}'") from None
    episodes = read_episodes(directory)
    with _datasets_root(root):
        if dataset_id in minari.list_local_datasets():
            where = root if root is not None else "Minari's datasets root"
            raise UserInputError(f"Minari dataset '{dataset_id}' already exists under {where}; choose another --out, "
                                 f"or delete it first (minari delete {dataset_id})")
        policies = sorted({str(e["behavior_policy"]["policy_id"]) for e in episodes})
        space = recorded_space(episodes[0])
        with warnings.catch_warnings():
            # Minari nags about metadata a generated dataset has no use for (permalink, e-mail, evaluation env).
            warnings.filterwarnings("ignore", category=UserWarning, module=r"minari\.")
            return minari.create_dataset_from_buffers(
                dataset_id=dataset_id,
                env=_env_spec(episodes[0]),
                buffer=[_buffer(minari, i, e) for i, e in enumerate(episodes)],
                observation_space=spaces.Box(-np.inf, np.inf, shape=(obs_dim(space),), dtype=np.float32),
                action_space=spaces.Discrete(space.num_joint_actions),
                author="esper datagen",
                algorithm_name=f"esper datagen behaviour policies: {', '.join(policies)}",
                description=f"esper morphogenetic-training lifecycle decisions from {directory.name} "
                            f"({len(episodes)} episodes, task {episodes[0]['task']}); rewards: gap vs the static twin",
                data_format="hdf5",
                jpeg_encoding=False,
            )
