"""A model that is not a CNN grows too: a `nn.TransformerEncoder` classifier on a synthetic_text-like task, its slots
on (B, T, D) activations, so the transformer blueprints."""

from __future__ import annotations

import torch

import esper
from esper.api.wrapping import slot_set_of
from unit.api.models import QUICK, TokenClassifier, evaluator, token_data, train_epoch, val_loss

EPOCHS = 8


def test_a_transformer_encoder_classifier_grows_under_the_heuristic() -> None:
    torch.manual_seed(0)
    x, y = token_data(256, seed=1)
    xv, yv = token_data(128, seed=2)
    model = esper.wrap(TokenClassifier(), [r"encoder\.layers\.\d"], example_input=x[:2])
    assert [(s.path, s.topology) for s in esper.slots(model)] == [("encoder.layers.0", "transformer"),
                                                                   ("encoder.layers.1", "transformer")]
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    ctl = esper.Controller(model, optimizer, policy="heuristic", evaluate=evaluator(model, xv, yv),
                           max_epochs=EPOCHS, config=QUICK)
    results, trained = [], {}
    for _ in range(EPOCHS):
        train_epoch(model, optimizer, x, y)
        results.append(ctl.step({"val_accuracy": evaluator(model, xv, yv)(), "val_loss": val_loss(model, xv, yv)}))
        for slot in slot_set_of(model).slots():
            if slot.state is not None:  # each seed's weights as they were when first seen, and now
                trained.setdefault(slot.state.seed_id, [p.detach().clone() for p in slot.seed_parameters()])
                trained[slot.state.seed_id + "/now"] = [p.detach().clone() for p in slot.seed_parameters()]
    germinated = [r.command.blueprint_id for r in results if r.command is not None and r.command.blueprint_id]
    assert germinated and set(germinated) <= {"norm", "mlp", "attention", "lora"}  # the transformer blueprints
    first = next(k for k in trained if not k.endswith("/now"))
    assert any(not torch.equal(a, b) for a, b in zip(trained[first], trained[first + "/now"], strict=True))
    assert any(t.new == "BLENDING" for r in results for t in r.transitions)
    assert any(r.contributions.counterfactual for r in results)
