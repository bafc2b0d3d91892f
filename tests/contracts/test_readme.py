"""The README stays true: every command-line flag it names exists (in `esper` or in the benchmark script it runs),
and its set-up commands are the Makefile's."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from esper.cli.main import build_parser
from esper.kasmina import DEFAULT_REGISTRY
from esper.leyline import NOOP_BLUEPRINT

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text(encoding="utf-8")


def _options(parser: argparse.ArgumentParser) -> set[str]:
    found: set[str] = set()
    for action in parser._actions:
        found.update(o for o in action.option_strings if o.startswith("--"))
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                found |= _options(sub)
    return found


def _benchmark_options() -> set[str]:
    """Flags the benchmark scripts declare (each builds its parser inside `main`)."""
    sources = (path.read_text(encoding="utf-8") for path in (ROOT / "benchmarks").glob("*.py"))
    return {flag for text in sources for flag in re.findall(r"add_argument\(\s*\"(--[a-z][a-z0-9-]*)\"", text)}


def test_every_flag_in_the_readme_exists() -> None:
    named = set(re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", README))
    assert named, "the README documents no flags?"
    missing = sorted(named - _options(build_parser()) - _benchmark_options())
    assert not missing, f"README names flags the CLI does not have: {missing}"


def test_readme_opens_with_the_two_setup_commands() -> None:
    block = README.split("```bash", 1)[1].split("```", 1)[0]
    commands = [line.split("#")[0].strip() for line in block.strip().splitlines()]
    assert commands == ["make demo", "make test"]
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    assert re.search(r"^demo:", makefile, re.M) and re.search(r"^test:", makefile, re.M)
    assert "make test" in (ROOT / ".ci" / "run").read_text(encoding="utf-8")


def _builtin_blueprints() -> dict[str, list[str]]:
    """esper's own blueprints per topology (a plugin a test loaded registers elsewhere), noop aside."""
    return {topology: [s.name for s in DEFAULT_REGISTRY.list_for_topology(topology)
                       if s.factory.__module__.startswith("esper.") and s.name != NOOP_BLUEPRINT]
            for topology in DEFAULT_REGISTRY.topologies()}


def test_the_glossary_names_every_built_in_blueprint() -> None:
    """An error listing the blueprints to choose from names none the reader cannot look up."""
    row = next(line for line in README.splitlines() if line.startswith("| Host · Slot · Seed · Blueprint"))
    for topology, names in _builtin_blueprints().items():
        listed = row.split(f"`{topology}`:", 1)[1].split(";", 1)[0]
        missing = [n for n in names if not re.search(rf"\b{n}\b", listed)]
        assert not missing, f"the README glossary's {topology} blueprints lack {missing}"
