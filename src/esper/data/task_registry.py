"""The task registry, in the style of Gymnasium's `register`: a task is a name and a factory that builds its
`TaskSpec` the first time a run asks for it, so a task may read its data to know its shape and class count.

Task forms name tasks that need no code: `npz:PATH` or `folder:DIR` resolve their argument to a task (see
`esper.data.array_tasks`). esper's own tasks register through `register_task` exactly as a plugin's do.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

from esper.data.task_spec import TaskSpec
from esper.leyline.errors import UserInputError, did_you_mean

__all__ = ["TASKS", "TaskForm", "TaskRegistry", "register_task", "register_task_form"]

TaskFactory = Callable[[], TaskSpec]
FormResolver = Callable[[str], TaskSpec]


@dataclass(frozen=True)
class TaskForm:
    """`PREFIX:ARGUMENT` task names: `resolve(argument)` builds the task; `usage` shows it (e.g. `npz:PATH.npz`)."""

    prefix: str
    resolve: FormResolver
    usage: str
    summary: str


class TaskRegistry(Mapping[str, TaskSpec]):
    """Registered task names → their specs (built on first access, then kept), plus the task forms."""

    def __init__(self) -> None:
        self._factories: dict[str, TaskFactory] = {}
        self._forms: dict[str, TaskForm] = {}
        self._built: dict[str, TaskSpec] = {}

    def register(self, name: str, factory: TaskFactory) -> None:
        key = name.lower()
        if not key or ":" in key or not key.replace("-", "_").isidentifier():
            raise UserInputError(f"Task name {name!r} must be a plain identifier (letters, digits, _ or -, no ':')")
        if key in self._factories or key in self._forms:
            raise UserInputError(f"Task '{name}' is already registered: give the new one another name")
        self._factories[key] = factory

    def register_form(self, form: TaskForm) -> None:
        if form.prefix in self._forms or form.prefix in self._factories:
            raise UserInputError(f"Task form '{form.prefix}:' is already registered")
        self._forms[form.prefix] = form

    def __getitem__(self, name: str) -> TaskSpec:
        if name not in self._built:
            spec = self._factories[name]()
            if spec.name != name:
                raise UserInputError(f"The factory of task '{name}' built a task named '{spec.name}': name them alike")
            self._built[name] = spec
        return self._built[name]

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._factories))

    def __len__(self) -> int:
        return len(self._factories)

    def forms(self) -> list[TaskForm]:
        return [self._forms[p] for p in sorted(self._forms)]

    def usages(self) -> list[str]:
        """Every way to name a task: the registered names, then the forms."""
        return [*self, *(f.usage for f in self.forms())]

    def resolve(self, name: str) -> TaskSpec:
        """The task `name` names: a registered name (any case) or `PREFIX:ARGUMENT` of a form (the argument, a path,
        keeps its case)."""
        prefix, sep, argument = name.partition(":")
        if sep and prefix.lower() in self._forms:
            key = f"{prefix.lower()}:{argument}"
            if key not in self._built:
                spec = self._forms[prefix.lower()].resolve(argument)
                self._built[key] = spec if spec.name == key else dataclasses.replace(spec, name=key)
            return self._built[key]
        if name.lower() not in self._factories:
            hint = did_you_mean(prefix, self._forms, rest=sep + argument) if sep else did_you_mean(name, self)
            raise UserInputError(f"Unknown task '{name}'{hint}. Available: {', '.join(self.usages())} (a plugin's task "
                                 f"needs --plugin MODULE)")
        return self[name.lower()]


TASKS = TaskRegistry()
"""The registry every command resolves task names through."""


def register_task(name: str) -> Callable[[TaskFactory], TaskFactory]:
    """Decorator: register `factory() -> TaskSpec` as task `name` (the factory runs once per process, when a run
    first asks for the task, so it may read its data). `esper.data.image_task` and `arrays_task` build the spec of
    an image-classification task."""

    def decorate(factory: TaskFactory) -> TaskFactory:
        TASKS.register(name, factory)
        return factory

    return decorate


def register_task_form(prefix: str, *, usage: str, summary: str) -> Callable[[FormResolver], FormResolver]:
    """Decorator: tasks named `prefix:ARGUMENT` are `resolver(ARGUMENT)` (built once per process and name)."""

    def decorate(resolver: FormResolver) -> FormResolver:
        TASKS.register_form(TaskForm(prefix, resolver, usage, summary))
        return resolver

    return decorate
