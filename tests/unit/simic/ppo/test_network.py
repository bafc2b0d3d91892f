"""FactoredActorCritic: shapes, init, dependent sampling and head-aware log-probs/entropies."""

from __future__ import annotations

import math

import pytest
import torch

from esper.data.tasks import get_task_spec
from esper.env.masks import compute_batch_masks
from esper.leyline import ActionValidity, LifecycleOp, MaskSeedInfo, SeedStage
from esper.leyline import compute_action_validity as leyline_validity
from esper.simic.ppo.distributions import InvalidStateMachineError, MaskedCategorical
from esper.simic.ppo.network import FactoredActorCritic, head_relevance

CNN = get_task_spec("synthetic").action_space


def compute_action_validity(states: dict[str, MaskSeedInfo | None], **kwargs: int) -> ActionValidity:
    return leyline_validity(states, space=CNN, **kwargs)

D = 12
HEADS = ("op", "slot", "blueprint", "blend")


def net(hidden: int = 32) -> FactoredActorCritic:
    torch.manual_seed(0)
    return FactoredActorCritic(D, num_blueprints=CNN.num_blueprints, hidden_dim=hidden)


def mixed_batch(n: int) -> tuple[dict[str, torch.Tensor], list]:
    states = [
        {"early": None, "mid": None, "late": None},
        {"early": MaskSeedInfo(SeedStage.PROBATIONARY, 6), "mid": None, "late": MaskSeedInfo(SeedStage.TRAINING, 2)},
        {"mid": MaskSeedInfo(SeedStage.BLENDING, 3)},
        {"early": MaskSeedInfo(SeedStage.FOSSILIZED, 9)},
    ]
    validities = [compute_action_validity(states[i % len(states)], total_seeds=1) for i in range(n)]
    return compute_batch_masks(validities), validities


def test_forward_shapes() -> None:
    logits, values = net()(torch.randn(7, D))
    assert {k: tuple(v.shape) for k, v in logits.items()} == {
        "op": (7, 4), "slot": (7, 3), "blueprint": (7, 5), "blend": (7, 3)
    }
    assert tuple(values.shape) == (7,)


def test_init_gains_and_zero_biases() -> None:
    model = FactoredActorCritic(D, num_blueprints=CNN.num_blueprints, hidden_dim=64)
    for head in model.heads.values():
        out = head[-1]
        assert isinstance(out, torch.nn.Linear)
        assert out.weight.abs().max() < 0.05  # gain 0.01
        assert torch.count_nonzero(out.bias) == 0
    value_out = model.value_head[-1]
    assert isinstance(value_out, torch.nn.Linear)
    # orthogonal rows with gain 1 → unit row norm for the single value output
    assert value_out.weight.norm().item() == pytest.approx(1.0, rel=1e-4)
    first = model.trunk[0]
    assert isinstance(first, torch.nn.Linear)
    gram = first.weight.T @ first.weight  # orthogonal columns (in ≤ out) scaled by √2
    assert torch.allclose(gram, 2.0 * torch.eye(D), atol=1e-4)


def test_op_bias_sets_the_initial_policy_s_log_odds_between_ops() -> None:
    torch.manual_seed(0)
    model = FactoredActorCritic(D, num_blueprints=CNN.num_blueprints, hidden_dim=64, op_bias=(1.0, 0.0, -2.0, 0.0))
    with torch.no_grad():
        probs = torch.softmax(model(torch.randn(256, D))[0]["op"], dim=-1).mean(dim=0)
    # the output weights start near zero (gain 0.01), so the bias alone sets the odds
    assert (probs / probs[1]).tolist() == pytest.approx([math.e, 1.0, math.exp(-2.0), 1.0], rel=0.05)
    for name in ("slot", "blueprint", "blend"):
        assert torch.count_nonzero(model.heads[name][-1].bias) == 0
    with pytest.raises(ValueError, match=r"one value per op \(4\), got 3"):
        FactoredActorCritic(D, num_blueprints=CNN.num_blueprints, hidden_dim=64, op_bias=(0.0, 0.0, -2.0))


def test_invalid_hidden_dim() -> None:
    with pytest.raises(ValueError, match="hidden_dim"):
        FactoredActorCritic(D, num_blueprints=CNN.num_blueprints, hidden_dim=7)


def test_get_action_batch_outputs_and_validity() -> None:
    masks, validities = mixed_batch(64)
    actions, log_probs, values, used = net().get_action_batch(torch.randn(64, D), masks)
    assert set(actions) == set(HEADS) and all(a.dtype == torch.long and a.shape == (64,) for a in actions.values())
    assert log_probs.shape == (64,) and values.shape == (64,)
    assert {k: tuple(v.shape) for k, v in used.items()} == {
        "op": (64, 4), "slot": (64, 3), "blueprint": (64, 5), "blend": (64, 3)
    }
    for i in range(64):
        action = CNN.action(*(int(actions[h][i]) for h in ("slot", "blueprint", "blend", "op")))
        assert validities[i].is_valid(action)
        if action.op != LifecycleOp.GERMINATE:
            assert int(actions["blueprint"][i]) == 0 and int(actions["blend"][i]) == 0
            assert used["blueprint"][i].all() and used["blend"][i].all()
        if action.op == LifecycleOp.WAIT:
            assert int(actions["slot"][i]) == 0 and used["slot"][i].all()


def test_only_wait_valid_always_waits() -> None:
    masks = compute_batch_masks([compute_action_validity({"early": MaskSeedInfo(SeedStage.FOSSILIZED, 3)})] * 16)
    actions, log_probs, _, _ = net().get_action_batch(torch.randn(16, D), masks)
    assert actions["op"].eq(0).all() and actions["slot"].eq(0).all()
    assert torch.allclose(log_probs, torch.zeros(16), atol=1e-6)  # probability 1


def test_all_false_op_mask_raises() -> None:
    masks = {
        "op": torch.zeros(1, 4, dtype=torch.bool),
        "slot": torch.ones(1, 3, dtype=torch.bool),
        "blueprint": torch.ones(1, 5, dtype=torch.bool),
        "blend": torch.ones(1, 3, dtype=torch.bool),
    }
    with pytest.raises(InvalidStateMachineError):
        net().get_action_batch(torch.randn(1, D), masks)


def test_generator_reproducibility_and_deterministic_mode() -> None:
    masks, _ = mixed_batch(32)
    states = torch.randn(32, D)
    model = net()
    a1 = model.get_action_batch(states, masks, generator=torch.Generator().manual_seed(5))[0]
    a2 = model.get_action_batch(states, masks, generator=torch.Generator().manual_seed(5))[0]
    assert all(torch.equal(a1[h], a2[h]) for h in HEADS)
    d1 = model.get_action_batch(states, masks, deterministic=True)[0]
    d2 = model.get_action_batch(states, masks, deterministic=True)[0]
    assert all(torch.equal(d1[h], d2[h]) for h in HEADS)
    logits, _ = model(states)
    op_mode = MaskedCategorical(logits["op"], masks["op"]).mode()
    assert torch.equal(d1["op"], op_mode)


def test_sampled_log_probs_match_evaluate_heads() -> None:
    masks, _ = mixed_batch(48)
    states = torch.randn(48, D)
    model = net()
    actions, log_probs, values, used = model.get_action_batch(states, masks)
    ev = model.evaluate_heads(states, actions, used)
    new_log_probs, new_values, entropy = ev.log_probs, ev.values, ev.entropy
    assert torch.allclose(new_log_probs, log_probs, atol=1e-6)
    assert torch.allclose(new_values, values, atol=1e-6)
    assert entropy.shape == (48,) and new_log_probs.requires_grad


def test_joint_log_prob_and_entropy_count_only_relevant_heads() -> None:
    model = net()
    states = torch.randn(3, D)
    actions = {"op": torch.tensor([0, 1, 2]), "slot": torch.tensor([0, 2, 1]),
               "blueprint": torch.tensor([0, 3, 0]), "blend": torch.tensor([0, 1, 0])}
    used = {
        "op": torch.ones(3, 4, dtype=torch.bool),
        "slot": torch.ones(3, 3, dtype=torch.bool),
        "blueprint": torch.tensor([[False, True, True, True, True]] * 3),
        "blend": torch.ones(3, 3, dtype=torch.bool),
    }
    evaluation = model.evaluate_heads(states, actions, used)
    logits, _ = model(states)
    per_head = {h: MaskedCategorical(logits[h], used[h]) for h in HEADS}
    lp = {h: per_head[h].log_prob(actions[h]) for h in HEADS}
    ent = {h: per_head[h].entropy() for h in HEADS}
    expected_lp = torch.stack([
        lp["op"][0],
        lp["op"][1] + lp["slot"][1] + lp["blueprint"][1] + lp["blend"][1],
        lp["op"][2] + lp["slot"][2],
    ])
    expected_ent = torch.stack([
        ent["op"][0],
        ent["op"][1] + ent["slot"][1] + ent["blueprint"][1] + ent["blend"][1],
        ent["op"][2] + ent["slot"][2],
    ])
    assert torch.allclose(evaluation.log_probs, expected_lp, atol=1e-6)
    assert torch.allclose(evaluation.entropy, expected_ent, atol=1e-6)
    assert all(torch.allclose(evaluation.head_entropies[h], ent[h]) for h in HEADS)


def test_irrelevant_heads_get_no_gradient() -> None:
    model = net()
    states = torch.randn(8, D)
    actions = {h: torch.zeros(8, dtype=torch.long) for h in HEADS}  # all WAIT
    used = {"op": torch.ones(8, 4, dtype=torch.bool), "slot": torch.ones(8, 3, dtype=torch.bool),
            "blueprint": torch.ones(8, 5, dtype=torch.bool), "blend": torch.ones(8, 3, dtype=torch.bool)}
    ev = model.evaluate_heads(states, actions, used)
    log_probs, entropy = ev.log_probs, ev.entropy
    (log_probs.sum() + entropy.sum()).backward()
    for head in ("slot", "blueprint", "blend"):
        assert all(p.grad is None or torch.count_nonzero(p.grad) == 0 for p in model.heads[head].parameters())
    assert any(p.grad is not None and torch.count_nonzero(p.grad) > 0 for p in model.heads["op"].parameters())


def test_head_relevance() -> None:
    rel = head_relevance(torch.tensor([0, 1, 2, 3]))
    assert rel["op"].tolist() == [True] * 4
    assert rel["slot"].tolist() == [False, True, True, True]
    assert rel["blueprint"].tolist() == rel["blend"].tolist() == [False, True, False, False]
