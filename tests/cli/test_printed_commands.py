"""Commands esper prints for the user to copy (the `Compare:` hint after `esper train ppo`, TensorBoard, plots):
pasted into a shell as printed, at any console width, they run exactly the command meant."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from rich.cells import cell_len

from esper.cli import common
from esper.cli.common import command_text, print_command
from esper.cli.main import build_parser
from esper.cli.train_ppo import compare_hint
from esper.simic.ppo.config import TrainingConfig


def pasted(text: str, label: str = "") -> list[str]:
    """What a shell runs from `text` pasted after `label`: its first logical line (backslash-newline continues it)."""
    lines = text.removeprefix(label).splitlines()
    command = lines[0]
    for line in lines[1:]:
        if not command.endswith("\\"):
            break
        command = command[:-1] + "\n" + line
    return shlex.split(command.replace("\\\n", ""))


ARGUMENT = st.text(st.characters(blacklist_categories=("Cc", "Cs")), min_size=1, max_size=20)


@given(st.lists(st.lists(ARGUMENT, min_size=1, max_size=4), min_size=1, max_size=8), st.integers(10, 120),
       st.sampled_from(["", "Compare:       "]))
def test_a_printed_command_pastes_as_the_same_argv(groups: list[list[str]], width: int, label: str) -> None:
    """Whatever the arguments (spaces, quotes, brackets) and the width, the text runs the same argv, and a line is
    wider than the console only when one group alone is."""
    text = command_text(groups, width=width, label=label)
    assert pasted(text, label) == [a for g in groups for a in g]
    parts = {shlex.join(g) for g in groups}
    for line in text.splitlines():
        body = line.removeprefix(label).strip().removesuffix(" \\")
        assert cell_len(line) <= width or body in parts, line


def test_the_compare_hint_breaks_between_arguments_only(monkeypatch: pytest.MonkeyPatch,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    """`--slots early mid late` once broke after `early`: pasted, `--slots early` alone ran, and was refused."""
    monkeypatch.setattr(common.console, "width", 48)
    config = TrainingConfig.preset("quick").with_overrides(max_epochs=3, max_train_samples=256)
    run = Path("runs/my run [1]")  # a space and rich markup, both printed as they are
    print_command("Compare:       ", compare_hint(config, run))
    out = capsys.readouterr().out
    argv = pasted(out, "Compare:       ")
    assert argv == [a for g in compare_hint(config, run) for a in g] and argv[:2] == ["esper", "compare"]
    args = build_parser().parse_args(argv[1:])
    assert args.slots == ["early", "mid", "late"] and f"ppo:{run}" in args.controllers
    assert args.max_epochs == 3 and args.max_train_samples == 256
    assert all(cell_len(line) <= 48 for line in out.splitlines() if "ppo:" not in line)
