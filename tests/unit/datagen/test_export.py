"""Minari export: the dataset loads with minari.load_dataset and holds every decision of the directory."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from esper.datagen.export import export_minari, import_minari
from esper.datagen.schema import write_strict_json
from unit.datagen.support import make_episode

pytest.importorskip("minari")
pytest.importorskip("h5py")

OPS = {"baseline_baseline_0000": ("WAIT", "GERMINATE", "WAIT", "FOSSILIZE"),
       "baseline_aggressive_0000": ("GERMINATE", "CULL", "WAIT")}


@pytest.fixture
def dataset_dir(tmp_path: Path) -> Path:
    out = tmp_path / "data"
    for i, (episode_id, ops) in enumerate(OPS.items()):
        episode = make_episode(episode_id, ops, policy_id=episode_id.split("_")[1], seed=42 + i)
        episode["final_features"] = [float(i)] * len(episode["final_features"])
        write_strict_json(out / f"{episode_id}.json", episode)
    return out


@pytest.fixture
def minari_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "minari"
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(root))
    return root


def test_export_loads_with_every_decision(dataset_dir: Path, minari_root: Path) -> None:
    minari = import_minari()
    export_minari(dataset_dir, "esper/test-v0")
    dataset = minari.load_dataset("esper/test-v0")
    assert dataset.total_steps == sum(len(ops) for ops in OPS.values())
    assert dataset.total_episodes == len(OPS)
    episodes = {int(e.id): e for e in dataset.iterate_episodes()}
    files = sorted(OPS)  # episodes are exported in file-name order
    for index, episode_id in enumerate(files):
        e: Any = episodes[index]
        n = len(OPS[episode_id])
        assert e.observations.shape == (n + 1, 80)
        assert np.all(e.observations[-1] == float(list(OPS).index(episode_id)))  # the final measurement
        assert e.rewards.tolist() == pytest.approx([0.1 * t for t in range(n)])
        assert e.terminations.tolist() == [False] * (n - 1) + [True]
        assert not e.truncations.any()
        assert e.infos["action_mask"].shape == (n + 1, 43)
        assert e.infos["action_mask"][:n].all() and not e.infos["action_mask"][n].any()
        assert np.allclose(e.infos["behavior_probs"][:n].sum(axis=1), 1.0)
        assert np.isnan(e.infos["joint_behavior_prob"][n])


def test_export_refuses_to_overwrite_and_checks_the_id(dataset_dir: Path, tmp_path: Path) -> None:
    root = tmp_path / "elsewhere"
    export_minari(dataset_dir, "esper/test-v0", root=root)
    assert (root / "esper" / "test-v0").is_dir()
    with pytest.raises(ValueError, match="already exists"):
        export_minari(dataset_dir, "esper/test-v0", root=root)
    with pytest.raises(ValueError, match="NAMESPACE/NAME-vVERSION"):
        export_minari(dataset_dir, "no version", root=root)
