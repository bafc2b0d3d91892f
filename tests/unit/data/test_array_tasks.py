"""Tasks on images of one's own: `npz:PATH` and `folder:DIR` read class count, channels and size from the data, carve
`val` from `train` when absent, train without augmentation unless asked, and refuse malformed data naming the problem
and the fix."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from esper.data.array_tasks import arrays_task
from esper.data.batches import Augmentation
from esper.data.readers import DatasetFormatError, DataWarning
from esper.data.task_registry import TaskRegistry
from esper.data.tasks import TASKS, DataOptions, get_task_spec
from esper.kasmina.hosts import CNNHost
from esper.storage.rundir import default_run_dir


def _arrays(n: int = 40, *, size: int = 16, classes: int = 5, channels: int | None = None, seed: int = 0
            ) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    shape = (size, size) if channels is None else (channels, size, size)

    def split(m: int) -> tuple[np.ndarray, np.ndarray]:
        return rng.integers(0, 256, (m, *shape), dtype=np.uint8), np.arange(m) % classes

    (x_train, y_train), (x_test, y_test) = split(n), split(n // 2)
    return {"x_train": x_train, "y_train": y_train, "x_test": x_test, "y_test": y_test}


def _npz(tmp_path: Path, arrays: dict[str, Any], name: str = "data.npz") -> str:
    path = tmp_path / name
    np.savez(path, **arrays)
    return f"npz:{path}"


def test_an_npz_task_takes_its_shape_and_classes_from_the_data(tmp_path: Path) -> None:
    name = _npz(tmp_path, _arrays(40))
    task = get_task_spec(name)
    assert (task.name, task.topology, task.task_type) == (name, "cnn", "classification")
    assert (task.input_shape, task.num_outputs) == ((1, 16, 16), 5)
    assert task.augment == "none" and task.augmentation(None) is None  # a flip or a crop may change a label
    assert task.augmentation("flip,crop") == Augmentation(2, horizontal_flip=True)  # an eighth of 16 px
    host = task.host_factory()
    assert isinstance(host, CNNHost) and host.blocks[0][0].in_channels == 1 and host.head.out_features == 5
    assert tuple(host.eval()(torch.zeros(2, 1, 16, 16)).shape) == (2, 5)
    assert get_task_spec(name) is task  # resolved once per process
    train, val, test = (task.load(DataOptions(), s) for s in ("train", "val", "test"))
    assert (len(train[1]), len(val[1]), len(test[1])) == (35, 5, 20)  # of each class of 8, one sample
    assert sorted(val[1].tolist()) == [0, 1, 2, 3, 4] and task.val_split.startswith("carved from train")
    assert train[0].dtype == torch.uint8 and train[0].shape[1:] == (1, 16, 16)
    mean, std = task.normalization  # type: ignore[misc]
    assert len(mean) == len(std) == 1 and 0.3 < mean[0] < 0.7


@pytest.mark.parametrize(("layout", "expected"), [((3, 8, 8), (3, 8, 8)), ((8, 8, 3), (3, 8, 8)),
                                                  ((1, 9, 12), (1, 9, 12))])
def test_channels_first_or_last_and_any_size(layout: tuple[int, ...], expected: tuple[int, ...]) -> None:
    rng = np.random.default_rng(1)
    arrays = {f"{k}_{s}": (rng.random((6, *layout), dtype=np.float32) if k == "x" else np.arange(6) % 3)
              for s in ("train", "val", "test") for k in ("x", "y")}
    task = arrays_task("mine", arrays, augment="crop")
    assert task.input_shape == expected and task.num_outputs == 3 and task.augment == "crop"
    assert len(task.load(DataOptions(), "val")[1]) == 6 and task.val_split == "given (x_val, y_val)"  # used as is
    host = task.host_factory().eval()
    assert tuple(host(torch.zeros(2, *expected)).shape) == (2, 3)


@pytest.mark.parametrize(("change", "match"), [
    ({"x_test": None}, r"needs arrays x_train, y_train, x_test, y_test .* missing \['x_test'\]"),
    ({"x_val": np.zeros((2, 16, 16), np.uint8)}, "x_val with y_val, or neither"),
    ({"y_train": np.arange(40) % 4 + 1}, r"has no sample of class\(es\) \[0\]"),
    ({"y_test": -np.ones(20, dtype=np.int64)}, "negative labels"),
    ({"y_train": np.zeros(40, dtype=np.float32)}, "one integer class label per image"),
    ({"x_test": np.zeros((20, 8, 8), np.uint8)}, r"x_test is torch.uint8 \(1, 8, 8\) but x_train is"),
    ({"x_train": np.zeros((40, 5, 16, 16), np.uint8)}, "with 1 or 3 channels"),
    ({"x_train": np.full((40, 16, 16), np.nan, np.float32)}, "NaN or infinite pixels"),
    ({"y_test": np.arange(7)}, "x_test holds 20 images and y_test 7 labels"),
    ({"x_val": np.zeros((4, 16, 16), np.uint8), "y_val": np.array([0, 1, 2, 3])},
     r"the validation split has no sample of class\(es\) \[4\], which train has"),
    ({"y_train": np.r_[np.zeros(39, np.int64), 1], "y_test": np.arange(20) % 2},
     r"class 1 has 1 training sample.*give class 1 more training samples, or give x_val and y_val"),
])
def test_malformed_arrays_name_the_problem_and_the_fix(tmp_path: Path, change: dict[str, Any], match: str) -> None:
    arrays = {k: v for k, v in {**_arrays(40), **change}.items() if v is not None}
    with pytest.raises(DatasetFormatError, match=match):
        get_task_spec(_npz(tmp_path, arrays))


def test_an_unreadable_or_missing_npz_is_an_error_naming_it(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"no such file; pass the path of an \.npz file"):
        get_task_spec(f"npz:{tmp_path / 'absent.npz'}")
    (tmp_path / "broken.npz").write_text("not a zip")
    with pytest.raises(DatasetFormatError, match=r"write it with numpy\.savez"):
        get_task_spec(f"npz:{tmp_path / 'broken.npz'}")


def test_a_folder_per_class_of_pngs(tmp_path: Path) -> None:
    from PIL import Image

    rng = np.random.default_rng(2)
    for split, n in (("train", 6), ("test", 3)):
        for label in ("circle", "square"):
            (tmp_path / split / label).mkdir(parents=True)
            for i in range(n):
                pixels = rng.integers(0, 256, (12, 12, 3), dtype=np.uint8)
                Image.fromarray(pixels).save(tmp_path / split / label / f"{i}.png")
    task = get_task_spec(f"folder:{tmp_path}")
    assert (task.input_shape, task.num_outputs) == ((3, 12, 12), 2)
    x, y = task.load(DataOptions(), "test")
    assert x.shape == (6, 3, 12, 12) and y.tolist() == [0, 0, 0, 1, 1, 1]  # classes: sorted folder names
    (tmp_path / "test" / "triangle").mkdir()
    with pytest.raises(DatasetFormatError, match=r"test/ has classes \['triangle'\] that train/ lacks"):
        get_task_spec(f"folder:{tmp_path}/")  # another name, so resolved anew
    with pytest.raises(ValueError, match=r"needs .*train and .*test, each with one folder of images \(\.png"):
        get_task_spec(f"folder:{tmp_path / 'nothing'}")
    (tmp_path / "test" / "triangle").rmdir()
    (tmp_path / "train" / "circle" / "broken.png").write_bytes(b"not a png")
    with pytest.raises(DatasetFormatError, match=r"broken\.png is not a readable image.*replace or remove it"):
        get_task_spec(f"folder:{tmp_path}//")


def _png_folders(root: Path, counts: dict[str, dict[str, int]]) -> None:
    """`root/<split>/<class>/` with that many 4×4 grey PNGs (a class of 0 is an empty folder)."""
    from PIL import Image

    for split, classes in counts.items():
        for name, n in classes.items():
            (root / split / name).mkdir(parents=True)
            for i in range(n):
                Image.fromarray(np.full((4, 4), i, np.uint8)).save(root / split / name / f"{i}.png")


@pytest.mark.parametrize(("counts", "match"), [
    ({"train": {"c0": 3, "c1": 3, "c2": 0}, "test": {"c0": 1}}, r"train/c2 is empty; put class c2's images"),
    ({"train": {"c0": 3, "c1": 3}, "test": {"c0": 1, "c1": 0}}, r"test/c1 is empty"),
    ({"train": {"c0": 3, "c1": 3}, "val": {"c0": 1}, "test": {"c0": 1}}, r"val/ has no folder for class c1"),
    ({"train": {"c0": 3, "c1": 1}, "test": {"c0": 1}}, r"train/c1 holds 1 image.*add images to train/c1, or give"),
])
def test_a_folder_that_would_mislead_a_run_is_refused_naming_the_folder(tmp_path: Path, counts: dict[str, Any],
                                                                        match: str) -> None:
    _png_folders(tmp_path, counts)
    with pytest.raises(DatasetFormatError, match=match):
        get_task_spec(f"folder:{tmp_path}")


def test_a_class_folder_without_images_says_which_files_are_read(tmp_path: Path) -> None:
    _png_folders(tmp_path, {"train": {"c0": 3, "c1": 0}, "test": {"c0": 1}})
    (tmp_path / "train" / "c1" / "scan.tiff").write_bytes(b"not read")
    with pytest.raises(DatasetFormatError, match=r"train/c1 holds no images \(esper reads \.png, \.jpg, \.jpeg, "
                                                 r"\.bmp files; it found scan\.tiff\)"):
        get_task_spec(f"folder:{tmp_path}")


def test_files_that_are_not_images_are_left_out_and_counted_in_one_warning(tmp_path: Path) -> None:
    _png_folders(tmp_path, {"train": {"c0": 3, "c1": 3}, "test": {"c0": 1, "c1": 1}})
    for stray in ("train/c0/notes.txt", "train/c1/.DS_Store", "test/c1/Thumbs.db", "train/README"):
        (tmp_path / stray).write_text("not an image")
    with pytest.warns(DataWarning) as caught:
        task = get_task_spec(f"folder:{tmp_path}")
    assert len(caught) == 1
    assert str(caught[0].message) == (f"folder:{tmp_path}: left out 4 entries that are not images (.png, .jpg, "
                                      f".jpeg, .bmp): test/c1/Thumbs.db, train/README, train/c0/notes.txt, ...")
    assert len(task.load(DataOptions(), "train")[1]) + len(task.load(DataOptions(), "val")[1]) == 6


def test_tasks_register_in_one_place_and_build_on_first_use() -> None:
    registry = TaskRegistry()
    built: list[str] = []

    def factory() -> Any:
        built.append("mine")
        return arrays_task("mine", _arrays(20, classes=4))

    registry.register("Mine", factory)
    assert list(registry) == ["mine"] and built == []  # nothing is read before a run asks for the task
    assert registry.resolve("MINE").num_outputs == 4 and registry.resolve("mine") is registry["mine"]
    assert built == ["mine"]
    with pytest.raises(ValueError, match="already registered"):
        registry.register("mine", factory)
    with pytest.raises(ValueError, match="plain identifier"):
        registry.register("npz:x", factory)
    registry.register("other", lambda: arrays_task("not_other", _arrays(20)))
    with pytest.raises(ValueError, match="built a task named 'not_other'"):
        registry.resolve("other")
    with pytest.raises(ValueError, match=r"Unknown task 'nope'. Available: mine, other .*--plugin MODULE"):
        registry.resolve("nope")


def test_esper_s_own_tasks_and_forms_are_registered_the_same_way() -> None:
    assert {"synthetic", "cifar10", "fashion_mnist", "tinystories"} <= set(TASKS)
    assert [f.usage for f in TASKS.forms()] == ["family:FAMILY/TYPE", "folder:DIR", "npz:PATH.npz"]


def test_a_file_task_names_its_run_directory_by_form_and_stem(tmp_path: Path) -> None:
    path = default_run_dir(tmp_path, "compare", f"npz:{tmp_path}/my data.npz", 3, {})
    other = default_run_dir(tmp_path, "compare", f"npz:{tmp_path}/elsewhere/my data.npz", 3, {})
    assert path.name.startswith("compare_npz-my-data-") and "_s3_" in path.name and path.parent == tmp_path
    assert other.name != path.name
