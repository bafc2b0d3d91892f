"""Action masks as tensors, and the conditioning used by dependent sampling.

All rules live in `leyline.compute_action_validity`; this module only turns an `ActionValidity` into bool tensors.
A full mask dict has six keys: `op` [4], `slot` [3], `blueprint` [B], `blend` [3] and the joint `op_slot` [4, 3] and
`slot_blueprint` [3, B] (each optionally with a leading batch dimension), B being the size of the topology's blueprint
head (5 for the built-in CNN blueprints). Hand-built dicts with only the four head
keys are accepted everywhere: the joint keys then broadcast `slot` over the non-WAIT ops and `blueprint` over slots.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import torch

from esper.leyline.actions import (
    ActionSpace,
    ActionValidity,
    LifecycleOp,
    MaskSeedInfo,
    compute_action_validity,
    ordered_slots,
)
from esper.leyline.constants import (
    DEFAULT_MIN_FOSSILIZE_CONTRIBUTION,
    NUM_BLENDS,
    NUM_OPS,
    NUM_SLOTS,
)
from esper.leyline.reports import SeedStateReport

__all__ = [
    "HEAD_KEYS",
    "MaskSeedInfo",
    "build_slot_states",
    "compute_action_masks",
    "compute_batch_masks",
    "condition_on_action",
    "full_masks",
    "masks_from_joint",
    "masks_from_validity",
]

HEAD_KEYS: tuple[str, ...] = ("op", "slot", "blueprint", "blend")
MASK_KEYS: tuple[str, ...] = (*HEAD_KEYS, "op_slot", "slot_blueprint")


def _mask_sizes(num_blueprints: int) -> dict[str, tuple[int, ...]]:
    """The shape of each mask (without the batch dimension) for a blueprint head of `num_blueprints`."""
    return {"op": (NUM_OPS,), "slot": (NUM_SLOTS,), "blueprint": (num_blueprints,), "blend": (NUM_BLENDS,),
            "op_slot": (NUM_OPS, NUM_SLOTS), "slot_blueprint": (NUM_SLOTS, num_blueprints)}


def build_slot_states(
    slot_reports: Mapping[str, SeedStateReport],
    enabled_slots: Iterable[str],
    min_fossilize_contribution: float = DEFAULT_MIN_FOSSILIZE_CONTRIBUTION,
) -> dict[str, MaskSeedInfo | None]:
    """Validity input for the enabled slots (None = empty). `fossilize_ready` is the G5 precondition."""
    enabled = ordered_slots(enabled_slots)
    stray = sorted(set(slot_reports) - set(enabled))
    if stray:
        raise ValueError(f"Seed reports for slots that are not enabled: {stray} (enabled: {list(enabled)})")
    states: dict[str, MaskSeedInfo | None] = {}
    for slot in enabled:
        report = slot_reports.get(slot)
        if report is None:
            states[slot] = None
            continue
        c = report.metrics.counterfactual_contribution
        states[slot] = MaskSeedInfo(
            stage=int(report.stage),
            seed_age_epochs=report.metrics.epochs_total,
            fossilize_ready=c is not None and c >= min_fossilize_contribution and report.is_healthy,
        )
    return states


def masks_from_validity(validity: ActionValidity, device: str | torch.device | None = None) -> dict[str, torch.Tensor]:
    """The six mask tensors of one environment; envs already hold their `ActionValidity`."""

    def t(values: object) -> torch.Tensor:
        return torch.tensor(values, dtype=torch.bool, device=device)

    op_slot = t(validity.op_slot)
    slot_blueprint = t(validity.slot_blueprint)
    return {
        "op": t(validity.op),
        "slot": op_slot[1:].any(dim=0),  # rows 1.. are the non-WAIT ops
        "blueprint": slot_blueprint.any(dim=0),
        "blend": t(validity.blend),
        "op_slot": op_slot,
        "slot_blueprint": slot_blueprint,
    }


def compute_action_masks(
    slot_states: Mapping[str, MaskSeedInfo | None],
    total_seeds: int = 0,
    max_seeds: int = 0,
    device: str | torch.device | None = None,
    *,
    space: ActionSpace,
    embargoed: Iterable[str] = (),
) -> dict[str, torch.Tensor]:
    """Masks for one environment; keys of `slot_states` are the enabled slots."""
    validity = compute_action_validity(
        slot_states, total_seeds=total_seeds, max_seeds=max_seeds, space=space, embargoed=embargoed
    )
    return masks_from_validity(validity, device)


def full_masks(masks: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Validate shapes and add the joint keys to a hand-built dict (by broadcasting), as bool tensors; the blueprint
    head's size is read from the `blueprint` mask."""
    missing = [k for k in HEAD_KEYS if k not in masks]
    if missing:
        raise KeyError(f"Mask dict lacks heads {missing}; got keys {sorted(masks)}")
    batch = tuple(masks["op"].shape[:-1])
    num_blueprints = int(masks["blueprint"].shape[-1])
    out: dict[str, torch.Tensor] = {}
    for key, size in _mask_sizes(num_blueprints).items():
        if key not in masks:
            continue
        value = masks[key].to(torch.bool)
        if tuple(value.shape) != batch + size:
            raise ValueError(f"Mask '{key}' has shape {tuple(value.shape)}, expected {batch + size}")
        out[key] = value
    if "op_slot" not in out:
        non_wait = torch.ones(NUM_OPS, NUM_SLOTS, dtype=torch.bool, device=out["slot"].device)
        non_wait[LifecycleOp.WAIT] = False
        out["op_slot"] = out["slot"].unsqueeze(-2) & non_wait
    if "slot_blueprint" not in out:
        out["slot_blueprint"] = out["blueprint"].unsqueeze(-2).expand(*batch, NUM_SLOTS, num_blueprints).clone()
    return out


def compute_batch_masks(
    items: Sequence[ActionValidity | Mapping[str, torch.Tensor]], device: str | torch.device | None = None
) -> dict[str, torch.Tensor]:
    """Stack per-env validities or (possibly hand-built) mask dicts into full [B, ...] masks."""
    if not items:
        raise ValueError("compute_batch_masks needs at least one environment")
    per_env = [
        masks_from_validity(item, device) if isinstance(item, ActionValidity) else full_masks(item) for item in items
    ]
    return {key: torch.stack([m[key].to(device) for m in per_env]) for key in MASK_KEYS}


def condition_on_action(
    masks: Mapping[str, torch.Tensor], action: Mapping[str, int | torch.Tensor]
) -> dict[str, torch.Tensor]:
    """The four 1-D (or [B, n]) masks actually used to choose `action`.

    slot ← `op_slot[op]`; blueprint ← `slot_blueprint[slot]` and blend ← `blend` for GERMINATE only. A head that is
    irrelevant to the op (slot for WAIT; blueprint and blend unless GERMINATE) gets an all-True mask.
    """
    full = full_masks(masks)
    batched = full["op"].dim() == 2
    if not batched:
        full = {k: v.unsqueeze(0) for k, v in full.items()}
    device = full["op"].device
    op = torch.as_tensor(action["op"], dtype=torch.long, device=device).reshape(-1)
    slot = torch.as_tensor(action["slot"], dtype=torch.long, device=device).reshape(-1)
    rows = torch.arange(op.shape[0], device=device)
    is_wait = (op == LifecycleOp.WAIT).unsqueeze(-1)
    not_germinate = (op != LifecycleOp.GERMINATE).unsqueeze(-1)
    used = {
        "op": full["op"],
        "slot": full["op_slot"][rows, op] | is_wait,
        "blueprint": full["slot_blueprint"][rows, slot] | not_germinate,
        "blend": full["blend"] | not_germinate,
    }
    return used if batched else {k: v.squeeze(0) for k, v in used.items()}


def masks_from_joint(valid: torch.Tensor, space: ActionSpace) -> dict[str, torch.Tensor]:
    """The six [N, ...] head masks from the joint validity [N, joint actions of `space`] that datasets store.

    Exact for esper's rules, where the valid blends do not depend on the slot or blueprint chosen.
    """
    joint = space.num_joint_actions
    if valid.dim() != 2 or valid.shape[1] != joint:
        raise ValueError(f"Expected joint validity of shape [N, {joint}], got {tuple(valid.shape)}")
    valid = valid.to(torch.bool)
    n, device = valid.shape[0], valid.device
    op = torch.zeros(n, NUM_OPS, dtype=torch.bool, device=device)
    op_slot = torch.zeros(n, NUM_OPS, NUM_SLOTS, dtype=torch.bool, device=device)
    slot_blueprint = torch.zeros(n, NUM_SLOTS, space.num_blueprints, dtype=torch.bool, device=device)
    blend = torch.zeros(n, NUM_BLENDS, dtype=torch.bool, device=device)
    for index in range(joint):
        a, column = space.from_joint_index(index), valid[:, index]
        op[:, a.op] |= column
        if a.op != LifecycleOp.WAIT:
            op_slot[:, a.op, a.slot] |= column
        if a.op == LifecycleOp.GERMINATE:
            slot_blueprint[:, a.slot, a.blueprint] |= column
            blend[:, a.blend] |= column
    blend |= ~blend.any(dim=1, keepdim=True)  # no germination possible: the blend head is irrelevant
    return {"op": op, "slot": op_slot[:, 1:].any(dim=1), "blueprint": slot_blueprint.any(dim=1), "blend": blend,
            "op_slot": op_slot, "slot_blueprint": slot_blueprint}
