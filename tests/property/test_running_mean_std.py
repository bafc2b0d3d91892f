"""RunningMeanStd: incremental == batch, normalized output within the clip."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from esper.simic.normalization import RunningMeanStd

values = st.floats(min_value=-1e4, max_value=1e4, allow_nan=False, width=32)
chunks = st.lists(st.lists(st.tuples(values, values), min_size=1, max_size=8), min_size=1, max_size=8)


@given(batches=chunks)
def test_incremental_updates_equal_one_batch_update(batches: list[list[tuple[float, float]]]) -> None:
    incremental, single = RunningMeanStd(2), RunningMeanStd(2)
    for batch in batches:
        incremental.update(torch.tensor(batch))
    single.update(torch.tensor([row for batch in batches for row in batch]))
    scale = 1.0 + max(abs(v) for batch in batches for row in batch for v in row)
    assert torch.allclose(incremental.mean, single.mean, rtol=1e-9, atol=1e-9 * scale)
    assert torch.allclose(incremental.var, single.var, rtol=1e-7, atol=1e-7 * scale**2)
    assert incremental.count == pytest.approx(single.count)
    assert incremental.update_count == len(batches) and single.update_count == 1


@given(batches=chunks, probe=st.lists(st.tuples(values, values), min_size=1, max_size=8),
       clip=st.floats(min_value=0.5, max_value=20.0))
def test_normalized_output_within_clip(
    batches: list[list[tuple[float, float]]], probe: list[tuple[float, float]], clip: float
) -> None:
    rms = RunningMeanStd(2)
    for batch in batches:
        rms.update(torch.tensor(batch))
    z = rms.normalize(torch.tensor(probe) * 1e3, clip=clip)
    assert torch.isfinite(z).all()
    assert (z.abs() <= clip).all()
