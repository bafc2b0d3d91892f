"""A validation split that represents the classes: data without one gets `val` carved class by class, the same share
of every class, however the samples are ordered (a folder reads class after class, many arrays are sorted by label);
the carve is a function of the data alone. esper's own tasks carve the last samples of a source that is already
shuffled, which the last test shows on the data at hand."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from esper.data.array_tasks import VAL_FRACTION, arrays_task, stratified_val
from esper.data.readers import CIFAR10_VAL_SIZE, fashion_mnist_directory, load_cifar10, load_fashion_mnist
from esper.data.synthetic import generate_synthetic_images
from esper.data.tasks import DataOptions, get_task_spec

CLASS_SIZES = st.lists(st.integers(2, 60), min_size=2, max_size=6)


def _sorted_arrays(sizes: list[int]) -> dict[str, np.ndarray]:
    """Class-sorted training samples, each image holding its own index (so train and val can be told apart)."""
    labels = np.repeat(np.arange(len(sizes)), sizes)
    images = np.arange(len(labels), dtype=np.float32).reshape(-1, 1, 1).repeat(4, 1).repeat(4, 2)
    return {"x_train": images, "y_train": labels, "x_test": images[:2], "y_test": labels[:2]}


def _expected(sizes: list[int]) -> dict[int, int]:
    return {label: max(1, round(VAL_FRACTION * n)) for label, n in enumerate(sizes)}


@settings(max_examples=60, deadline=None)
@given(sizes=CLASS_SIZES, global_seed=st.integers(0, 2**31))
def test_a_class_sorted_npz_gets_every_class_in_val_in_proportion(sizes: list[int], global_seed: int) -> None:
    arrays = _sorted_arrays(sizes)
    torch.manual_seed(global_seed)  # the carve must not hang on the process's random state
    task = arrays_task("sorted", arrays)
    (x_train, y_train), (x_val, y_val) = (task.load(DataOptions(), s) for s in ("train", "val"))
    assert dict(Counter(y_val.tolist())) == _expected(sizes)
    assert dict(Counter(y_train.tolist())) == {k: n - _expected(sizes)[k] for k, n in enumerate(sizes)}
    seen = sorted(int(i) for i in torch.cat([x_train, x_val])[:, 0, 0, 0].tolist())
    assert seen == list(range(sum(sizes)))  # train and val partition the training samples
    torch.manual_seed(global_seed + 1)
    again = arrays_task("sorted", arrays).load(DataOptions(), "val")
    assert torch.equal(again[0], x_val) and torch.equal(again[1], y_val)  # every controller, worker and resume


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sizes=st.lists(st.integers(2, 14), min_size=2, max_size=4))
def test_a_folder_read_class_after_class_gets_every_class_in_val_in_proportion(sizes: list[int]) -> None:
    from PIL import Image

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for split, counts in (("train", sizes), ("test", [1] * len(sizes))):
            for label, n in enumerate(counts):
                (root / split / f"class{label}").mkdir(parents=True)
                for i in range(n):
                    Image.fromarray(np.full((3, 3), i, np.uint8)).save(root / split / f"class{label}" / f"{i}.png")
        val = get_task_spec(f"folder:{root}").load(DataOptions(), "val")[1]
    assert dict(Counter(val.tolist())) == _expected(sizes)


def test_the_carve_is_a_function_of_the_data_alone() -> None:
    """Another process (a worker, a resumed run) with another random state carves the same samples."""
    code = ("import torch; from esper.data.array_tasks import stratified_val; torch.manual_seed(9); "
            "print(stratified_val(torch.arange(300).float(), torch.arange(300) % 3, 'here')[1][0].int().tolist())")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    there = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env).stdout
    here = stratified_val(torch.arange(300).float(), torch.arange(300) % 3, "here")[1][0]
    assert json.loads(there) == here.int().tolist() and len(here) == 30


def _shares(labels: torch.Tensor, classes: int) -> torch.Tensor:
    return torch.bincount(labels, minlength=classes).float() / len(labels)


def test_the_synthetic_tasks_draw_val_from_a_generator_of_random_labels() -> None:
    """esper's own tasks keep `val` as they always had it: the synthetic tasks draw it from their generator, CIFAR-10
    and Fashion-MNIST take the last images of the official training files. Their sources are shuffled, so each class
    holds about a tenth of `val`, as of `train` (the tests below check the real files where they are present)."""
    for split in ("train", "val"):
        assert torch.all((_shares(generate_synthetic_images(0, split)[1], 10) - 0.1).abs() < 0.03)


@pytest.mark.skipif(fashion_mnist_directory("data") is None, reason="Fashion-MNIST is not here")
def test_fashion_mnist_s_val_is_the_tail_of_a_shuffled_file() -> None:
    for split in ("train", "val"):
        assert torch.all((_shares(load_fashion_mnist("data", split)[1], 10) - 0.1).abs() < 0.01)


@pytest.mark.skipif(not (Path("data") / "cifar-10-batches-py").is_dir(), reason="CIFAR-10 is not in ./data")
def test_cifar10_s_val_is_the_tail_of_a_shuffled_file() -> None:
    val = load_cifar10("data", "val")[1]
    assert len(val) == CIFAR10_VAL_SIZE and torch.all((_shares(val, 10) - 0.1).abs() < 0.01)
