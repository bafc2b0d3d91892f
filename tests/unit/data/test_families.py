"""Task families: definitions are checked when they are made (a held-out type never hides among the training types
under another name), an episode's data seed draws a training type, and a planted leak of a held-out type into the
training draw is caught."""

from __future__ import annotations

import dataclasses
from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from esper.data import families
from esper.data.families import (
    FAMILIES,
    MAX_WIDTH,
    MIN_WIDTH,
    Family,
    HeldOutLeak,
    InstanceType,
    get_family,
    register_family,
    training_type,
)
from esper.data.synthetic import SYNTHETIC_SPLIT_SIZES
from esper.leyline import UserInputError

SYNTHETIC = get_family("synthetic-shift-v1")
TYPES = (InstanceType("a", "synthetic", 512), InstanceType("b", "synthetic", 512, width=0.5),
         InstanceType("c", "synthetic", 512, corruption=("fog", 2)))


def test_the_defined_families_split_their_types_and_stay_in_range() -> None:
    assert {"synthetic-shift-v1", "fashion-shift-v1", "fashion-capacity-v1"} <= set(FAMILIES)
    for family in FAMILIES.values():
        names = {t.name for t in family.training}
        assert names and set(family.held_out) and not names & set(family.held_out)
        assert {t.name for t in family.held_out_types} == set(family.held_out)
        assert all(MIN_WIDTH <= t.width <= MAX_WIDTH for t in family.types)
    assert {t.task for t in SYNTHETIC.types} == {"synthetic"}
    for key in ("fashion-shift-v1", "fashion-capacity-v1"):
        assert {t.task for t in get_family(key).types} == {"fashion_mnist"}
    for t in SYNTHETIC.types:  # a cap draws a subset of the type's pool: it must be smaller than the pool
        assert t.max_train_samples < SYNTHETIC_SPLIT_SIZES["train"] * (t.classes or 10) / 10 * 0.9, t.name


def test_a_held_out_type_renamed_into_training_is_refused() -> None:
    renamed = dataclasses.replace(TYPES[2], name="c2")
    with pytest.raises(UserInputError, match="'c2' is held-out type 'c' under another name"):
        Family("leaky", 1, "synthetic", (*TYPES, renamed), held_out=("c",))
    Family("fine", 1, "synthetic", (*TYPES, dataclasses.replace(renamed, max_train_samples=256)), held_out=("c",))


@pytest.mark.parametrize(("types", "held_out", "message"), [
    (TYPES, ("z",), "unknown types"),
    (TYPES, (), "at least one training and one held-out"),
    (TYPES, ("a", "b", "c"), "at least one training and one held-out"),
    ((*TYPES, TYPES[0]), ("c",), "names a type twice"),
    ((InstanceType("w", "synthetic", 512, width=3.0), *TYPES), ("c",), "width"),
    ((InstanceType("w", "synthetic", 512, corruption=("snow", 2)), *TYPES), ("c",), "corruption"),
    ((InstanceType("w", "synthetic", 512, classes=1), *TYPES), ("c",), "at least 2"),
    ((InstanceType("w", "fashion_mnist", 512, jitter=False), *TYPES), ("c",), "jitter"),
    ((InstanceType("w", "tinystories", 512), *TYPES), ("c",), "base task"),
])
def test_bad_definitions_are_refused(types: tuple[InstanceType, ...], held_out: tuple[str, ...], message: str) -> None:
    with pytest.raises(UserInputError, match=message):
        Family("bad", 1, "synthetic", types, held_out=held_out)


def test_a_key_names_one_definition_for_good() -> None:
    with pytest.raises(UserInputError, match="new version"):
        register_family(dataclasses.replace(SYNTHETIC, held_out=SYNTHETIC.held_out[:1]))
    assert register_family(SYNTHETIC) is SYNTHETIC  # the same definition again is the same family
    with pytest.raises(UserInputError, match="Available"):
        get_family("nope-v1")


@given(st.integers(min_value=0, max_value=2**63 - 1))
def test_a_data_seed_draws_a_training_type_and_always_the_same_one(data_seed: int) -> None:
    drawn = training_type(SYNTHETIC, data_seed)
    assert drawn in SYNTHETIC.training and drawn.name not in SYNTHETIC.held_out
    assert training_type(SYNTHETIC, data_seed) == drawn


def test_the_draw_covers_every_training_type_about_evenly() -> None:
    counts = Counter(training_type(SYNTHETIC, seed).name for seed in range(2000))
    assert set(counts) == {t.name for t in SYNTHETIC.training}
    assert min(counts.values()) > 0.7 * 2000 / len(SYNTHETIC.training)


@pytest.mark.parametrize("planted", ["by name", "by content"])
def test_a_held_out_type_planted_into_the_training_draw_is_caught(monkeypatch: pytest.MonkeyPatch,
                                                                  planted: str) -> None:
    held = SYNTHETIC.held_out_types[0]
    leak = held if planted == "by name" else dataclasses.replace(held, name="innocent-looking")
    monkeypatch.setattr(families, "_pick", lambda types, seed, key: leak)
    with pytest.raises(HeldOutLeak, match=f"drew held-out type '{leak.name}'"):
        training_type(SYNTHETIC, 7)
