"""Procedural `synthetic` images and `synthetic_text` corpus."""

from __future__ import annotations

import torch

from esper.data.readers import EOS_TOKEN, encode_stories
from esper.data.synthetic import (
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
    assert SYNTHETIC_SPLIT_SIZES == {"train": 5000, "val": 2000, "test": 2000}
    for split in ("val", "test"):
        x, y = generate_synthetic_images(0, split)
        assert x.shape == (2000, 3, 32, 32) and x.dtype == torch.float32 and y.dtype == torch.int64
        assert torch.isfinite(x).all() and int(y.min()) >= 0 and int(y.max()) < 10


def test_images_deterministic_per_seed_and_split() -> None:
    a = generate_synthetic_images(7, "val")
    b = generate_synthetic_images(7, "val")
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    assert not torch.allclose(a[0], generate_synthetic_images(7, "test")[0])  # same size, another split's generators
    assert not torch.allclose(a[0][:32], generate_synthetic_images(7, "train")[0][:32])
    assert not torch.allclose(a[0], generate_synthetic_images(8, "val")[0])


def test_chunks_have_their_own_generators() -> None:
    x, _ = generate_synthetic_images(1, "train")
    assert x.shape[0] == 5000  # 39 chunks of 128 and a cut 40th
    assert not torch.equal(x[:50], x[128:178])  # a later chunk has its own generator


def test_class_pairs_in_lexicographic_order() -> None:
    assert len(TEXTURE_PAIRS) == 10
    assert TEXTURE_PAIRS[0] == (0, 1) and TEXTURE_PAIRS[3] == (0, 4) and TEXTURE_PAIRS[4] == (1, 2)
    assert TEXTURE_PAIRS[7] == (2, 3) and TEXTURE_PAIRS[9] == (3, 4)


def test_labels_roughly_uniform() -> None:
    _, y = generate_synthetic_images(2, "train")
    y = y[:640]
    counts = torch.bincount(y, minlength=10)
    assert int(counts.min()) >= 35 and int(counts.max()) <= 95


def test_labels_carry_texture_signal() -> None:
    """Orientation spectra identify the texture pair: a nearest-centroid probe on |FFT| is far above chance."""
    x, y = (t[:256] for t in generate_synthetic_images(3, "train"))
    xv, yv = (t[:128] for t in generate_synthetic_images(3, "val"))

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
    assert SYNTHETIC_TEXT_STORIES == {"train": 2000, "val": 200, "test": 200}


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
    test = synthetic_text_stories(0, "test")
    assert len(test) == 200 and test == synthetic_text_stories(0, "test")
    assert val != synthetic_text_stories(1, "val")


def test_text_windows_keep_every_story() -> None:
    for split in ("val", "test"):
        windows = load_synthetic_text(0, split, 64)
        assert windows.tail is not None and windows.inputs.dtype == torch.int64
        stream = torch.cat([windows.inputs[0, :1], windows.targets.reshape(-1), windows.tail[1].reshape(-1)])
        assert torch.equal(stream, encode_stories(synthetic_text_stories(0, split)))
        assert int((stream == EOS_TOKEN).sum()) == 200 and int(stream[-1]) == EOS_TOKEN
        assert int(stream.max()) <= EOS_TOKEN and int(stream.min()) >= 0
    train = load_synthetic_text(0, "train", 64)
    tokens = encode_stories(synthetic_text_stories(0, "train"))
    assert train.inputs.shape == ((tokens.numel() - 1) // 64, 64) and train.tail is None
    assert torch.equal(train.targets[:, :-1], train.inputs[:, 1:])
    assert torch.equal(train.inputs.reshape(-1), tokens[: train.inputs.numel()])
