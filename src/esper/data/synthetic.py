"""Procedural data for the `synthetic` and `synthetic_text` tasks.

Both are deterministic from (seed, split) and need no files, so tests and quick runs never depend on downloads.
Each split draws from generators keyed by its own name, so `test` is disjoint from `train` and `val` by construction.
Generation is chunked with one generator per chunk (images) or per story (text).
"""

from __future__ import annotations

import itertools
import math
import random

import torch
from torch import Tensor

from esper.data.readers import Split, TokenWindows, encode_stories, make_windows
from esper.leyline.seeding import derive_seed

# ------------------------------------------------------------------------------------------------------ images

SYNTHETIC_SPLIT_SIZES: dict[Split, int] = {"train": 5000, "val": 2000, "test": 2000}
NUM_TEXTURES = 5
TEXTURE_PAIRS: tuple[tuple[int, int], ...] = tuple(itertools.combinations(range(NUM_TEXTURES), 2))
"""Class index → unordered texture pair (a < b) in lexicographic order: (0,1)=0, (0,2)=1, …, (3,4)=9."""

IMAGE_SIZE = 32
NOISE_STD = 0.9
"""Pixel noise. At 0.5, with precise BatchNorm statistics, the base-8 host keeps climbing to ~90 % within 25 epochs,
leaving no plateau for seeds; at 0.9 it plateaus near 75 % by epoch ~10 while a (32, 64, 128) host reaches ~81 %:
a task a small host learns to 70–80 % with about 5 pp of headroom that more capacity can claim."""
_CHUNK = 128
_PAIR_TABLE = torch.tensor(TEXTURE_PAIRS)
STEADY_CONTRAST = 0.85
"""The contrast of every image without photometric jitter: the middle of the jittered range (0.5–1.2)."""


def _chunk(seed: int, split: Split, chunk_index: int, jitter: bool) -> tuple[Tensor, Tensor]:
    """Generate `_CHUNK` images with a generator of their own."""
    g = torch.Generator().manual_seed(derive_seed("synthetic", seed, split, chunk_index))
    n = _CHUNK
    labels = torch.randint(0, len(TEXTURE_PAIRS), (n,), generator=g)
    pairs = _PAIR_TABLE[labels]
    swap = torch.rand(n, generator=g) < 0.5  # which region gets which texture
    textures = torch.where(swap.unsqueeze(1), pairs.flip(1), pairs)  # (n, 2): texture of region 0, region 1

    theta = torch.deg2rad(10.0 + 17.0 * textures.float()) + 0.05 * torch.randn(n, 2, generator=g)
    freq = 4.0 + torch.rand(n, 2, generator=g) - 0.5
    phase = 2 * math.pi * torch.rand(n, 2, 2, generator=g)
    colour = 0.2 + 0.8 * torch.rand(n, 2, 3, generator=g)

    coords = torch.arange(IMAGE_SIZE, dtype=torch.float32) - (IMAGE_SIZE - 1) / 2
    k = (2 * math.pi / IMAGE_SIZE) * freq
    ax = (k * theta.sin()).view(n, 2, 1, 1) * coords.view(1, 1, 1, -1)
    by = (k * theta.cos()).view(n, 2, 1, 1) * coords.view(1, 1, -1, 1)
    phi = phase.view(n, 2, 2, 1, 1)
    # u± = x·sin(±θ) + y·cos(±θ): the two components are mirror images under x → −x.
    plaid = torch.sin((ax + phi[:, :, 0]) + by).add_(torch.sin((phi[:, :, 1] - ax) + by)).mul_(0.5)

    vertical = torch.rand(n, generator=g) < 0.5
    boundary = 16 + torch.randint(-6, 7, (n,), generator=g)
    pixel = torch.arange(IMAGE_SIZE)
    position = torch.where(vertical.view(n, 1, 1), pixel.view(1, 1, -1), pixel.view(1, -1, 1))  # column or row
    second = (position >= boundary.view(n, 1, 1)).unsqueeze(1)  # (n, 1, H, W): pixels of region 1
    mix = torch.where(second, colour[:, 1].view(n, 3, 1, 1), colour[:, 0].view(n, 3, 1, 1))
    mix.mul_(torch.where(second, plaid[:, 1:2], plaid[:, 0:1]))

    contrast = 0.5 + 0.7 * torch.rand(n, 1, 1, 1, generator=g)
    brightness = 0.3 * torch.randn(n, 3, 1, 1, generator=g)
    if not jitter:  # drawn all the same, so the noise (and every image's content) matches its jittered twin
        contrast, brightness = torch.full_like(contrast, STEADY_CONTRAST), torch.zeros_like(brightness)
    noise = torch.randn(n, 3, IMAGE_SIZE, IMAGE_SIZE, generator=g).mul_(NOISE_STD)
    return noise.add_(brightness).addcmul_(mix, contrast), labels


def generate_synthetic_images(seed: int, split: Split, *, jitter: bool = True) -> tuple[Tensor, Tensor]:
    """float32 images (N, 3, 32, 32), already on the scale the model sees (no normalization), and int64 labels.

    Stored as float rather than uint8 because the values are unbounded (Gaussian brightness and noise). Without
    `jitter` every image has the same contrast and no per-channel brightness shift (a task family varies it); the
    labels, textures and noise stay those of the jittered images.
    """
    n = SYNTHETIC_SPLIT_SIZES[split]
    chunks = [_chunk(seed, split, i, jitter) for i in range(-(-n // _CHUNK))]
    return torch.cat([c[0] for c in chunks])[:n], torch.cat([c[1] for c in chunks])[:n]


# -------------------------------------------------------------------------------------------------------- text

SYNTHETIC_TEXT_STORIES: dict[Split, int] = {"train": 2000, "val": 200, "test": 200}
NAMES = ("Lily", "Tom", "Mia", "Ben", "Sue", "Max", "Anna", "Sam")
NOUNS = (
    "ball", "cat", "dog", "tree", "box", "cake", "bird", "car", "hat", "boat", "book", "fish",
    "flower", "kite", "house", "apple", "star", "frog", "cup", "shoe", "toy", "duck", "bear", "drum",
)  # fmt: skip
ADJECTIVES = ("big", "small", "red", "blue", "happy", "sad", "soft", "shiny", "funny", "little", "brave", "quiet")
VERBS = (
    "saw", "found", "liked", "took", "made", "lost", "wanted", "shared",
    "held", "painted", "hid", "chased", "dropped", "fixed", "washed", "hugged",
)  # fmt: skip
TEMPLATES = (
    "Once upon a time, there was a {adj} child named {hero}.",
    "{hero} {verb} a {adj} {noun}.",
    "One day, {friend} {verb} the {noun}, and {hero} was very {adj}.",
    "The {noun} was {adj}, so {hero} {verb} it.",
    "{hero} and {friend} {verb} the {adj} {noun} together.",
    "At the end of the day, {hero} {verb} the {noun} again.",
)
"""The first template opens every story; later sentences draw from the rest, all naming the protagonist again."""


def synthetic_story(seed: int) -> str:
    """One story of 3–6 sentences whose protagonist recurs (structure longer than any bigram)."""
    rng = random.Random(seed)
    hero = rng.choice(NAMES)
    friend = rng.choice([name for name in NAMES if name != hero])
    templates = [TEMPLATES[0]] + [rng.choice(TEMPLATES[1:]) for _ in range(rng.randint(2, 5))]
    sentences = [
        t.format(hero=hero, friend=friend, adj=rng.choice(ADJECTIVES), noun=rng.choice(NOUNS), verb=rng.choice(VERBS))
        for t in templates
    ]
    return " ".join(sentences)


def synthetic_text_stories(seed: int, split: Split) -> list[str]:
    """All stories of a split; each story has its own seed, and the splits' seeds come from disjoint tuples."""
    count = SYNTHETIC_TEXT_STORIES[split]
    return [synthetic_story(derive_seed("synthetic_text", seed, split, i)) for i in range(count)]


def load_synthetic_text(seed: int, split: Split, block_size: int) -> TokenWindows:
    """Byte-tokenized windows of the generated corpus, exactly as for tinystories (val and test keep their tail)."""
    tokens = encode_stories(synthetic_text_stories(seed, split))
    return make_windows(tokens, block_size, keep_tail=split != "train")
