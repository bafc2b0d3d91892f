"""Rows of the run directory's line logs: one per env step (steps.jsonl) and one per episode (episodes.jsonl)."""

from __future__ import annotations

from typing import Any

from esper.env.env import EnvStep


def step_row(step: EnvStep) -> dict[str, Any]:
    """steps.jsonl: what was decided, what happened, and every reward component (whose total is the reward)."""
    env, cmd = step.env, step.decision.command
    slots: dict[str, Any] = {}
    for s in env.model.slots():
        state = s.state
        slots[s.slot_id] = None if state is None else {
            "stage": state.stage.name, "blueprint": state.blueprint_id, "alpha": round(state.alpha, 6),
            "counterfactual": state.metrics.counterfactual_contribution}
    return {
        "batch": env.spec.batch, "env": env.env_id, "episode": env.spec.episode, "epoch": step.epoch,
        "controller": env.controller_name, "op": cmd.op.name, "slot": cmd.slot_id, "blueprint": cmd.blueprint_id,
        "blend": cmd.blend_id, "success": step.action_success, "reason": step.decision.reason,
        "train_loss": step.train.train_loss, "train_acc": step.train.train_accuracy,
        "val_loss": step.val.val_loss, "val_acc": step.val.val_accuracy, "rollback": step.rollback,
        "slots": slots, "seed_params": env.model.seed_param_count_total,
        "reward_components": step.reward.to_dict(), "reward": step.reward.total(),
    }
