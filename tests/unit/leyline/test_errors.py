"""`did_you_mean`: the one way an unknown name's error suggests the name that was meant."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from esper.leyline import did_you_mean

BLUEPRINTS = ("conv_light", "attention", "norm", "depthwise", "conv_heavy")


def test_a_typo_is_answered_with_the_name_it_misspells() -> None:
    assert did_you_mean("conv_lite", BLUEPRINTS) == " (did you mean 'conv_light'?)"
    assert did_you_mean("Depthwise", BLUEPRINTS) == " (did you mean 'depthwise'?)"  # case aside
    assert did_you_mean("statc", ["heuristic", "static"], rest=":2") == " (did you mean 'static:2'?)"


def test_nothing_close_suggests_nothing() -> None:
    assert did_you_mean("imagenet", ["synthetic", "cifar10"]) == ""
    assert did_you_mean("norm", []) == ""


@given(st.lists(st.text(min_size=1, max_size=12), min_size=1, max_size=8, unique=True),
       st.text(max_size=12), st.text(max_size=4))
def test_a_suggestion_is_always_a_choice(choices: list[str], name: str, rest: str) -> None:
    """Whatever is typed, what is suggested exists: one of the choices as spelt (then `rest`), or nothing."""
    hint = did_you_mean(name, choices, rest=rest)
    assert hint == "" or any(hint == f" (did you mean '{c}{rest}'?)" for c in choices)
