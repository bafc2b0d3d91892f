"""The teacher of a residual policy: a controller that needs no training, and the prior its choices put on each head.

A residual policy's logits over the legal actions are log π_T(·|s) + f_θ(s), where π_T is the teacher's choice
smoothed with ε of uniform over the legal actions and f_θ's output layer starts at zero. So the initial policy *is*
the teacher (exactly with ε = 0; its mode for any ε < 1), and learning moves it only where the returns say the
teacher is wrong — a controller that starts where the rules end instead of rediscovering them.

The heads are sampled in order (op → slot → blueprint, blend), so π_T is factored the same way: a head follows the
teacher only where every head before it did (the slot head after the teacher's op; blueprint and blend after its op
and slot). Elsewhere, and on a head where the teacher's choice is not legal for the policy (a blueprint outside its
head), π_T is uniform over the legal actions: a zero prior.

Every env has its own teacher instance with its own per-episode state, fed the same observation the policy sees
(restricted to the blueprints the policy may germinate), in the process that decides. A teacher is built fresh for
each episode from the episode's seeds and sees only its env's observations, so its decisions are the same with any
number of workers and on a resumed run. With ε = 0 the actor cannot move wherever the teacher has a choice: the other
actions' prior is the most negative finite logit, out of any gradient's reach.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from pathlib import Path

import torch

import esper.datagen  # noqa: F401  (registers the behaviour presets a teacher may name)
from esper.data.tasks import TaskSpec
from esper.env.masks import HEAD_KEYS
from esper.leyline import CANONICAL_SLOTS, EnvObservation, LifecycleOp
from esper.leyline.constants import MASK_VALUE
from esper.leyline.errors import UserInputError
from esper.tamiyo import CONTROLLERS, ControllerContext, TamiyoDecision, TamiyoPolicy
from esper.tamiyo.heuristic_record import TUNED

__all__ = [
    "DETERMINISTIC_TEACHERS",
    "NO_TEACHER",
    "TEACHER_KINDS",
    "UNSET",
    "Teachers",
    "check_teacher_spec",
    "kl_to_prior",
    "log_prior",
    "teacher_rows",
]

NO_TEACHER = "none"
"""The `teacher` of a policy learned from scratch."""
TEACHER_KINDS = ("heuristic", "grow", "behavior")
"""Controllers that need no training and leave the host as it is: what a residual policy may start from."""
DETERMINISTIC_TEACHERS = ("heuristic", "grow")
"""Teacher kinds whose decisions follow from the episode alone (no random stream of their own; a behaviour policy
samples): the same teacher decides the same way wherever it runs."""
UNSET = -1
"""A teacher row's entry for a head the teacher has no choice on (the slot of a WAIT; blueprint and blend unless it
germinated a blueprint of the policy's head)."""


def check_teacher_spec(spec: str) -> str:
    """`spec` if it names a controller a residual policy can start from (`none` included), else a clear error."""
    if spec == NO_TEACHER:
        return spec
    name, _, argument = spec.partition(":")
    if name not in TEACHER_KINDS:
        raise UserInputError(f"teacher '{spec}' is not a controller that needs no training: use one of "
                             f"{', '.join(f'{k}[:...]' for k in TEACHER_KINDS)} or '{NO_TEACHER}' (a policy learned "
                             f"from scratch)")
    CONTROLLERS.parse(spec)  # an unknown or malformed spec fails here, before any episode runs
    if name == "heuristic" and argument == TUNED:
        raise UserInputError("teacher 'heuristic:tuned' names a study's own record: name the record file instead "
                             "(teacher=heuristic:PATH.json)")
    if name == "heuristic" and argument and not Path(argument).is_file():
        raise UserInputError(f"teacher {spec}: no heuristic record at {argument} (write one with `esper tune "
                             f"heuristic --output {argument}`)")
    return spec


class Teachers:
    """One teacher per env of a rollout batch (or of an evaluation episode), each built fresh for its episode."""

    def __init__(self, spec: str, policies: Sequence[TamiyoPolicy], blueprints: frozenset[int] | None) -> None:
        self.spec = spec
        self.policies = list(policies)
        self.blueprints = blueprints

    @classmethod
    def build(cls, spec: str, contexts: Sequence[ControllerContext], blueprints: frozenset[int] | None) -> Teachers:
        """One teacher per env, each built for its env's episode (`contexts`)."""
        return cls(spec, [CONTROLLERS.build(spec, context) for context in contexts], blueprints)

    @classmethod
    def for_training(cls, spec: str, task: TaskSpec, slots: Sequence[str], max_epochs: int, seeds: Sequence[int],
                     blueprints: frozenset[int] | None) -> Teachers:
        """Teachers for the envs of a rollout batch, whose episodes run on host seeds `seeds` (env i's teacher is
        controller index i, so a stochastic teacher draws its own stream per env)."""
        lifecycle = task.lifecycle
        return cls.build(spec, [ControllerContext(
            space=task.action_space, slots=tuple(slots), max_epochs=max_epochs, seed=seed, index=i,
            seed_training_epochs=max(1, lifecycle.min_training_epochs),
            seed_blending_epochs=max(lifecycle.blending_steps, lifecycle.min_blending_epochs))
            for i, seed in enumerate(seeds)], blueprints)

    def decide(self, observations: Sequence[EnvObservation]) -> list[TamiyoDecision]:
        """Each env's teacher decides on what its env observed, among the blueprints the policy may germinate."""
        if len(observations) != len(self.policies):
            raise ValueError(f"{len(observations)} observations for {len(self.policies)} teachers")
        return [teacher.decide(self._restricted(obs)) for teacher, obs in zip(self.policies, observations, strict=True)]

    def _restricted(self, obs: EnvObservation) -> EnvObservation:
        if self.blueprints is None:
            return obs
        return dataclasses.replace(obs, validity=obs.validity.restricted_to_blueprints(self.blueprints))


def teacher_rows(decisions: Sequence[TamiyoDecision], device: torch.device | str = "cpu") -> torch.Tensor:
    """The teachers' choices as a [B, 4] long tensor in `HEAD_KEYS` order (op, slot, blueprint, blend), `UNSET` where
    a teacher made no choice on a head (a germination outside the policy's blueprint head keeps op and slot)."""
    rows = []
    for d in decisions:
        op = d.command.op
        slot = UNSET if op == LifecycleOp.WAIT else _slot_index(d)
        germinates = op == LifecycleOp.GERMINATE and d.factored is not None
        rows.append([int(op), slot, int(d.factored.blueprint) if germinates and d.factored else UNSET,
                     int(d.factored.blend) if germinates and d.factored else UNSET])
    return torch.tensor(rows, dtype=torch.long, device=device).reshape(len(rows), len(HEAD_KEYS))


def _slot_index(decision: TamiyoDecision) -> int:
    assert decision.command.slot_id is not None
    return CANONICAL_SLOTS.index(decision.command.slot_id)


def _applies(head: str, teacher: torch.Tensor, actions: Mapping[str, torch.Tensor]) -> torch.Tensor:
    """Rows where `head` follows the teacher: it chose on that head and every earlier head took its choice."""
    column = HEAD_KEYS.index(head)
    applies = teacher[:, column] != UNSET
    if head != "op":
        applies &= actions["op"] == teacher[:, 0]
    if head in ("blueprint", "blend"):
        applies &= actions["slot"] == teacher[:, 1]
    return applies


def log_prior(head: str, teacher: torch.Tensor, actions: Mapping[str, torch.Tensor], mask: torch.Tensor,
              epsilon: float) -> torch.Tensor:
    """log π_T over `head`'s actions [B, n], up to a per-row constant: log((1 − ε) + ε/n) on the teacher's choice and
    log(ε/n) on the other legal actions (n legal actions; with ε = 0 the most negative finite fill), 0 on rows where
    the head does not follow the teacher (uniform). `actions` must hold the heads sampled before `head`."""
    column = HEAD_KEYS.index(head)
    target = teacher[:, column].clamp(min=0)
    legal = mask.to(torch.bool)
    chosen = torch.nn.functional.one_hot(target, legal.shape[-1]).to(torch.bool) & legal
    applies = _applies(head, teacher, actions) & chosen.any(dim=-1)
    n = legal.sum(dim=-1, keepdim=True).clamp(min=1).to(torch.float32)
    on_choice = torch.log((1.0 - epsilon) + epsilon / n)
    off_choice = torch.log(epsilon / n) if epsilon > 0 else torch.full_like(n, MASK_VALUE)
    prior = torch.where(chosen, on_choice, off_choice)
    return torch.where(applies.unsqueeze(-1), prior, torch.zeros_like(prior))


def kl_to_prior(logits: torch.Tensor, prior: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """KL(π ‖ π_T) per row for π = softmax(prior + logits) and π_T = softmax(prior) over the legal actions.

    Written as Σ π·f − (LSE(prior + f) − LSE(prior)), which stays finite where π_T is 0 (ε = 0): there π is 0 too."""
    legal = mask.to(torch.bool)
    fill = max(torch.finfo(logits.dtype).min, MASK_VALUE)
    joint = (prior + logits).masked_fill(~legal, fill)
    probs = torch.softmax(joint, dim=-1)
    expected = (probs * logits.masked_fill(~legal, 0.0)).sum(dim=-1)
    return expected - (torch.logsumexp(joint, dim=-1) - torch.logsumexp(prior.masked_fill(~legal, fill), dim=-1))
