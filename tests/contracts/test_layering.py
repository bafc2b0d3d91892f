"""Import layering: parse every module under src/esper and check its imports against the layer table.

Both `import x` and `from x import y` forms are checked, including relative imports and imports nested in functions
or `if TYPE_CHECKING:` blocks. `import esper` / `from esper import __version__` (the top-level package, which only
defines `__version__`) is allowed everywhere.
"""

from __future__ import annotations

import ast
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import esper

PACKAGE_ROOT = Path(esper.__file__).resolve().parent
SRC_ROOT = PACKAGE_ROOT.parent
# Layers, bottom up. A package may import packages of lower layers only (its own package is always allowed); nissa
# (telemetry backends) is imported by the command line alone: everything else receives a TelemetrySink object.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("leyline",),  # contracts
    ("kasmina", "nissa"),  # the body; telemetry hub and backends
    ("data",),  # tasks and their data: registry, specs, readers, generated data, families, device datasets
    ("execution",),  # where work runs: devices, plugins, worker processes and Ray actors, host reads
    ("storage",),  # what a run leaves on disk: run directories, typed line logs, checkpoints (naming the plugins)
    ("tolaria",),  # train/validate steps, counterfactuals, governor
    ("tamiyo",),  # controller protocol, registry, heuristic, static, random (pure Python)
    ("env",),  # the episode layer: MorphoEnv, the epoch loop, features, masks, rewards
    ("datagen",),  # behaviour policies, presets, episode files, orchestration
    ("simic",),  # learners (PPO, IQL)
    ("evaluation",),  # comparison, statistics, off-policy evaluation, studies
    ("api", "report"),  # the public API (esper.wrap, esper.Controller); plots of run directories (esper report)
    ("lightning",),  # the Lightning callback over the public API (the `lightning` extra)
    ("cli",),  # one module per command
)
SUBPACKAGES = tuple(p for layer in LAYERS for p in layer)
LEARNERS = "simic"
PUBLIC_API = "api"


def _allowed() -> dict[str, frozenset[str]]:
    allowed: dict[str, frozenset[str]] = {}
    for i, layer in enumerate(LAYERS):
        below = frozenset(p for lower in LAYERS[:i] for p in lower)
        for package in layer:
            allowed[package] = below if package == "cli" else below - {"nissa"}
    allowed["tamiyo"] = frozenset({"leyline"})  # pure decision logic on contracts: no torch, no body, no data
    allowed["__main__"] = frozenset({"cli"})  # `python -m esper`: the top of the stack
    return allowed


ALLOWED_ESPER: dict[str, frozenset[str]] = _allowed()
STDLIB_ONLY = frozenset({"leyline"})
# What a stdlib-only layer may still import: pydantic validates the contracts (every config is a StrictConfig).
CONTRACT_LIBRARIES = frozenset({"pydantic"})
# Third-party top-level modules forbidden per layer (in addition to STDLIB_ONLY layers).
FORBIDDEN_THIRD_PARTY: dict[str, frozenset[str]] = {"tamiyo": frozenset({"torch", "numpy"})}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC_ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imported_modules(source: str, modname: str, is_package: bool) -> list[tuple[int, str]]:
    """Absolute dotted names imported by `source` (line, name); `from a import b` yields `a.b` candidates too."""
    tree = ast.parse(source)
    package_parts = modname.split(".") if is_package else modname.split(".")[:-1]
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                keep = len(package_parts) - (node.level - 1)
                if keep <= 0:
                    raise ValueError(f"{modname}: relative import beyond the top-level package")
                base = ".".join(package_parts[:keep] + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            found.append((node.lineno, base))
            # `from esper import leyline` or `from . import sibling` import submodules.
            found.extend((node.lineno, f"{base}.{alias.name}") for alias in node.names if alias.name != "*")
    return found


def violations(source: str, modname: str, is_package: bool = False) -> list[str]:
    """Layering violations of one module (empty when it follows the layer table)."""
    parts = modname.split(".")
    if parts[0] != "esper" or len(parts) < 2:
        return []  # top-level esper modules are checked separately
    layer = parts[1]
    if layer not in ALLOWED_ESPER:
        return [f"{modname}: unknown subpackage '{layer}' (add it to the layer table)"]
    allowed = ALLOWED_ESPER[layer] | {layer}
    problems = []
    for line, name in imported_modules(source, modname, is_package):
        top, *rest = name.split(".")
        if top == "esper":
            if not rest or rest[0] not in SUBPACKAGES:
                continue  # the top-level package (__version__) or an attribute of it
            if rest[0] not in allowed:
                problems.append(f"{modname}:{line} imports {name} (layer '{layer}' may not import '{rest[0]}')")
        elif layer in STDLIB_ONLY and top not in sys.stdlib_module_names and top not in CONTRACT_LIBRARIES:
            problems.append(f"{modname}:{line} imports non-stdlib module {name}")
        elif top in FORBIDDEN_THIRD_PARTY.get(layer, frozenset()):
            problems.append(f"{modname}:{line} imports forbidden module {name}")
    return problems


def source_modules() -> list[Path]:
    return sorted(PACKAGE_ROOT.rglob("*.py"))


def test_source_tree_found() -> None:
    modules = {module_name(p) for p in source_modules()}
    assert {"esper.leyline", "esper.leyline.actions", "esper.kasmina", "esper.simic"} <= modules


@pytest.mark.parametrize("path", source_modules(), ids=lambda p: module_name(p))
def test_module_follows_layer_table(path: Path) -> None:
    problems = violations(path.read_text(encoding="utf-8"), module_name(path), path.name == "__init__.py")
    assert not problems, "\n".join(problems)


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan): each is an import cycle."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for target in sorted(graph.get(module, ())):
            if target not in index:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            component = []
            while True:
                top = stack.pop()
                component.append(top)
                if top == module:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return cycles


def module_import_graph() -> dict[str, set[str]]:
    """Module → the esper modules it imports (type-only imports included; a package's `__init__`, which only
    re-exports its modules, is left out so that importing a sibling through it is not counted as a cycle)."""
    paths = {module_name(p): p for p in source_modules() if p.name != "__init__.py"}
    return {name: {target for _, target in imported_modules(path.read_text(encoding="utf-8"), name, False)
                   if target in paths and target != name}
            for name, path in paths.items()}


def test_no_import_cycle_between_modules() -> None:
    assert import_cycles(module_import_graph()) == []


def test_the_cycle_check_finds_a_cycle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert import_cycles(graph) == [["a", "b", "c"]]


def test_top_level_init_imports_nothing_from_esper_or_third_party() -> None:
    """`esper/__init__.py` is imported by every layer, so it must stay stdlib-only and import no subpackage."""
    init = PACKAGE_ROOT / "__init__.py"
    for line, name in imported_modules(init.read_text(encoding="utf-8"), "esper", True):
        top = name.split(".")[0]
        assert top != "esper" and top in sys.stdlib_module_names, f"esper/__init__.py:{line} imports {name}"


@pytest.mark.parametrize(
    ("package", "forbidden"), [("esper.leyline", ("torch", "numpy")), ("esper.tamiyo", ("torch", "numpy"))]
)
def test_runtime_import_does_not_load_heavy_modules(package: str, forbidden: tuple[str, ...]) -> None:
    """Transitive check: importing the package in a fresh interpreter leaves torch (and numpy for leyline) unloaded."""
    code = f"import sys, {package}; print(','.join(m for m in {forbidden!r} if m in sys.modules))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert result.stdout.strip() == "", f"{package} loads {result.stdout.strip()}"


# ------------------------------------------------------------------------------------- self-check of the checker

FAKE_CASES = [
    ("esper.leyline.fake", "import torch\n", "non-stdlib"),
    ("esper.leyline.fake", "from numpy import array\n", "non-stdlib"),
    ("esper.leyline.fake", "from esper.kasmina import slot\n", "'kasmina'"),
    ("esper.leyline.fake", "from esper import kasmina\n", "'kasmina'"),
    ("esper.kasmina.fake", "from esper.env.features import obs_dim\n", "'env'"),
    ("esper.kasmina.fake", "from ..tolaria import trainer\n", "'tolaria'"),
    ("esper.kasmina.sub.fake", "from ...nissa.hub import NissaHub\n", "'nissa'"),
    ("esper.nissa.fake", "import esper.kasmina.model\n", "'kasmina'"),
    ("esper.data.fake", "from esper.tolaria.trainer import train_epoch\n", "'tolaria'"),
    ("esper.data.fake", "from esper.execution.actors import ActorPool\n", "'execution'"),
    ("esper.data.fake", "from esper.storage.rundir import RunDirectory\n", "'storage'"),
    ("esper.execution.fake", "from esper.storage.checkpoint import atomic_save\n", "'storage'"),
    ("esper.storage.fake", "from esper.env.charges import CHARGES\n", "'env'"),
    ("esper.tolaria.fake", "def f():\n    from esper.tamiyo import HeuristicTamiyo\n", "'tamiyo'"),
    ("esper.tamiyo.fake", "import torch.nn as nn\n", "forbidden module torch"),
    ("esper.tamiyo.fake", "import numpy as np\n", "forbidden module numpy"),
    ("esper.tamiyo.fake", "from esper.kasmina.state import SeedState\n", "'kasmina'"),
    ("esper.simic.fake", "from esper.cli.main import main\n", "'cli'"),
    ("esper.simic.fake", "from esper.evaluation.comparison import run_comparison\n", "'evaluation'"),
    ("esper.datagen.fake", "from esper.simic.ppo import PPOAgent\n", "'simic'"),
    ("esper.env.fake", "from esper.simic.normalization import RunningMeanStd\n", "'simic'"),
    ("esper.env.fake", "from esper.datagen import policies\n", "'datagen'"),
    ("esper.tamiyo.fake", "from esper.env.features import obs_dim\n", "'env'"),
    ("esper.datagen.fake", "from esper.cli import main\n", "'cli'"),
    ("esper.simic.fake", "from esper.nissa.hub import NissaHub\n", "'nissa'"),
    ("esper.datagen.fake", "import esper.nissa\n", "'nissa'"),
    ("esper.leyline.fake", "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import torch\n", "non-stdlib"),
    ("esper.kasmina.fake", "from esper.api import wrap\n", "'api'"),
    ("esper.tolaria.fake", "import esper.api.controller\n", "'api'"),
    ("esper.evaluation.fake", "from esper.api.wrapping import slots\n", "'api'"),
    ("esper.api.fake", "from esper.lightning import GrowthCallback\n", "'lightning'"),
    ("esper.api.fake", "from esper.cli import main\n", "'cli'"),
    ("esper.evaluation.fake", "from esper.report.render import render_report\n", "'report'"),
    ("esper.report.fake", "from esper.cli.common import console\n", "'cli'"),
    ("esper.report.fake", "from esper.api import wrap\n", "'api'"),
    ("esper.api.fake", "from esper.report import plots\n", "'report'"),
    ("esper.report.fake", "import esper.nissa\n", "'nissa'"),
]


@pytest.mark.parametrize(("modname", "source", "expected"), FAKE_CASES)
def test_checker_flags_forbidden_imports(modname: str, source: str, expected: str) -> None:
    problems = violations(textwrap.dedent(source), modname)
    assert problems and any(expected in p for p in problems), problems


ALLOWED_CASES = [
    ("esper.leyline.fake", "from __future__ import annotations\nimport math, uuid\nfrom .stages import SeedStage\n"),
    ("esper.leyline.fake", "import esper\nfrom esper import __version__\n"),
    ("esper.kasmina.fake", "import torch\nfrom esper.leyline import SeedStage\nfrom . import blending\n"),
    ("esper.data.fake", "import numpy\nfrom esper.kasmina.model import MorphogeneticModel\n"),
    ("esper.execution.fake", "from esper.data.readers import DataWarning\n"),
    ("esper.storage.fake", "from esper.execution.plugins import loaded_plugins\nfrom esper.data import TASKS\n"),
    ("esper.tolaria.fake", "from esper.data.optim import x\nfrom esper.kasmina import y\n"),
    ("esper.tamiyo.fake", "import random\nfrom esper.leyline.actions import ordered_slots\n"),
    (
        "esper.simic.fake",
        "import torch\nfrom esper.tolaria import a\nfrom esper.tamiyo import b\nimport esper.storage\n",
    ),
    ("esper.cli.fake", "from esper.datagen import generate\nfrom esper.nissa import NissaHub\n"),
    ("esper.evaluation.fake", "from esper.simic.ppo import PPOPolicy\nfrom esper.env import MorphoEnv\n"),
    ("esper.datagen.fake", "from esper.env.loop import run_episodes\nfrom esper.tamiyo import CONTROLLERS\n"),
    ("esper.api.fake", "from esper.kasmina.slot import SeedSlot\nfrom esper.evaluation.controllers import x\n"),
    ("esper.lightning", "from esper.api import Controller\n"),
    ("esper.report.fake", "from esper.evaluation.results import ComparisonResult\nimport esper.simic.ppo.history\n"),
    ("esper.cli.fake", "from esper.report.render import render_report\n"),
]


@pytest.mark.parametrize(("modname", "source"), ALLOWED_CASES)
def test_checker_accepts_allowed_imports(modname: str, source: str) -> None:
    assert violations(source, modname) == []


def test_relative_import_resolution_in_package_init() -> None:
    """`from . import x` inside a package `__init__` resolves against the package itself."""
    names = [n for _, n in imported_modules("from . import hub\nfrom .tui import T\n", "esper.nissa", True)]
    assert "esper.nissa.hub" in names and "esper.nissa.tui" in names
    assert violations("from ..simic import masks\n", "esper.tamiyo", True)


def test_nothing_below_the_learners_imports_them() -> None:
    below = [p for layer in LAYERS[: [LEARNERS in layer for layer in LAYERS].index(True)] for p in layer]
    assert {"leyline", "kasmina", "data", "execution", "storage", "tolaria", "tamiyo", "env", "datagen"} <= set(below)
    for package in below:
        assert LEARNERS not in ALLOWED_ESPER[package]


def test_nothing_below_the_public_api_imports_it() -> None:
    """`esper.wrap` and `esper.Controller` drive kasmina, tamiyo and tolaria (and the learners, through the controller
    registry) from above: no layer of esper itself depends on them."""
    below = [p for layer in LAYERS[: [PUBLIC_API in layer for layer in LAYERS].index(True)] for p in layer]
    assert {"kasmina", "tolaria", "tamiyo", "env", "simic", "evaluation"} <= set(below)
    for package in below:
        assert PUBLIC_API not in ALLOWED_ESPER[package]


def test_importing_esper_loads_neither_torch_nor_the_public_api() -> None:
    """`esper.wrap` and friends load on first use (a module `__getattr__`), so `import esper` stays light."""
    code = "import sys, esper; print(','.join(m for m in ('torch', 'esper.api') if m in sys.modules))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert result.stdout.strip() == ""
    code = "import esper; print(esper.wrap.__module__, esper.Controller.__module__)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert result.stdout.split() == ["esper.api.wrapping", "esper.api.controller"]
