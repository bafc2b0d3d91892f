"""The config surface is honest (§6.14, §12.4 item 35): every TrainingConfig field reaches and is used by
`train_ppo_vectorized`, and every `esper train ppo` flag exists and has an effect."""

from __future__ import annotations

import argparse
import ast
import inspect
import json
import re
import textwrap
from pathlib import Path

import pytest

from esper.cli import common
from esper.cli import train_ppo as ppo_cmd
from esper.cli.main import build_parser, main
from esper.cli.train_ppo import effective_config
from esper.simic.ppo.config import TrainingConfig
from esper.simic.ppo.train import train_ppo_vectorized

FIELDS = set(TrainingConfig.model_fields)
PARAMS = inspect.signature(train_ppo_vectorized).parameters
# Parameters that are not config fields (runtime plumbing). A new one needs a conscious update here.
RUNTIME_PARAMS = {"run_dir", "sink", "resume_path", "data_cache", "preset", "argv", "should_stop"}

# Every long option of `esper train ppo --help`. A new flag needs a conscious update here (and a test of its effect).
EXPECTED_PPO_FLAGS = {
    "--help", "--preset", "--config-json", "--set", "--task", "--device", "--devices", "--amp", "--no-amp",
    "--reward-family", "--episodes", "--resume", "--run-dir", "--runs-root", "--data-dir", "--data-path",
    "--download", "--telemetry-level", "--no-tui", "--no-tensorboard", "--seed", "--debug",
}


def _function_def() -> ast.FunctionDef:
    tree = ast.parse(textwrap.dedent(inspect.getsource(train_ppo_vectorized)))
    node = tree.body[0]
    assert isinstance(node, ast.FunctionDef) and node.name == "train_ppo_vectorized"
    return node


def _is_config_constructor(node: ast.AST) -> bool:
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "TrainingConfig"


def _loaded_names(nodes: list[ast.stmt], *, skip_config_constructor: bool) -> set[str]:
    names: set[str] = set()
    stack: list[ast.AST] = list(nodes)
    while stack:
        node = stack.pop()
        if skip_config_constructor and _is_config_constructor(node):
            continue
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            names.add(node.id)
        stack.extend(ast.iter_child_nodes(node))
    return names


def test_train_kwargs_are_parameters() -> None:
    kwargs = TrainingConfig().to_train_kwargs()
    assert set(kwargs) == FIELDS
    assert set(kwargs) <= set(PARAMS)


def test_every_field_is_a_keyword_only_parameter_without_default() -> None:
    """No field can be silently left at a function default: callers must pass the whole config."""
    missing = FIELDS - set(PARAMS)
    assert not missing, f"TrainingConfig fields that train_ppo_vectorized does not accept: {sorted(missing)}"
    for name in FIELDS:
        assert PARAMS[name].kind is inspect.Parameter.KEYWORD_ONLY, name
        assert PARAMS[name].default is inspect.Parameter.empty, name
    assert set(PARAMS) - FIELDS == RUNTIME_PARAMS


def test_every_parameter_is_used_in_the_body() -> None:
    used = _loaded_names(_function_def().body, skip_config_constructor=False)
    unused = set(PARAMS) - used
    assert not unused, f"parameters never read in train_ppo_vectorized: {sorted(unused)}"


def test_every_field_is_used_beyond_the_saved_config() -> None:
    """A field read only inside `TrainingConfig(...)` would be saved in checkpoints yet change nothing."""
    body = _function_def().body
    constructor_calls = [n for stmt in body for n in ast.walk(stmt) if _is_config_constructor(n)]
    assert constructor_calls, "expected the config to be rebuilt for validation and checkpoints"
    used = _loaded_names(body, skip_config_constructor=True)
    only_saved = FIELDS - used
    assert not only_saved, f"fields only passed to TrainingConfig(...) (no-op knobs): {sorted(only_saved)}"


def test_ast_walker_detects_an_unused_field() -> None:
    """Guard the guard: the walker really ignores names inside TrainingConfig(...)."""
    tree = ast.parse("def f(*, lr, gamma):\n    c = TrainingConfig(lr=lr, gamma=gamma)\n    return g(gamma)\n")
    fn = tree.body[0]
    assert isinstance(fn, ast.FunctionDef)
    assert _loaded_names(fn.body, skip_config_constructor=True) >= {"gamma", "g"}
    assert "lr" not in _loaded_names(fn.body, skip_config_constructor=True)
    assert "lr" in _loaded_names(fn.body, skip_config_constructor=False)


# ---------------------------------------------------------------------------------------------------- CLI flags


def _ppo_parser() -> argparse.ArgumentParser:
    def sub(parser: argparse.ArgumentParser, name: str) -> argparse.ArgumentParser:
        [action] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        return action.choices[name]

    return sub(sub(build_parser(), "train"), "ppo")


def _parser_long_options() -> set[str]:
    return {o for a in _ppo_parser()._actions for o in a.option_strings if o.startswith("--")}


def _help_text(capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as info:
        main(["train", "ppo", "--help"])
    assert info.value.code == 0
    return capsys.readouterr().out


def test_help_lists_exactly_the_expected_flags(capsys: pytest.CaptureFixture[str]) -> None:
    listed = set(re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", _help_text(capsys)))
    assert listed <= _parser_long_options(), f"--help mentions unknown flags: {sorted(listed - _parser_long_options())}"
    assert _parser_long_options() == EXPECTED_PPO_FLAGS
    assert listed == EXPECTED_PPO_FLAGS


def _config(argv: list[str]) -> TrainingConfig:
    return effective_config(build_parser().parse_args(["train", "ppo", "--preset", "quick", *argv]))


@pytest.mark.parametrize(("argv", "field", "value"), [
    (["--task", "synthetic_text"], "task", "synthetic_text"),
    (["--device", "cpu"], "device", "cpu"),
    (["--devices", "cpu", "cpu"], "devices", ["cpu", "cpu"]),
    (["--amp"], "amp", True),
    (["--reward-family", "loss"], "reward_family", "loss"),
    (["--episodes", "5"], "n_episodes", 5),
    (["--seed", "7"], "seed", 7),
    (["--set", "lr=0.001"], "lr", 0.001),
    (["--set", "value_clip=null"], "value_clip", None),
    (["--set", 'slots=["mid"]'], "slots", ["mid"]),
])
def test_config_flag_changes_the_effective_config(argv: list[str], field: str, value: object) -> None:
    assert TrainingConfig.preset("quick").to_dict()[field] != value
    assert _config(argv).to_dict()[field] == value


def test_preset_config_json_and_no_amp_change_the_config(tmp_path: Path) -> None:
    assert _config([]).task == "synthetic"
    assert effective_config(build_parser().parse_args(["train", "ppo", "--preset", "tinystories"])).batch_size == 32
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"amp": True, "hidden_dim": 16}))
    assert _config(["--config-json", str(path)]).hidden_dim == 16
    assert _config(["--config-json", str(path)]).amp is True
    assert _config(["--config-json", str(path), "--no-amp"]).amp is False


def _args_attributes(source: str, functions: set[str] | None = None) -> set[str]:
    tree = ast.parse(source)
    roots: list[ast.AST] = [tree] if functions is None else [
        n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name in functions]
    return {n.attr for root in roots for n in ast.walk(root)
            if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "args"}


def test_every_runtime_flag_is_read_by_the_ppo_command() -> None:
    """Flags that are not config fields must be read by `esper train ppo` or the shared helpers it calls."""
    read = _args_attributes(inspect.getsource(ppo_cmd))
    read |= _args_attributes(inspect.getsource(common), {"data_options", "make_hub", "run_guarded", "uses_tui"})
    dests = {a.dest for a in _ppo_parser()._actions if a.option_strings and a.dest != "help"}
    unread = dests - read
    assert not unread, f"flags of `esper train ppo` that nothing reads: {sorted(unread)}"
