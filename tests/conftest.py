"""Shared test configuration: deterministic seeds, Hypothesis profiles, and the `synthetic` task's images generated
once per test process."""

from __future__ import annotations

import os
import random

import numpy as np
import pytest
import torch
from hypothesis import settings
from torch import Tensor

from esper.data import builtin_tasks
from esper.data.readers import Split
from esper.data.synthetic import SYNTHETIC_SPLIT_SIZES, generate_synthetic_images

settings.register_profile("dev", max_examples=10, deadline=500)
settings.register_profile("ci", max_examples=50, deadline=None)
settings.register_profile("thorough", max_examples=1000, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))

# Test tensors are tiny: intra-op threads only add scheduling overhead (and contend on small CI machines).
torch.set_num_threads(1)

_GENERATED: dict[tuple[int, Split, int], tuple[Tensor, Tensor]] = {}


def _synthetic_images_generated_once(seed: int, split: Split) -> tuple[Tensor, Tensor]:
    """The `synthetic` task's split, generated on its first load in this process; every load gets copies of its own.

    The generator is a pure function of (seed, split), but it costs ~0.4 s of CPU per task load, and the in-process
    CLI tests load the task over and over. tests/unit/data/test_synthetic.py checks the generator itself,
    uncached; commands run as subprocesses (and their workers) generate their own.
    """
    key = (seed, split, SYNTHETIC_SPLIT_SIZES[split])
    if key not in _GENERATED:
        _GENERATED[key] = generate_synthetic_images(seed, split)
    x, y = _GENERATED[key]
    return x.clone(), y.clone()


builtin_tasks.generate_synthetic_images = _synthetic_images_generated_once


@pytest.fixture(autouse=True)
def _seed_everything() -> None:
    random.seed(42)
    np.random.seed(42)
    torch.manual_seed(42)
