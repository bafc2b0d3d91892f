"""Flags made from config fields: one `--field-name` per setting, stored under the field's name, help from the
field's description and default, values checked against the field's type and range as they are parsed."""

from __future__ import annotations

import argparse
import json
from enum import StrEnum
from typing import Annotated, Literal

import pytest
from pydantic import Field, StrictFloat, StrictInt

from esper.cli.config_flags import add_config_flags, config_changes, config_from_args, flag_fields
from esper.cli.main import build_parser, main
from esper.cli.options import Parser
from esper.cli.train_iql import iql_config
from esper.cli.train_ppo import flag_overrides
from esper.evaluation.ope import OPEConfig
from esper.leyline.strict_config import StrictConfig
from esper.simic.iql.config import IQLConfig
from esper.simic.ppo.config import TrainingConfig

pytestmark = pytest.mark.smoke


class Colour(StrEnum):
    RED = "red"
    BLUE = "blue"


class Toy(StrictConfig):
    """One field of each kind the flags handle."""

    count: StrictInt = Field(default=3, ge=1, le=10, description="how many")
    rate: StrictFloat | None = Field(default=0.5, gt=0.0, le=1.0, description="how fast, 100 % at most")
    mode: Literal["a", "b"] = Field(default="a", description="which mode")
    colour: Colour = Field(default=Colour.RED, description="which colour")
    names: list[str] = Field(default_factory=lambda: ["x"], description="what to call them")
    widths: list[Annotated[StrictInt, Field(ge=4, le=64)]] = Field(default_factory=lambda: [8],
                                                                   description="layer widths")
    weights: dict[str, Annotated[StrictFloat, Field(ge=-1.0, le=1.0)]] = Field(default_factory=dict,
                                                                               description="weight per name")
    fast: bool = Field(default=False, description="go fast")
    label: str = Field(default="run", description="a label")
    old_name: StrictInt = Field(default=0, ge=0, le=5, description="kept under an established flag")


def _toy_parser() -> argparse.ArgumentParser:
    p = Parser(prog="toy")
    add_config_flags(p, Toy(), flag_names={"old_name": "legacy"})
    return p


def test_each_field_gets_a_flag_of_its_name_storing_under_the_field() -> None:
    p = _toy_parser()
    flags = {a.dest: a.option_strings for a in p._actions if a.dest in Toy.model_fields}
    assert flags == {**{name: [f"--{name.replace('_', '-')}"] for name in Toy.model_fields if name != "fast"},
                     "fast": ["--fast", "--no-fast"], "old_name": ["--legacy"]}


def test_flags_parse_every_kind_of_field() -> None:
    args = _toy_parser().parse_args([
        "--count", "7", "--rate", "0.25", "--mode", "b", "--colour", "blue", "--names", "p", "q",
        "--widths", "16", "32", "--weights", '{"p": -0.5}', "--fast", "--label", "42", "--legacy", "2"])
    config = config_from_args(Toy(), args)
    assert config.to_dict() == {"count": 7, "rate": 0.25, "mode": "b", "colour": "blue", "names": ["p", "q"],
                                "widths": [16, 32], "weights": {"p": -0.5}, "fast": True, "label": "42",
                                "old_name": 2}


def test_precedence_is_base_then_json_then_set_then_flags() -> None:
    args = _toy_parser().parse_args(["--config-json", '{"count": 4, "label": "j"}', "--set", "count=5",
                                     "--set", "mode=b", "--count", "6"])
    config = config_from_args(Toy(label="base", fast=True), args)
    assert (config.count, config.mode, config.label, config.fast) == (6, "b", "j", True)


def test_a_flag_not_given_leaves_no_trace() -> None:
    """Only given flags reach the namespace: a command's settings (and its default run directory) do not change
    when its config gains a field."""
    args = _toy_parser().parse_args([])
    assert not set(vars(args)) & set(Toy.model_fields) and config_changes(Toy, args) == {}


@pytest.mark.parametrize(("argv", "message"), [
    (["--count", "0"], "argument --count: Input should be greater than or equal to 1, got 0"),
    (["--count", "true"], "argument --count: Input should be a valid integer, got true"),
    (["--count", "2.5"], "argument --count: Input should be a valid integer, got 2.5"),
    (["--rate", "inf"], "argument --rate: Input should be a finite number, got Infinity"),
    (["--rate", "fast"], "argument --rate: Input should be a valid number, got \"fast\""),
    (["--rate", "null"], "argument --rate: a flag takes a value; set null with --set rate=null"),
    (["--mode", "c"], "argument --mode: Input should be 'a' or 'b', got \"c\""),
    (["--widths", "8", "2"], "argument --widths: Input should be greater than or equal to 4, got 2"),
    (["--weights", '{"p": 2}'], "argument --weights: p: Input should be less than or equal to 1, got 2"),
])
def test_a_bad_value_names_its_flag_and_the_range(argv: list[str], message: str,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        _toy_parser().parse_args(argv)
    assert info.value.code == 2
    assert capsys.readouterr().err == f"error: {message} (see 'toy --help')\n"


def test_help_gives_the_description_and_the_default() -> None:
    text = " ".join(_toy_parser().format_help().split())
    for expected in ("--count COUNT how many (default: 3)", "--rate RATE how fast, 100 % at most (default: 0.5)",
                     "--mode {a,b} which mode (default: a)", "--colour {red,blue} which colour (default: red)",
                     "--names NAMES [NAMES ...] what to call them (default: x)", "--weights JSON weight per name "
                     "(default: {})", "--fast, --no-fast go fast (default: off)"):
        assert expected in text, expected


def _parser_of(prog: str) -> argparse.ArgumentParser:
    parser = build_parser()
    for word in prog.split()[1:]:
        action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        parser = action.choices[word]
    return parser


@pytest.mark.parametrize(("prog", "cls", "renamed"), [
    ("esper train ppo", TrainingConfig, {"n_episodes": "--episodes"}),
    ("esper train iql", IQLConfig, {}),
    ("esper evaluate-offline", OPEConfig, {}),
])
def test_every_config_field_has_one_flag_of_its_name(prog: str, cls: type[StrictConfig],
                                                     renamed: dict[str, str]) -> None:
    """One name per setting from flag to config to logs (n_episodes keeps the flag users know it by); a setting of a
    config made of sections is named by its plain name."""
    dests = flag_fields(cls)
    flags: dict[str, list[str]] = {}
    for action in _parser_of(prog)._actions:
        field = action.dest
        if field in dests:
            flags.setdefault(field, []).extend(s for s in action.option_strings if not s.startswith("--no-"))
    assert flags == {name: [renamed.get(name, "--" + name.replace("_", "-"))] for name in dests}
    if cls is TrainingConfig:
        assert len(dests) == len(TrainingConfig.settings()) and "lr" in dests and "devices" in dests


def test_train_ppo_flags_set_the_training_config() -> None:
    args = build_parser().parse_args([
        "train", "ppo", "--preset", "quick", "--lr", "0.001", "--set", "lr=0.002", "--n-envs", "8", "--amp",
        "--devices", "cpu", "cpu", "--param-cost", "auto", "--initial-op-bias", '{"CULL": -2}', "--advantage",
        "group", "--blueprints", "norm", "--no-use-telemetry", "--episodes", "32", "--init-from", "iql:x",
        "--init-datasets", "d1", "d2"])
    config = TrainingConfig.preset("quick").with_overrides(**flag_overrides(args))
    ppo = config.ppo
    assert (ppo.lr, ppo.n_envs, config.episode.amp, config.execution.devices, config.reward.param_cost,
            ppo.initial_op_bias, ppo.advantage, ppo.blueprints, ppo.use_telemetry, ppo.n_episodes, ppo.init_from,
            ppo.init_datasets) == (0.001, 8, True, ["cpu", "cpu"], "auto", {"CULL": -2.0}, "group", ["norm"],
                                   False, 32, "iql:x", ["d1", "d2"])


@pytest.mark.parametrize(("sets", "lr"), [(["lr=0.002"], 0.002), (["ppo.lr=0.002"], 0.002),
                                          (["lr=0.002", "ppo.lr=0.003"], 0.003), (["ppo.lr=0.003", "lr=0.002"], 0.002)])
def test_set_takes_a_settings_plain_name_or_dotted_key_the_later_winning(sets: list[str], lr: float) -> None:
    args = build_parser().parse_args(["train", "ppo", "--preset", "quick", *(a for s in sets for a in ("--set", s))])
    assert flag_overrides(args) == {"ppo.lr": lr}
    flagged = build_parser().parse_args(["train", "ppo", "--lr", "0.004", *(a for s in sets for a in ("--set", s))])
    assert flag_overrides(flagged) == {"ppo.lr": 0.004}  # a flag wins over --set, whichever key --set used


def test_train_iql_flags_set_the_iql_config() -> None:
    args = build_parser().parse_args(["train", "iql", "--dataset", "d", "--epochs", "5", "--hidden-sizes", "16", "16",
                                      "--device", "cpu", "--seed", "3", "--set", "beta=0"])
    assert iql_config(args).to_dict() == {**IQLConfig().to_dict(), "epochs": 5, "hidden_sizes": [16, 16],
                                          "device": "cpu", "seed": 3, "beta": 0.0}


@pytest.mark.parametrize(("argv", "flag"), [
    (["train", "ppo", "--preset", "quick", "--lr", "0"], "--lr"),
    (["train", "ppo", "--preset", "quick", "--n-envs", "true"], "--n-envs"),
    (["train", "iql", "--dataset", "d", "--expectile", "1"], "--expectile"),
    (["evaluate-offline", "--data", "d", "--controller", "iql:x", "--n-bootstrap", "5"], "--n-bootstrap"),
])
def test_commands_refuse_a_bad_flag_value_before_any_work(argv: list[str], flag: str,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2 and f"argument {flag}: Input should be" in err and "got" in err


def test_evaluate_offline_flags_set_the_ope_config() -> None:
    args = build_parser().parse_args(["evaluate-offline", "--data", "d", "--controller", "iql:x", "--n-bootstrap", "20",
                                      "--fqe-hidden-sizes", "8", "--gamma", "0.9", "--config-json",
                                      json.dumps({"fqe_iterations": 3})])
    config = config_from_args(OPEConfig(), args)
    assert (config.n_bootstrap, config.fqe_hidden_sizes, config.gamma, config.fqe_iterations) == (20, (8,), 0.9, 3)
