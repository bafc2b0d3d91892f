"""Shared test configuration: deterministic seeds and Hypothesis profiles."""

from __future__ import annotations

import os
import random

import numpy as np
import pytest
import torch
from hypothesis import settings

settings.register_profile("dev", max_examples=10, deadline=500)
settings.register_profile("ci", max_examples=50, deadline=None)
settings.register_profile("thorough", max_examples=1000, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))

# Test tensors are tiny: intra-op threads only add scheduling overhead (and contend on small CI machines).
torch.set_num_threads(1)


@pytest.fixture(autouse=True)
def _seed_everything() -> None:
    random.seed(42)
    np.random.seed(42)
    torch.manual_seed(42)
