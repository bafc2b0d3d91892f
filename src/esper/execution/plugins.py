"""Plugins: the user's own modules that register blueprints and tasks, loaded in every process of a run.

A plugin is an ordinary Python module that calls `esper.kasmina.register_blueprint` and
`esper.data.register_task` when it is imported, as esper's own catalogs do. It is named by `--plugin MODULE` on
any command (an importable module name, or the path of a `.py` file; repeatable) or installed as an entry point of the
`esper.plugins` group (`[project.entry-points."esper.plugins"] mine = "my_package.esper_plugin"`), which every command
loads. Worker processes and Ray actors load the same plugins, in the same order, before they build anything, so every
process of a run sees the same registries (and the same action space).
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Iterable
from importlib.metadata import entry_points
from pathlib import Path
from types import ModuleType

from esper.leyline.errors import UserInputError

__all__ = ["ENTRY_POINT_GROUP", "load_plugins", "loaded_plugins"]

ENTRY_POINT_GROUP = "esper.plugins"

_LOADED: list[str] = []
"""Every plugin this process has loaded, in loading order (the registry of plugins that workers replay)."""


def loaded_plugins() -> tuple[str, ...]:
    """The plugins loaded in this process so far, as `load_plugins` takes them (entry points as `ep:NAME`)."""
    return tuple(_LOADED)


def load_plugins(plugins: Iterable[str] = (), *, installed: bool = True) -> tuple[str, ...]:
    """Import the installed `esper.plugins` entry points (sorted by name; unless `installed` is False), then
    `plugins` in order, each once per process. Returns every plugin this process has loaded, as `load_plugins(...,
    installed=False)` takes them in another process: entry points as `ep:NAME`, files by their absolute path."""
    names = [f"ep:{e.name}" for e in sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name)]
    for plugin in [*(names if installed else []), *plugins]:
        key = str(Path(plugin).resolve()) if _is_path(plugin) else plugin
        if key in _LOADED:
            continue
        try:
            if key.startswith("ep:"):
                _load_entry_point(key.removeprefix("ep:"))
            elif _is_path(plugin):
                _import_path(Path(key))
            else:
                _import_module(plugin)
        except UserInputError:
            raise
        except Exception as error:  # the plugin's own code failed: the user's to fix, not esper's
            raise UserInputError(f"plugin {plugin} failed while loading ({type(error).__name__}: {error}); fix the "
                                 f"module (--debug shows the traceback)") from error
        _LOADED.append(key)
    return loaded_plugins()


def _load_entry_point(name: str) -> None:
    found = [e for e in entry_points(group=ENTRY_POINT_GROUP) if e.name == name]
    if not found:
        raise UserInputError(f"No installed '{ENTRY_POINT_GROUP}' entry point named {name!r}: install the package "
                             f"that provides it")
    found[0].load()


def _is_path(plugin: str) -> bool:
    return plugin.endswith(".py") or "/" in plugin or "\\" in plugin


def _import_module(plugin: str) -> ModuleType:
    """A module by name (`my_package.esper_plugin`)."""
    try:
        return importlib.import_module(plugin)
    except ModuleNotFoundError as error:
        if error.name is not None and plugin.startswith(error.name):
            raise UserInputError(f"--plugin {plugin}: no module named {error.name!r} on the Python path; pass the "
                                 f"path of its .py file instead (--plugin path/to/{plugin.rsplit('.', 1)[-1]}.py), "
                                 f"or install it or add its directory to PYTHONPATH") from None
        raise


def _import_path(path: Path) -> ModuleType:
    """A `.py` file as module `esper_plugin_<stem>` (registered in `sys.modules`, so it imports once)."""
    resolved = path.resolve()
    if resolved.suffix != ".py" or not resolved.is_file():
        raise UserInputError(f"--plugin {path}: no such .py file; pass the path of a Python file or an importable "
                             f"module name")
    name = f"esper_plugin_{resolved.stem}"
    loaded = sys.modules.get(name)
    if loaded is not None:
        if Path(str(loaded.__file__)).resolve() != resolved:
            raise UserInputError(f"--plugin {path}: another plugin file named {resolved.name} is loaded already "
                                 f"({loaded.__file__}); rename one of them")
        return loaded
    spec = importlib.util.spec_from_file_location(name, resolved)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module
