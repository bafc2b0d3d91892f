"""How seeds are derived from a base seed: shared by every layer, so paired runs agree on their randomness."""

from __future__ import annotations

import hashlib

__all__ = ["derive_seed"]


def derive_seed(*parts: int | str) -> int:
    """Stable 63-bit seed from a tuple such as (seed, batch, epoch); independent of Python's hash randomization."""
    digest = hashlib.blake2b(repr(parts).encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "big") >> 1
