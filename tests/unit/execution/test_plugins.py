"""Plugins: a module (by path or by name) loads once per process, registers its blueprints and tasks through the
same functions as esper's own, and every worker process of a run loads the same plugins before building anything.

Loading a plugin changes a process's registries, so every load here happens in a fresh interpreter.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from esper.execution.plugins import load_plugins, loaded_plugins
from esper.leyline.errors import UserInputError

PLUGIN = Path(__file__).resolve().parents[2] / "fixtures" / "my_plugin.py"


def _python(code: str, cwd: Path | None = None, path: Path | None = None) -> dict[str, object]:
    paths = [str(Path(p).resolve()) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([*([str(path)] if path is not None else []), *paths])}
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, cwd=cwd,
                          env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def test_a_plugin_file_registers_its_blueprint_and_task_and_grows_the_action_space() -> None:
    out = _python(f"""
        import json
        from esper.env.features import obs_dim
        from esper.kasmina import DEFAULT_REGISTRY
        from esper.data import get_task_spec
        from esper.execution import load_plugins
        before = DEFAULT_REGISTRY.action_space("cnn")
        loaded = load_plugins([{str(PLUGIN)!r}, {str(PLUGIN)!r}])  # the second time is a no-op
        space, task = DEFAULT_REGISTRY.action_space("cnn"), get_task_spec("Stripes")
        print(json.dumps({{"loaded": list(loaded), "before": [before.num_joint_actions, obs_dim(before)],
                          "head": list(space.head), "after": [space.num_joint_actions, obs_dim(space)],
                          "task": [task.name, list(task.input_shape), task.num_outputs]}}))
    """)
    assert out["loaded"] == [str(PLUGIN)]
    assert out["before"] == [43, 80] and out["after"] == [52, 83]
    assert out["head"] == ["noop", "conv_light", "attention", "norm", "depthwise", "pointwise"]
    assert out["task"] == ["stripes", [1, 16, 16], 4]


def test_a_plugin_module_by_name_and_the_workers_of_a_run_load_it_too(tmp_path: Path) -> None:
    (tmp_path / "mine.py").write_text(PLUGIN.read_text(encoding="utf-8"), encoding="utf-8")
    (tmp_path / "probe.py").write_text(textwrap.dedent("""
        from esper.kasmina import DEFAULT_REGISTRY

        class Probe:
            def head(self):
                return list(DEFAULT_REGISTRY.action_space("cnn").head)
    """), encoding="utf-8")
    out = _python("""
        import json
        from esper.kasmina import DEFAULT_REGISTRY
        from esper.execution.actors import ActorPool
        from esper.execution.workers import WorkerOptions
        from esper.execution.plugins import load_plugins
        from probe import Probe

        load_plugins(["mine"])
        with ActorPool(WorkerOptions(workers=1), Probe) as pool:
            [worker] = pool.call(Probe.head, [()])
        print(json.dumps({"main": list(DEFAULT_REGISTRY.action_space("cnn").head), "worker": worker}))
    """, cwd=tmp_path, path=tmp_path)
    assert out["main"] == out["worker"] and out["worker"][-1] == "pointwise"  # type: ignore[index]


@pytest.mark.parametrize(("plugin", "match"), [
    ("no_such_plugin_module", r"no module named 'no_such_plugin_module' on the Python path; pass the path of its "
                              r"\.py file instead \(--plugin path/to/no_such_plugin_module\.py\)"),
    ("missing/my_plugin.py", r"no such \.py file"),
])
def test_a_plugin_that_cannot_be_found_names_the_fix(plugin: str, match: str) -> None:
    with pytest.raises(UserInputError, match=match):
        load_plugins([plugin], installed=False)
    assert all(plugin not in p for p in loaded_plugins())


def test_a_plugin_that_fails_while_loading_is_the_users_error(tmp_path: Path) -> None:
    broken = tmp_path / "broken_plugin.py"
    broken.write_text("raise RuntimeError('half-written')\n", encoding="utf-8")
    with pytest.raises(UserInputError, match=r"broken_plugin\.py failed while loading \(RuntimeError: half-written\); "
                                             r"fix the module"):
        load_plugins([str(broken)], installed=False)
    assert "esper_plugin_broken_plugin" not in sys.modules


def test_a_gymnasium_env_loads_its_plugins_with_its_config() -> None:
    pytest.importorskip("gymnasium")
    out = _python(f"""
        import json
        from esper.env.gym import MorphoGymEnv
        env = MorphoGymEnv(task="stripes", plugins=[{str(PLUGIN)!r}], max_epochs=3, param_cost=0.5)  # as make() does
        print(json.dumps({{"obs": list(env.observation_space.shape), "actions": int(env.action_space.n)}}))
    """)
    assert out == {"obs": [83], "actions": 52}
