"""One optimizer parameter group per seed, made with the user's own optimizer settings.

A germinated seed's parameters join the optimizer as a new group with the settings of its first group (the host's:
learning rate as the schedule has it now, momentum, weight decay, ...), and the learning-rate scheduler, if there is
one, gets an entry for the group in each of its per-group lists; a culled seed's group, its optimizer state and those
entries go. Nothing else changes, so the host's optimizer state (Adam's moments) is kept. A fossilized seed keeps its
group: it trains on as part of the model.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from esper.api.slotset import SlotSet
from esper.leyline.errors import UserInputError

__all__ = ["SeedGroups"]

_SCHEDULER_LISTS = ("base_lrs", "_last_lr", "lr_lambdas", "max_lrs", "min_lrs")
"""The per-group lists of torch's schedulers (LambdaLR's functions, CyclicLR's peaks, ReduceLROnPlateau's floors)."""


def _copy(value: Any) -> Any:
    return value.clone() if isinstance(value, torch.Tensor) else value


class SeedGroups:
    """The seed groups of one optimizer (and its scheduler), keyed by slot."""

    def __init__(self, optimizer: torch.optim.Optimizer, scheduler: Any = None) -> None:
        self.optimizer = optimizer
        self.schedulers = [] if scheduler is None else [scheduler, *getattr(scheduler, "_schedulers", [])]
        self.owned: dict[str, frozenset[int]] = {}  # slot -> ids of the parameters of its seed's group

    def sync(self, slot_set: SlotSet, settings: dict[str, dict[str, Any]] | None = None
             ) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """Make the groups follow the seeds; (slots whose group was added, slots whose group was removed).
        `settings`: a restored group's own settings, by slot (default: the first group's)."""
        current = {s.slot_id: params for s in slot_set.slots()
                   if s.state is not None and (params := s.seed_parameters())}
        removed = tuple(slot for slot, ids in self.owned.items() if {id(p) for p in current.get(slot, ())} != ids)
        for slot in removed:
            self._delete(self._index(self.owned.pop(slot)))
        added = tuple(slot for slot in current if slot not in self.owned)
        for slot in added:
            self._add(slot, current[slot], (settings or {}).get(slot))
        return added, removed

    def _index(self, ids: frozenset[int]) -> int:
        for i, group in enumerate(self.optimizer.param_groups):
            if {id(p) for p in group["params"]} == ids:
                return i
        raise RuntimeError("A seed's parameter group is gone from the optimizer: was it rebuilt without the "
                           "controller? Create the Controller again with the new optimizer")

    def _add(self, slot: str, params: Sequence[nn.Parameter], settings: dict[str, Any] | None) -> None:
        ids = frozenset(id(p) for p in params)
        groups = self.optimizer.param_groups
        if any({id(p) for p in g["params"]} == ids for g in groups):  # already there (a restored optimizer)
            self.owned[slot] = ids
            return
        for i in reversed(range(len(groups))):  # an optimizer built after the seeds came back may hold them
            kept = [p for p in groups[i]["params"] if id(p) not in ids]
            if not kept:
                self._delete(i)
            else:
                groups[i]["params"] = kept
        base = {k: _copy(v) for k, v in groups[0].items() if k != "params"} if settings is None else settings
        n = len(groups)
        self.optimizer.add_param_group({**base, "params": list(params)})
        for _, values in self._lists(n):
            values.append(values[0])
        self.owned[slot] = ids

    def _delete(self, index: int) -> None:
        """Remove a group, its parameters' optimizer state and its scheduler entries."""
        n = len(self.optimizer.param_groups)
        group = self.optimizer.param_groups.pop(index)
        for p in group["params"]:
            self.optimizer.state.pop(p, None)
        for _, values in self._lists(n):
            del values[index]

    def _lists(self, n: int) -> list[tuple[str, list[Any]]]:
        """The schedulers' per-group lists, each checked to hold one entry per group of `n`."""
        found = []
        for scheduler in self.schedulers:
            for name in _SCHEDULER_LISTS:
                values = getattr(scheduler, name, None)
                if not isinstance(values, list):
                    continue
                if len(values) != n:
                    raise UserInputError(f"{type(scheduler).__name__}.{name} holds {len(values)} entries for {n} "
                                         f"parameter groups: pass the scheduler to Controller(scheduler=...) when it "
                                         f"is created, before any seed exists")
                found.append((name, values))
        return found

    def state_dict(self) -> list[dict[str, Any]]:
        """The seed groups in optimizer order: slot and settings (plain values and tensors)."""
        order = sorted(self.owned, key=lambda slot: self._index(self.owned[slot]))
        return [{"slot": slot, "settings": {k: _copy(v) for k, v in self.optimizer.param_groups[
            self._index(self.owned[slot])].items() if k != "params"}} for slot in order]

    def load_state_dict(self, slot_set: SlotSet, entries: list[dict[str, Any]]) -> None:
        """Re-create the recorded groups, in their order and with their settings, for the seeds the slots hold now
        (restore the manifest first): an optimizer's `load_state_dict` then finds the groups it saved."""
        self.owned = {}
        seeds = {s.slot_id: s.seed_parameters() for s in slot_set.slots() if s.state is not None}
        for entry in entries:
            slot = entry["slot"]
            if not seeds.get(slot):
                raise UserInputError(f"The saved optimizer had a group for the seed in slot {slot}, which the restored "
                                     f"slots do not hold: load the manifest saved with it")
            self._add(slot, seeds[slot], dict(entry["settings"]))
