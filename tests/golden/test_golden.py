"""Behaviour is pinned: each golden case reruns its CLI command and must reproduce the recorded logs.

A failure means a change altered what esper computes. If that was intended, rerecord with
`python tests/golden/cases.py record` and say why in the commit; otherwise it is a regression.
The cases run on a pinned float path (see `cases.py`), so the same recordings hold on any x86-64 CPU.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from cases import CASES, DATA, GoldenCase, differences, float_path_pinned, portable_differences, run_case

PARAMS = [pytest.param(c, id=c.name, marks=[pytest.mark.slow] if c.slow else []) for c in CASES]


@pytest.mark.parametrize("case", PARAMS)
def test_golden_run_reproduces_recorded_logs(case: GoldenCase, tmp_path: Path) -> None:
    expected = json.loads((DATA / f"{case.name}.json").read_text())
    actual = run_case(case, tmp_path / "run")
    compare = differences if float_path_pinned() else portable_differences
    problems = [d for name in case.logs for d in compare(expected[name], actual[name], name)]
    assert not problems, f"{len(problems)} differences, first ones:\n" + "\n".join(problems[:20])


def test_differences_sees_a_changed_value() -> None:
    base = {"a": [1, 2.0, {"b": "x"}]}
    assert differences(base, {"a": [1, 2.0 + 1e-9, {"b": "x"}]}) == []
    assert differences(base, {"a": [1, 2.1, {"b": "x"}]})
    assert differences(base, {"a": [1, 2.0, {"b": "y"}]})
    assert differences(base, {"a": [1, 2.0]})
    assert differences({"n": 1}, {"n": 1.0})


def test_portable_differences_ignore_rounding_but_not_decisions() -> None:
    base = {"op": "GERMINATE", "epoch": 3, "reward": 0.25, "reason": "policy (value -0.16)", "slot": "early"}
    assert portable_differences(base, {**base, "reward": 0.2500001, "reason": "policy (value -0.17)"}) == []
    assert portable_differences(base, {**base, "op": "WAIT"})
    assert portable_differences(base, {**base, "epoch": 4})
    assert portable_differences(base, {**base, "reason": "Random: WAIT"})
    assert portable_differences(base, {**base, "reward": float("nan")})
    assert portable_differences(base, {k: v for k, v in base.items() if k != "slot"})
