"""Shape rules the code base keeps: small signatures (configuration travels as objects), no spec citations, and one
owner of the epoch's order."""

from __future__ import annotations

import ast
from pathlib import Path

import esper
from esper.env.env import MorphoEnv

PACKAGE_ROOT = Path(esper.__file__).resolve().parent
MAX_PARAMETERS = 12
# MorphoEnv's steps of an epoch, valid in one order only: `esper.env.lockstep` calls them, and nothing else does.
EPOCH_STEPS = frozenset({"train_batch", "finish_train_pass", "validate_batch", "wait_for_passes", "queue_measurements",
                         "finish_measurements", "observe", "execute", "step_lifecycle"})
EPOCH_PROTOCOL = frozenset({Path("env/env.py"), Path("env/lockstep.py")})


def _functions() -> list[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]]:
    found = []
    for path in sorted(PACKAGE_ROOT.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                found.append((f"{path.relative_to(PACKAGE_ROOT)}:{node.lineno} {node.name}", node))
    return found


def _parameter_count(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    a = node.args
    names = [p.arg for p in (*a.posonlyargs, *a.args, *a.kwonlyargs)]
    return len([n for n in names if n not in ("self", "cls")]) + (a.vararg is not None) + (a.kwarg is not None)


def test_no_function_takes_more_than_twelve_parameters() -> None:
    too_many = [f"{where} takes {_parameter_count(node)}" for where, node in _functions()
                if _parameter_count(node) > MAX_PARAMETERS]
    assert not too_many, "pass a config object instead:\n" + "\n".join(too_many)


def test_the_checker_counts_keyword_only_and_variadic_parameters() -> None:
    node = ast.parse("def f(self, a, /, b, *args, c, d=1, **kw): pass").body[0]
    assert isinstance(node, ast.FunctionDef) and _parameter_count(node) == 6


def test_code_never_cites_the_design_document() -> None:
    """Comments explain why in their own words: the design document is not part of the repository."""
    repo = Path(__file__).resolve().parents[2]
    files = [p for folder in (PACKAGE_ROOT, repo / "tests", repo / "benchmarks") for p in sorted(folder.rglob("*.py"))
             if p != Path(__file__).resolve()]
    citing = [f"{path}:{i}" for path in files
              for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1)
              if "DESIGN" in line or "§" in line]
    assert not citing, citing


def test_only_the_lockstep_calls_an_envs_epoch_steps() -> None:
    """A runner that stepped an env itself could call the steps out of order; it goes through a `Lockstep` instead."""
    assert all(callable(getattr(MorphoEnv, name, None)) for name in EPOCH_STEPS)  # the list names real steps
    calls = [f"{path.relative_to(PACKAGE_ROOT)}:{node.lineno} calls .{node.func.attr}()"
             for path in sorted(PACKAGE_ROOT.rglob("*.py")) if path.relative_to(PACKAGE_ROOT) not in EPOCH_PROTOCOL
             for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
             if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in EPOCH_STEPS]
    assert not calls, "drive envs through esper.env.lockstep.Lockstep:\n" + "\n".join(calls)


def test_one_helper_suggests_the_name_meant() -> None:
    """Every unknown-name error suggests its fix through `esper.leyline.did_you_mean`, so all of them read alike."""
    users = [str(path.relative_to(PACKAGE_ROOT)) for path in sorted(PACKAGE_ROOT.rglob("*.py"))
             if "get_close_matches" in path.read_text(encoding="utf-8")]
    assert users == ["leyline/errors.py"]
