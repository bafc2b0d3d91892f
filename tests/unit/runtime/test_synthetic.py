"""Procedural `synthetic` images and `synthetic_text` corpus."""

from __future__ import annotations

import torch

from esper.runtime.readers import EOS_TOKEN
from esper.runtime.synthetic import (
    ADJECTIVES,
    NAMES,
    NOUNS,
    SYNTHETIC_SPLIT_SIZES,
    SYNTHETIC_TEXT_STORIES,
    TEMPLATES,
    TEXTURE_PAIRS,
    VERBS,
    generate_synthetic_images,
    load_synthetic_text,
    synthetic_story,
    synthetic_text_stories,
)


def test_images_shape_dtype_and_default_sizes() -> None:
    x, y = generate_synthetic_images(0, "val", max_samples=64)
    assert x.shape == (64, 3, 32, 32) and x.dtype == torch.float32 and y.dtype == torch.int64
    assert torch.isfinite(x).all() and int(y.min()) >= 0 and int(y.max()) < 10
    assert SYNTHETIC_SPLIT_SIZES == {"train": 5000, "val": 2000}


def test_images_deterministic_per_seed_and_split() -> None:
    a = generate_synthetic_images(7, "train", max_samples=32)
    b = generate_synthetic_images(7, "train", max_samples=32)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    assert not torch.allclose(a[0], generate_synthetic_images(7, "val", max_samples=32)[0])
    assert not torch.allclose(a[0], generate_synthetic_images(8, "train", max_samples=32)[0])


def test_max_samples_is_prefix_across_chunks() -> None:
    x, y = generate_synthetic_images(1, "val", max_samples=200)
    xs, ys = generate_synthetic_images(1, "val", max_samples=20)
    assert torch.equal(xs, x[:20]) and torch.equal(ys, y[:20])
    assert not torch.equal(x[:50], x[150:200])  # a later chunk has its own generator


def test_class_pairs_in_lexicographic_order() -> None:
    assert len(TEXTURE_PAIRS) == 10
    assert TEXTURE_PAIRS[0] == (0, 1) and TEXTURE_PAIRS[3] == (0, 4) and TEXTURE_PAIRS[4] == (1, 2)
    assert TEXTURE_PAIRS[7] == (2, 3) and TEXTURE_PAIRS[9] == (3, 4)


def test_labels_roughly_uniform() -> None:
    _, y = generate_synthetic_images(2, "train", max_samples=640)
    counts = torch.bincount(y, minlength=10)
    assert int(counts.min()) >= 35 and int(counts.max()) <= 95


def test_labels_carry_texture_signal() -> None:
    """Orientation spectra identify the texture pair: a nearest-centroid probe on |FFT| is far above chance."""
    x, y = generate_synthetic_images(3, "train", max_samples=256)
    xv, yv = generate_synthetic_images(3, "val", max_samples=128)

    def features(images: torch.Tensor) -> torch.Tensor:
        f = torch.fft.fft2(images.mean(1)).abs().flatten(1)
        return f / f.norm(dim=1, keepdim=True)

    train_f = features(x)
    centroids = torch.stack([train_f[y == c].mean(0) for c in range(10)])
    accuracy = (features(xv) @ centroids.T).argmax(1).eq(yv).float().mean().item()
    assert accuracy > 0.4


def test_vocabulary_sizes() -> None:
    assert (len(NAMES), len(NOUNS), len(ADJECTIVES), len(VERBS), len(TEMPLATES)) == (8, 24, 12, 16, 6)
    assert len(set(NAMES)) == 8 and len(set(NOUNS)) == 24 and len(set(ADJECTIVES)) == 12 and len(set(VERBS)) == 16
    assert SYNTHETIC_TEXT_STORIES == {"train": 2000, "val": 200}


def test_story_structure() -> None:
    for seed in range(50):
        story = synthetic_story(seed)
        sentences = story.split(". ")
        assert 3 <= len(sentences) <= 6
        hero = story.split("named ")[1].split(".")[0]
        assert hero in NAMES and all(hero in s for s in sentences)
    assert synthetic_story(5) == synthetic_story(5) and synthetic_story(5) != synthetic_story(6)


def test_text_splits_deterministic_and_disjoint() -> None:
    val = synthetic_text_stories(0, "val")
    assert len(val) == 200 and val == synthetic_text_stories(0, "val")
    train = synthetic_text_stories(0, "train")
    assert len(train) == 2000 and not set(train) & set(val)
    assert val != synthetic_text_stories(1, "val")


def test_text_windows_keep_every_story() -> None:
    val = load_synthetic_text(0, "val", 64)
    assert val.tail is not None and val.inputs.dtype == torch.int64
    stream = torch.cat([val.inputs[0, :1], val.targets.reshape(-1), val.tail[1].reshape(-1)])
    assert int((stream == EOS_TOKEN).sum()) == 200 and int(stream[-1]) == EOS_TOKEN
    assert int(stream.max()) <= EOS_TOKEN and int(stream.min()) >= 0
    train = load_synthetic_text(0, "train", 64, max_samples=10)
    assert train.inputs.shape == (10, 64) and train.tail is None
    assert torch.equal(train.targets[:, :-1], train.inputs[:, 1:])
