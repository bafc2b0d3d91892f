"""The one seed rule: every seed esper uses is `derive_seed(base, <named stream>, <indices>...)`.

A seed is a hash of the run's base seed, the stream's name and the indices that locate it (batch and group, episode,
split, ...), so two streams never share a seed by arithmetic accident: PPO's training episodes, a study's selection
episodes and the held-out evaluation episodes draw from different streams of one base seed, whatever the batch size
or the number of episodes. Shared by every layer, so paired runs agree on their randomness.
"""

from __future__ import annotations

import hashlib
from enum import StrEnum

__all__ = ["SeedStream", "derive_seed", "episode_seeds"]


class SeedStream(StrEnum):
    """The named streams of host/data seeds. Episodes of different streams never share a host or a data seed."""

    TRAINING = "training"  # PPO rollouts: index (batch, group) for hosts, (batch,) for the batch's data
    SELECTION = "selection"  # a study's best-fixed/best-rule selection episodes: index (episode,)
    EVALUATION = "evaluation"  # compare and a study's held-out evaluation: index (episode,)
    DATAGEN = "datagen"  # offline dataset generation: index (environment config, episode)


def derive_seed(*parts: int | str) -> int:
    """Stable 63-bit seed from a tuple such as (seed, "training", batch, group); independent of Python's hash
    randomization. String parts hash by their value, so a `SeedStream` and its name give the same seed."""
    plain = tuple(str(p) if isinstance(p, str) else int(p) for p in parts)
    digest = hashlib.blake2b(repr(plain).encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "big") >> 1


def episode_seeds(base: int, stream: SeedStream, *index: int | str) -> tuple[int, int]:
    """(host seed, data seed) of the episode at `index` in `stream`: the host seed initializes the network, the data
    seed draws the episode's sample subset and batch order. Paired controllers share both."""
    return derive_seed(base, stream, *index), derive_seed(base, stream, *index, "data")
