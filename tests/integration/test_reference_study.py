"""The README's headline, rerun on its first 10 evaluation seeds: `esper study --preset synthetic --seeds 10`
(about 40 minutes on one CPU core: training, the selection of best-fixed and best-rule, the evaluation).

On CPU with one intra-op thread the study is deterministic; it fails if a change stops the controller from learning
(final vs its own init on test accuracy) or from beating the heuristic and the parameter-matched wider static host on
the paired held-out seeds. (It does not require beating best-fixed: the README reports that it does not.)
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from esper.cli.main import main


@pytest.mark.slow
def test_synthetic_study_learns_and_beats_heuristic_and_static_matched(tmp_path: Path) -> None:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the README's numbers were measured with one intra-op thread
    run = tmp_path / "study"
    try:
        assert main(["study", "--preset", "synthetic", "--seeds", "10", "--device", "cpu", "--no-tui",
                     "--no-tensorboard", "--run-dir", str(run)]) == 0
    finally:
        torch.set_num_threads(threads)
    final = json.loads((run / "results.json").read_text())["pairwise"]["ppo (final)"]
    for reference in ("ppo (init)", "heuristic", "static:matched"):
        low, _ = final[reference]["ci95"]
        assert low > 0, (reference, final[reference])
