"""`esper.wrap` and `esper.slots`: slots named by path, suffix or regex, shapes, blueprint fit, and a wrapped model
without seeds that computes exactly what the original computes."""

from __future__ import annotations

import copy
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

import esper
from esper.api.wrapping import slot_set_of
from unit.api.models import SmallCNN, TokenClassifier, host_parameters, token_data


@settings(max_examples=5, deadline=None)
@given(seed=st.integers(0, 2**16), batch=st.integers(1, 5), example=st.booleans())
def test_a_wrapped_model_without_seeds_equals_the_original_bitwise(seed: int, batch: int, example: bool) -> None:
    torch.manual_seed(seed)
    original = SmallCNN()
    x = torch.randn(batch + 1, 3, 12, 12)
    wrapped = esper.wrap(copy.deepcopy(original), ["stem", "layer1", "layer2"], example_input=x if example else None)
    out, ref = wrapped(x), original(x)
    out.square().sum().backward()
    ref.square().sum().backward()
    assert torch.equal(out, ref)
    wrapped_params = host_parameters(wrapped)
    for name, param in original.named_parameters():
        assert param.grad is not None and torch.equal(wrapped_params[name].grad, param.grad), name
    state, ref_state = wrapped.state_dict(), original.state_dict()
    assert state.keys() == ref_state.keys()  # nothing of esper to save before a seed exists
    assert all(torch.equal(state[k], v) for k, v in ref_state.items())  # BatchNorm statistics included


def test_slots_are_named_by_path_suffix_or_regex_in_module_order() -> None:
    model = esper.wrap(SmallCNN(), [r"layer1\.bn\d", "stem"])  # the regex names two BatchNorm layers
    assert [(s.name, s.path) for s in esper.slots(model)] == [("early", "stem"), ("mid", "layer1.bn1"),
                                                              ("late", "layer1.bn2")]
    paths = [s.path for s in esper.slots(esper.wrap(SmallCNN(), ["layer2", "stem", "down.0"]))]
    assert paths == ["stem", "down.0", "layer2"]
    assert [s.name for s in esper.slots(esper.wrap(SmallCNN(), ["conv2"]))] == ["early", "mid"]  # suffix: 2 blocks
    assert [s.path for s in esper.slots(esper.wrap(SmallCNN(), [r"layer\d"]))] == ["layer1", "layer2"]


def test_a_pattern_that_matches_nothing_is_refused_naming_the_module_paths() -> None:
    with pytest.raises(ValueError, match=r"'layer3' matches no module of SmallCNN \(did you mean 'layer2'\?\)\. "
                                         r"Its module paths: stem, stem.0, .*layer2.bn2, head"):
        esper.wrap(SmallCNN(), ["layer3"])


@pytest.mark.parametrize(("model", "slots", "message"), [
    (SmallCNN(), ["stem", "layer1", "down", "layer2"], "at most 3 slots"),
    (SmallCNN(), ["layer1", "layer1.conv1"], "lies inside slot 'layer1'"),
    (nn.Sequential(nn.Conv2d(3, 3, 1)), ["0"], "bare Sequential"),
    (SmallCNN(), "stem", "write slots=\\['stem'\\]"),
])
def test_slots_that_cannot_grow_are_refused(model: nn.Module, slots: list[str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        esper.wrap(model, slots)


def test_wrapping_twice_is_refused() -> None:
    model = esper.wrap(SmallCNN(), ["stem"])
    with pytest.raises(ValueError, match="wrapped already"):
        esper.wrap(model, ["layer1"])


def test_slots_list_shape_dtype_and_device_from_an_example_or_the_first_forward() -> None:
    x = torch.randn(2, 3, 12, 12)
    early = esper.slots(esper.wrap(SmallCNN(), ["stem", "layer2"], example_input=x))
    assert [(s.shape, s.dtype, s.device, s.topology) for s in early] == [
        ((2, 8, 12, 12), torch.float32, torch.device("cpu"), "cnn"), ((2, 16, 6, 6), torch.float32,
                                                                       torch.device("cpu"), "cnn")]
    model = esper.wrap(SmallCNN(), ["stem", "layer2"])
    assert [s.shape for s in esper.slots(model)] == [None, None]
    model(x)
    assert [s.shape for s in esper.slots(model)] == [(2, 8, 12, 12), (2, 16, 6, 6)]


def test_blueprints_fit_by_output_shape() -> None:
    cnn = slot_set_of(esper.wrap(SmallCNN(), ["stem"], example_input=torch.randn(1, 3, 12, 12)))
    assert cnn.action_space.topology == "cnn" and "conv_light" in cnn.action_space.head
    tokens = token_data(2, seed=0)[0]
    text = slot_set_of(esper.wrap(TokenClassifier(), ["encoder.layers.0"], example_input=tokens))
    assert text.action_space.topology == "transformer" and "lora" in text.action_space.head
    x = torch.randn(1, 3, 8, 8)
    limited = slot_set_of(esper.wrap(SmallCNN(), ["stem"], ["norm", "conv_heavy"], example_input=x))
    assert (limited.action_space.head, limited.action_space.others) == (("noop", "norm"), ("conv_heavy",))
    with pytest.raises(ValueError, match="outputs shape \\(1, 2\\): no blueprint fits it"):
        esper.wrap(SmallCNN(classes=2), ["head"], example_input=torch.randn(1, 3, 8, 8))
    with pytest.raises(ValueError, match="'lora' is not a cnn blueprint"):
        esper.wrap(SmallCNN(), ["stem"], ["lora"], example_input=torch.randn(1, 3, 8, 8))


def test_esper_and_its_api_import_without_lightning_and_the_callback_names_the_extra() -> None:
    code = ("import sys; sys.modules['lightning'] = sys.modules['lightning.pytorch'] = None\n"
            "import esper, esper.api\n"
            "try:\n    import esper.lightning\nexcept ImportError as exc:\n    print(exc)")
    env = {**os.environ, "PYTHONPATH": str(Path(esper.__file__).resolve().parents[1])}
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60,
                            check=True)
    assert result.stdout.strip() == "esper.lightning needs Lightning: pip install 'esper[lightning]'"
