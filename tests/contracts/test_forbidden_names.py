"""Names that must not exist: grep src/esper (and README.md when present) for legacy names.

Patterns are assembled from fragments so this file never matches them itself (it also lies outside the scanned
paths). Feature builders of the old 27/37/54-dim observation schemas are detected two ways:

* any identifier that contains a hint word (obs, feat, dim, state, signal, vec, input) together with a standalone
  27, 37 or 54 (not adjacent to other digits), e.g. ``obs_27``, ``feature_dim_37``, ``build_state54``;
* the phrases ``27-dim``, ``37_dim``, ``54dim`` (and ``-dimensional``) anywhere in the text.
"""

from __future__ import annotations

import ast
import functools
import inspect
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

import esper

PACKAGE_ROOT = Path(esper.__file__).resolve().parent
REPO_ROOT = PACKAGE_ROOT.parents[1]
THIS_FILE = Path(__file__).resolve()
TEXT_SUFFIXES = {".py", ".md", ".txt", ".toml", ".json", ".yaml", ".yml", ".cfg", ".ini"}


def _word(*fragments: str) -> re.Pattern[str]:
    return re.compile(r"\b" + "".join(fragments) + r"\b")


SEP = r"[_\-\s]?"
FORBIDDEN: dict[str, re.Pattern[str]] = {
    "per-slot seed budget": re.compile("max" + SEP + "seeds" + SEP + "per" + SEP + "slot", re.IGNORECASE),
    "advance op": _word("ADV", "ANCE"),
    "get_slot_states": _word("get_slot", "_states"),
    "normalize_observation": _word("normalize", "_observation"),
    "count_seeds_in_slot": _word("count_seeds", "_in_slot"),
    "record_epoch": _word("record", "_epoch"),
    "increment_epoch": _word("increment", "_epoch"),
    "force_alpha": _word("force", "_alpha"),
    "flat action enum/mask": re.compile(r"\bFlat" + "Action\\b|\\b\\w*flat_" + "action\\w*", re.IGNORECASE),
    "process-wide hub getter": re.compile(r"\bget_\w*" + "hub\\b", re.IGNORECASE),
    "mock-data flag": re.compile(r"\b(use_)?mock" + r"[_\-]data\b|\buse_" + "mock\\b|--" + "mock\\b", re.IGNORECASE),
    "27/37/54-dim phrase": re.compile(r"(?<![\d.])(2" + r"7|3" + r"7|5" + r"4)[-_]?dim(ensional)?\b", re.IGNORECASE),
}
IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
LEGACY_DIM = re.compile(r"(?<![0-9])(2" + "7|3" + "7|5" + "4)(?![0-9])")
DIM_HINT = re.compile("obs|feat|dim|state|signal|vec|input", re.IGNORECASE)


def legacy_dim_identifiers(text: str) -> list[str]:
    """Identifiers that look like builders/constants of the removed 27/37/54-dim feature schemas."""
    return sorted({t for t in IDENTIFIER.findall(text) if LEGACY_DIM.search(t) and DIM_HINT.search(t)})


def find_forbidden(text: str) -> list[str]:
    """Every forbidden name found in `text`, as 'label: match' strings."""
    hits = [f"{label}: {m.group(0)!r}" for label, pattern in FORBIDDEN.items() for m in pattern.finditer(text)]
    hits += [f"legacy feature dim: {name!r}" for name in legacy_dim_identifiers(text)]
    return hits


def scanned_files() -> Iterator[Path]:
    for path in sorted(PACKAGE_ROOT.rglob("*")):
        if path.is_file() and path.suffix in TEXT_SUFFIXES and "__pycache__" not in path.parts:
            yield path
    readme = REPO_ROOT / "README.md"
    if readme.is_file():
        yield readme


def test_scan_covers_source_tree() -> None:
    files = list(scanned_files())
    assert PACKAGE_ROOT / "leyline" / "actions.py" in files
    assert THIS_FILE not in files


@pytest.mark.parametrize("path", list(scanned_files()), ids=lambda p: str(p.relative_to(REPO_ROOT)))
def test_no_forbidden_names(path: Path) -> None:
    text = path.read_text(encoding="utf-8", errors="replace")
    hits = []
    for lineno, line in enumerate(text.splitlines(), 1):
        hits += [f"line {lineno}: {hit}" for hit in find_forbidden(line)]
    assert not hits, f"{path.relative_to(REPO_ROOT)}:\n" + "\n".join(hits)


@functools.cache
def _parsed_sources() -> tuple[tuple[Path, ast.Module], ...]:
    return tuple((p, ast.parse(p.read_text(encoding="utf-8"))) for p in sorted(PACKAGE_ROOT.rglob("*.py")))


def _classes(name: str) -> Iterator[tuple[Path, ast.ClassDef]]:
    for path, tree in _parsed_sources():
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef) and node.name == name:
                yield path, node


def _method_names(cls: ast.ClassDef) -> set[str]:
    return {n.name for n in cls.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)}


def _param_names(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> set[str]:
    a = fn.args
    return {x.arg for x in (*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg) if x is not None}


def test_blueprint_registry_has_no_reset() -> None:
    found = list(_classes("BlueprintRegistry"))
    assert found, "BlueprintRegistry is gone: point this check at the class that holds the blueprints now"
    for path, cls in found:
        assert "reset" not in _method_names(cls), f"{path}: BlueprintRegistry defines reset"


def test_blending_start_has_no_temperature() -> None:
    """No kasmina function that starts/handles blending takes a `temperature` argument."""
    for path, tree in _parsed_sources():
        if "kasmina" not in path.relative_to(PACKAGE_ROOT).parts:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and re.search("blend|start", node.name):
                assert "temperature" not in _param_names(node), f"{path}:{node.lineno} {node.name}(temperature=...)"


FACTORED_SWITCH = re.compile(r"^(use_)?factored(_mode)?$")


def test_ppo_agent_has_no_factored_switch_ast() -> None:
    found = list(_classes("PPOAgent"))
    assert found, "PPOAgent is gone: point this check at the class that holds the PPO update now"
    for path, cls in found:
        for fn in cls.body:
            if isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
                bad = {p for p in _param_names(fn) if FACTORED_SWITCH.match(p)}
                assert not bad, f"{path}: PPOAgent.{fn.name} takes {bad}"


def test_ppo_agent_has_no_factored_switch_runtime() -> None:
    from esper.simic.ppo.agent import PPOAgent as agent_cls
    for name, member in inspect.getmembers(agent_cls, callable):
        if name.startswith("__") and name != "__init__":
            continue
        try:
            params = inspect.signature(member).parameters
        except (TypeError, ValueError):
            continue
        assert not any(FACTORED_SWITCH.match(p) for p in params), f"PPOAgent.{name}{inspect.signature(member)}"
    assert not any(FACTORED_SWITCH.match(a) for a in dir(agent_cls)), "PPOAgent has a factored attribute"


# ------------------------------------------------------------------------------------- self-check of the scanner

BAD_SAMPLES = [
    "max_seeds_" + "per_slot = 2",
    "MAX_SEEDS_" + "PER_SLOT = 1",
    "parser.add_argument('--max-seeds-" + "per-slot')",
    "LifecycleOp.ADV" + "ANCE",
    "def get_slot_" + "states(model):",
    "obs = normalize_" + "observation(obs)",
    "n = count_seeds_" + "in_slot(slot)",
    "state.record_" + "epoch()",
    "state.increment_" + "epoch()",
    "slot.force_" + "alpha(1.0)",
    "mask = compute_flat_" + "action_mask(x)",
    "hub = get_" + "hub()",
    "def build_obs_" + "27(signals):",
    "FEATURE_DIM_" + "37 = 37",
    "def signals_to_features_" + "54(x):",
    "the old 54" + "-dim builder",
    "use_mock_" + "data=True",
]
GOOD_SAMPLES = [
    "max_seeds = 3",
    "ADV" + "ANCED = 1",
    "def record_accuracy(self, acc):",
    "reset_stage_baseline()",
    "CIFAR10_MD5 = 'c58f30108f718f92721af3b95e74349a'",
    "_CULL_BASE = 1 + NUM_SLOTS * 12  # 37",
    "OBS_DIM = 80; SEED_TELEMETRY_DIM = 10",
    "epoch_270 = 1; feature_dim_370 = 2",
    "there is no flat action enum",
]


@pytest.mark.parametrize("sample", BAD_SAMPLES)
def test_scanner_flags_forbidden_sample(sample: str) -> None:
    assert find_forbidden(sample), sample


@pytest.mark.parametrize("sample", GOOD_SAMPLES)
def test_scanner_accepts_clean_sample(sample: str) -> None:
    assert find_forbidden(sample) == [], sample


def test_factored_switch_pattern() -> None:
    assert FACTORED_SWITCH.match("factored") and FACTORED_SWITCH.match("use_factored")
    assert not FACTORED_SWITCH.match("factored_action")
