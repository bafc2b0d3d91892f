"""The three splits of every task, and what reads them.

`test` shares no sample with `train` or `val` for any task; `val` is the documented slice of the training data; a
sample cap draws one subset per paired episode (shared by its controllers, different across episodes); and the test
split is read only after an episode's last decision: relabeling it changes the test scores and nothing else.
"""

from __future__ import annotations

import hashlib
import json
from collections import defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from esper.cli.main import main
from esper.data import builtin_tasks, readers
from esper.data.batches import DeviceDataset
from esper.data.readers import SPLITS, Split, TokenWindows, encode_stories, tinystories_stories
from esper.data.synthetic import synthetic_text_stories
from esper.data.tasks import SYNTHETIC_DATA_SEED, TASKS, DataCache, DataOptions, TaskSpec, get_task_spec
from esper.env import EpochData, MorphoEnv
from esper.env import groups as groups_module
from esper.env.setting import EpisodeSetting
from esper.evaluation.comparison import parse_controllers, run_comparison
from esper.evaluation.episodes import EpisodePlan
from esper.storage.rundir import RunDirectory, read_jsonl
from esper.tolaria import TrainState
from unit.data.fake_datasets import CIFAR_TRAIN_BATCHES, write_cifar, write_fashion

CPU = torch.device("cpu")
STORIES = [f"Story {i}: Mia found a red ball.\nShe was glad." for i in range(40)]
VALID_STORIES = [f"Held-out story {i}: Ben lost his hat." for i in range(5)]


def _digest(t: torch.Tensor) -> str:
    return hashlib.sha1(t.contiguous().cpu().numpy().tobytes()).hexdigest()


def _sample_hashes(inputs: torch.Tensor) -> list[str]:
    return [_digest(x) for x in inputs]


def _images(spec: TaskSpec, options: DataOptions, split: Split) -> tuple[torch.Tensor, torch.Tensor]:
    data = spec.load(options, split)
    assert not isinstance(data, TokenWindows)
    return data


def _token_stream(windows: TokenWindows) -> torch.Tensor:
    """Every token a split's windows predict, in order, with the first input token in front."""
    tail = [] if windows.tail is None else [windows.tail[1].reshape(-1)]
    first = windows.inputs[0, :1] if windows.inputs.shape[0] else windows.tail[0][0, :1]
    return torch.cat([first, windows.targets.reshape(-1), *tail])


def _assert_disjoint(contents: dict[Split, list[str]]) -> None:
    assert set(contents) == set(SPLITS)
    for split, items in contents.items():
        assert items, f"{split} is empty"
    train, val, test = (set(contents[s]) for s in SPLITS)
    assert not test & train and not test & val and not train & val


# ------------------------------------------------------------------------------------------ disjoint test splits


def _synthetic_contents(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[Split, list[str]]:
    spec = get_task_spec(name)
    return {s: _sample_hashes(_images(spec, DataOptions(), s)[0]) for s in SPLITS}


def _text_contents(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[Split, list[str]]:
    spec = get_task_spec(name)
    contents: dict[Split, list[str]] = {}
    for split in SPLITS:
        stories = synthetic_text_stories(SYNTHETIC_DATA_SEED, split)
        windows = spec.load(DataOptions(), split)
        assert isinstance(windows, TokenWindows)
        _assert_windows_hold(windows, stories, split)
        contents[split] = stories
    return contents


def _assert_windows_hold(windows: TokenWindows, stories: list[str], split: Split) -> None:
    """The loader's windows are exactly these stories (evaluation splits to the last token, train up to its tail)."""
    tokens = encode_stories(stories)
    stream = _token_stream(windows)
    if split == "train":
        assert windows.tail is None and torch.equal(stream, tokens[: stream.numel()])
        assert tokens.numel() - stream.numel() < windows.inputs.shape[1] + 1
    else:
        assert torch.equal(stream, tokens)


def _cifar_contents(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[Split, list[str]]:
    files = write_cifar(tmp_path, per_batch=4)
    monkeypatch.setattr(readers, "CIFAR10_VAL_SIZE", 6)
    spec, options = get_task_spec(name), DataOptions(data_dir=tmp_path)
    contents = {s: _sample_hashes(_images(spec, options, s)[0].flatten(1)) for s in SPLITS}
    training = [_digest(torch.from_numpy(row)) for b in CIFAR_TRAIN_BATCHES for row in files[b][0]]
    assert contents["train"] + contents["val"] == training  # together, the training batches in order
    assert contents["test"] == [_digest(torch.from_numpy(row)) for row in files["test_batch"][0]]
    return contents


def _fashion_contents(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[Split, list[str]]:
    files = write_fashion(tmp_path / "fashion-mnist", gz=True, n=20, n_test=7)
    monkeypatch.setattr(readers, "FASHION_MNIST_VAL_SIZE", 5)
    spec, options = get_task_spec(name), DataOptions(data_dir=tmp_path)
    contents = {s: _sample_hashes(_images(spec, options, s)[0][:, 0]) for s in SPLITS}
    assert contents["train"] + contents["val"] == [_digest(torch.from_numpy(x)) for x in files["train"][0]]
    assert contents["test"] == [_digest(torch.from_numpy(x)) for x in files["t10k"][0]]
    return contents


def _tinystories_contents(options: DataOptions, data_dir: Path, data_path: Path | None) -> dict[Split, list[str]]:
    spec = get_task_spec("tinystories")
    contents: dict[Split, list[str]] = {}
    for split in SPLITS:
        stories = tinystories_stories(data_dir, split, data_path)
        windows = spec.load(options, split)
        assert isinstance(windows, TokenWindows)
        _assert_windows_hold(windows, stories, split)
        contents[split] = stories
    return contents


def _tinystories_two_files(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[Split, list[str]]:
    folder = tmp_path / "tinystories"
    folder.mkdir()
    (folder / "train.jsonl").write_text("\n".join(json.dumps({"text": s}) for s in STORIES), encoding="utf-8")
    (folder / "valid.txt").write_text("\n\n".join(VALID_STORIES), encoding="utf-8")
    contents = _tinystories_contents(DataOptions(data_dir=tmp_path), tmp_path, None)
    assert contents == {"train": STORIES[:38], "val": STORIES[38:], "test": VALID_STORIES}  # 95/5 + valid file
    return contents


def _tinystories_one_file(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[Split, list[str]]:
    path = tmp_path / "corpus.txt"
    path.write_text("<|endoftext|>".join(STORIES), encoding="utf-8")
    contents = _tinystories_contents(DataOptions(data_dir=tmp_path / "unused", data_path=path), tmp_path / "unused",
                                     path)
    assert contents == {"train": STORIES[:36], "val": STORIES[36:38], "test": STORIES[38:]}  # 90/5/5
    return contents


Contents = Callable[[str, Path, pytest.MonkeyPatch], dict[Split, list[str]]]
CASES: dict[str, tuple[str, Contents]] = {  # case: (task, the splits' contents as hashes or stories)
    "synthetic": ("synthetic", _synthetic_contents),
    "synthetic_text": ("synthetic_text", _text_contents),
    "cifar10": ("cifar10", _cifar_contents),
    "cifar10_deep": ("cifar10_deep", _cifar_contents),
    "fashion_mnist": ("fashion_mnist", _fashion_contents),
    "tinystories-train-and-valid": ("tinystories", _tinystories_two_files),
    "tinystories-data-path": ("tinystories", _tinystories_one_file),
}


def test_every_task_has_a_disjointness_case() -> None:
    assert {task for task, _ in CASES.values()} == set(TASKS)


@pytest.mark.parametrize("case", sorted(CASES))
def test_test_split_is_disjoint_from_train_and_val(case: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                                    ) -> None:
    task, contents = CASES[case]
    _assert_disjoint(contents(task, tmp_path, monkeypatch))


# ------------------------------------------------------------------------------------------- val is carved


@pytest.mark.parametrize(("task", "val_size"), [("cifar10", 6), ("cifar10_deep", 6), ("fashion_mnist", 5)])
def test_val_is_the_last_n_training_samples(task: str, val_size: int, tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """Through the task and the data cache: `val` is the last N of the official training data, `train` the rest."""
    if task == "fashion_mnist":
        images, labels = write_fashion(tmp_path / "fashion-mnist", gz=False, n=20, n_test=3)["train"]
        training = torch.from_numpy(images).unsqueeze(1), torch.from_numpy(labels).long()
        monkeypatch.setattr(readers, "FASHION_MNIST_VAL_SIZE", val_size)
    else:
        files = write_cifar(tmp_path, per_batch=4)
        training = (torch.cat([torch.from_numpy(files[b][0]) for b in CIFAR_TRAIN_BATCHES]).view(-1, 3, 32, 32),
                    torch.tensor([label for b in CIFAR_TRAIN_BATCHES for label in files[b][1]]))
        monkeypatch.setattr(readers, "CIFAR10_VAL_SIZE", val_size)
    cache = DataCache(DataOptions(data_dir=tmp_path))
    spec = get_task_spec(task)
    cut = 20 - val_size
    train, val = cache.pool(spec, "train", CPU), cache.pool(spec, "val", CPU)
    assert torch.equal(train.inputs, training[0][:cut]) and torch.equal(train.targets, training[1][:cut])
    assert torch.equal(val.inputs, training[0][cut:]) and torch.equal(val.targets, training[1][cut:])
    assert cache.pool(spec, "test", CPU).num_full == (3 if task == "fashion_mnist" else 4)


# ------------------------------------------------------------------------------- capped subsets per paired seed


def _build(seed: int, devices: list[torch.device], cache: DataCache | None = None) -> EpochData:
    return EpochData.build(get_task_spec("synthetic"), cache or DataCache(DataOptions()), devices, batch_size=32,
                           seed=seed, max_train_samples=64, max_val_samples=32)


def test_capped_epoch_data_is_drawn_per_seed() -> None:
    """Under a cap, one seed's data is the same whoever builds it (the controllers of one paired episode, on any
    device); another seed sees other images."""
    cache = DataCache(DataOptions())
    a = _build(1, [CPU, torch.device("cpu:0")], cache)
    again, other = _build(1, [CPU]), _build(2, [CPU], cache)
    for split in ("train", "val"):
        datasets = {k: getattr(d, split).datasets for k, d in (("a", a), ("again", again), ("other", other))}
        size = 64 if split == "train" else 32
        first = datasets["a"]["cpu"]
        assert len(first) == size
        pool = set(_sample_hashes(cache.pool(get_task_spec("synthetic"), split, CPU).inputs))
        assert set(_sample_hashes(first.inputs)) <= pool
        for same in (datasets["a"]["cpu:0"], datasets["again"]["cpu"]):
            assert torch.equal(same.inputs, first.inputs) and torch.equal(same.targets, first.targets)
        seen, seen_other = set(_sample_hashes(first.inputs)), set(_sample_hashes(datasets["other"]["cpu"].inputs))
        assert len(seen) == len(seen_other) == size and seen != seen_other


def test_compare_shares_each_episodes_samples_and_draws_new_ones_per_episode(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`esper compare` with caps: within a paired episode static and random train, validate and are tested on the
    same tensors, batch for batch; the next episode draws other train, val and test subsets."""
    subsets: list[tuple[str, int, DeviceDataset]] = []  # (split, data seed, dataset), in call order
    get = DataCache.get

    def recording_get(self: DataCache, task: TaskSpec, split: Split, device: torch.device | str,
                      max_samples: int | None = None, *, seed: int | None = None) -> DeviceDataset:
        dataset = get(self, task, split, device, max_samples, seed=seed)
        assert seed is not None
        subsets.append((split, seed, dataset))
        return dataset

    seen: dict[tuple[str, int, str], list[tuple[Any, ...]]] = defaultdict(list)  # (env, episode, split) → batches
    owner: dict[int, tuple[str, int]] = {}  # id(TrainState) → (env, episode), refreshed as envs train
    train_batch, validate_env = MorphoEnv.train_batch, MorphoEnv.validate_batch
    validate_test = groups_module.validate_batch

    def record_train(self: MorphoEnv, x: torch.Tensor, y: torch.Tensor, *, collect_gradients: bool) -> None:
        owner[id(self.ts)] = (self.controller_name, self.spec.episode)
        seen[(self.controller_name, self.spec.episode, "train")].append((_digest(x), _digest(y), *sorted(y.tolist())))
        train_batch(self, x, y, collect_gradients=collect_gradients)

    def record_val(self: MorphoEnv, x: torch.Tensor, y: torch.Tensor, ablate: tuple[str, ...],
                   probe: tuple[str, ...]) -> None:
        seen[(self.controller_name, self.spec.episode, "val")].append((*_sample_hashes(x), _digest(y)))
        validate_env(self, x, y, ablate, probe)

    def record_test(ts: TrainState, x: torch.Tensor, y: torch.Tensor, *args: Any, **kwargs: Any) -> None:
        name, episode = owner[id(ts)]
        seen[(name, episode, "test")].append((*_sample_hashes(x), _digest(y)))
        validate_test(ts, x, y, *args, **kwargs)

    monkeypatch.setattr(DataCache, "get", recording_get)
    monkeypatch.setattr(MorphoEnv, "train_batch", record_train)
    monkeypatch.setattr(MorphoEnv, "validate_batch", record_val)
    monkeypatch.setattr(groups_module, "validate_batch", record_test)
    run = tmp_path / "c"
    assert main(["compare", "--controllers", "static", "random", "--task", "synthetic", "--episodes", "2",
                 "--max-epochs", "2", "--max-train-samples", "64", "--max-val-samples", "32",
                 "--max-test-samples", "64", "--device", "cpu", "--run-dir", str(run), "--no-tui",
                 "--no-tensorboard", "--telemetry-level", "minimal", "--param-cost", "1.0"]) == 0

    seeds = list(dict.fromkeys(seed for _, seed, _ in subsets))
    assert len(seeds) == 2  # one data seed per paired episode
    drawn = {(split, seeds.index(seed)): dataset for split, seed, dataset in subsets}
    assert len(drawn) == 6
    pools = DataCache(DataOptions())
    for split, size in (("train", 64), ("val", 32), ("test", 64)):
        pool = set(_sample_hashes(pools.pool(get_task_spec("synthetic"), split, CPU).inputs))
        first, second = (set(_sample_hashes(drawn[(split, e)].inputs)) for e in (0, 1))
        assert len(first) == len(second) == size and first | second <= pool and first != second
    for episode in (0, 1):
        for split in ("train", "val", "test"):
            batches = seen[("static", episode, split)]
            assert batches and seen[("random", episode, split)] == batches, (episode, split)
        # the envs validated on the episode's val subset each epoch (one batch), and were tested once on its test subset
        for split, passes in (("val", 2), ("test", 1)):
            scored = [list(batch[:-1]) for batch in seen[("static", episode, split)]]
            assert scored == [_sample_hashes(drawn[(split, episode)].inputs)] * passes
        # each epoch trains on the episode's 64-sample subset (one batch of the task's 128), augmented
        labels = sorted(drawn[("train", episode)].targets.tolist())
        assert [list(batch[2:]) for batch in seen[("static", episode, "train")]] == [labels, labels]
    rows = read_jsonl(run / "episodes.jsonl")
    assert len(rows) == 4 and all(r["final_test_accuracy"] is not None for r in rows)
    assert all(abs(r["final_test_accuracy"] * 64 / 100 - round(r["final_test_accuracy"] * 64 / 100)) < 1e-6
               for r in rows)  # scored on 64 test images


# ------------------------------------------------------------------------- the test split cannot steer anything


@pytest.fixture
def one_thread() -> Iterator[None]:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def _compare(run: Path) -> None:
    task = get_task_spec("synthetic")
    episode = EpisodeSetting(task=task.name, max_epochs=3, batch_size=32, max_train_samples=64, max_val_samples=32)
    plan = EpisodePlan(episode=episode, seed=42, devices=[CPU], max_test_samples=64, param_cost=1.0)
    run_comparison(parse_controllers(["static", "heuristic", "random"]), plan, 2, DataCache(DataOptions()),
                   run_dir=RunDirectory(run))


TEST_ONLY = ("final_test_accuracy", "final_test_loss", "wall_seconds")


def test_relabeling_the_test_split_changes_test_scores_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                             one_thread: None) -> None:
    """Two paired comparisons that differ only in the test split's labels (every test label moved to the next
    class): decisions, rewards and validation numbers are bit-identical; the test scores are not."""
    _compare(tmp_path / "plain")
    generate = builtin_tasks.generate_synthetic_images

    def relabeled(seed: int, split: Split) -> tuple[torch.Tensor, torch.Tensor]:
        x, y = generate(seed, split)
        return (x, (y + 1) % 10) if split == "test" else (x, y)

    monkeypatch.setattr(builtin_tasks, "generate_synthetic_images", relabeled)
    _compare(tmp_path / "relabeled")

    plain, changed = tmp_path / "plain", tmp_path / "relabeled"
    assert (plain / "steps.jsonl").read_bytes() == (changed / "steps.jsonl").read_bytes()
    rows, relabeled_rows = read_jsonl(plain / "episodes.jsonl"), read_jsonl(changed / "episodes.jsonl")
    assert len(rows) == len(relabeled_rows) == 6
    assert {r["controller"] for r in rows} == {"static", "heuristic", "random"}
    assert any(r["action_counts"]["GERMINATE"] for r in rows)  # decisions that could have leaned on the test split
    for a, b in zip(rows, relabeled_rows, strict=True):
        assert {k: v for k, v in a.items() if k not in TEST_ONLY} == {k: v for k, v in b.items() if k not in TEST_ONLY}
        assert a["final_test_loss"] != b["final_test_loss"]
    assert any(a["final_test_accuracy"] != b["final_test_accuracy"] for a, b in zip(rows, relabeled_rows, strict=True))
