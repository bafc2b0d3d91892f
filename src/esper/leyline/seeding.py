"""The one seed rule: the host and data seeds of every episode are `derive_seed(base, <named stream>, <indices>...)`.

A seed is a hash of the run's base seed, the stream's name and the indices that locate it (batch and group, episode),
so two streams never share a seed by arithmetic accident: PPO's training episodes, a study's selection episodes, the
held-out evaluation episodes and λ_p's calibration episodes draw from different streams of one base seed, whatever
the batch size or the number of episodes. Finer randomness inside an episode or a learner (an epoch's data order, a
seed module's initialization, the PPO agent's sampling streams) is `derive_seed` of the episode's or the run's seed
and a name. Shared by every layer, so paired runs agree on their randomness.
"""

from __future__ import annotations

import hashlib
import operator
from enum import StrEnum

__all__ = ["MAX_BASE_SEED", "SEED_RULE", "SeedStream", "derive_seed", "episode_seeds", "run_seed"]

SEED_RULE = "named-streams-1"
"""Names this rule in resumable state: a run saved under another rule would continue on other seeds than it began."""


class SeedStream(StrEnum):
    """The named streams of host/data seeds. Episodes of different streams never share a host or a data seed."""

    TRAINING = "training"  # PPO rollouts: (batch, group) for hosts, (batch, "data") for the batch's data, and
    # (batch, group, "data") for a group's own data across a task family
    SELECTION = "selection"  # a study's best-fixed/best-rule selection episodes: index (episode,)
    EVALUATION = "evaluation"  # compare and a study's held-out evaluation: index (episode,)
    DATAGEN = "datagen"  # offline dataset generation: index (environment config, episode)
    CALIBRATION = "calibration"  # λ_p's measurement on widened static hosts: index (episode,)


def derive_seed(*parts: int | str) -> int:
    """Stable 63-bit seed from a tuple such as (seed, "training", batch, group); independent of Python's hash
    randomization. String parts hash by their value, so a `SeedStream` and its name give the same seed; anything else
    must be an integer (a float or a bool is refused, not truncated)."""
    plain = tuple(str(p) if isinstance(p, str) else _integer(p) for p in parts)
    digest = hashlib.blake2b(repr(plain).encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "big") >> 1


def _integer(part: object) -> int:
    if isinstance(part, bool):
        raise TypeError("a seed part must be an int or a str, not a bool")
    return operator.index(part)  # type: ignore[arg-type]  # TypeError for anything that is not an integer


MAX_BASE_SEED = 2**31 - 1
"""The largest base seed: some paths hand it to torch, NumPy and Python as is (every other seed is hashed from it)."""


def run_seed(base: int, run: int) -> int:
    """The base seed of training run `run` of a study with base seed `base`: run 0 trains on `base` itself (so a
    one-run study is the single run it always was), run r > 0 on a seed hashed from (base, "run", r). Each run's
    training stream is then its own, and none meets the selection or evaluation streams, which stay on `base`."""
    return base if run == 0 else derive_seed(base, "run", run) % (MAX_BASE_SEED + 1)


def episode_seeds(base: int, stream: SeedStream, *index: int | str) -> tuple[int, int]:
    """(host seed, data seed) of the episode at `index` in `stream`: the host seed initializes the network, the data
    seed draws the episode's sample subset and batch order. Paired controllers share both."""
    return derive_seed(base, stream, *index), derive_seed(base, stream, *index, "data")
