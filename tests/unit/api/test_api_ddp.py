"""DDP with two gloo processes on CPU: rank 0's measurements and decisions are every rank's, the user rebuilds the
DDP wrapper after a structural change, and every rank holds identical parameters after a germination."""

from __future__ import annotations

import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel

import esper
from unit.api.models import QUICK, SmallCNN, evaluator, image_data, train_epoch, val_loss

WORLD, EPOCHS = 2, 8


def _flat(model: torch.nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().flatten() for p in model.parameters()])


def _same_on_every_rank(model: torch.nn.Module) -> bool:
    mine = _flat(model)
    gathered = [torch.empty_like(mine) for _ in range(WORLD)]
    dist.all_gather(gathered, mine)
    return all(torch.equal(g, gathered[0]) for g in gathered)


def _worker(rank: int, store: str, out: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=WORLD)
    try:
        torch.manual_seed(0)
        x, y = image_data(64, seed=10 + rank)  # each rank trains on its own shard
        xv, yv = image_data(64, seed=2)
        model = esper.wrap(SmallCNN(), ["stem", "layer1"], example_input=x[:2])
        ddp = DistributedDataParallel(model)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
        ctl = esper.Controller(model, optimizer, policy="heuristic", evaluate=evaluator(model, xv, yv),
                               max_epochs=EPOCHS, config=QUICK)
        log = []
        for epoch in range(EPOCHS):
            train_epoch(ddp, optimizer, x, y)
            if rank == 0:
                metrics = {"val_accuracy": evaluator(model, xv, yv)(), "val_loss": val_loss(model, xv, yv)}
            else:  # what another rank measures does not matter: rank 0 decides (alone, these would never grow)
                metrics = {"val_accuracy": 10.0, "val_loss": 5.0 + epoch}
            result = ctl.step(metrics)
            if result.structure_changed:
                ddp = DistributedDataParallel(model)  # a seed's parameters joined or left: DDP must know them
            log.append((result.command.describe() if result.command else None, result.added,
                        _same_on_every_rank(model)))
        torch.save({"log": log, "same": _same_on_every_rank(model), "seeds": [s.blueprint for s in esper.slots(model)]},
                   out.format(rank=rank))
    finally:
        dist.destroy_process_group()


def test_two_ranks_grow_the_same_seeds_and_hold_identical_parameters(tmp_path: Path) -> None:
    out = str(tmp_path / "rank{rank}.pt")
    context = mp.spawn(_worker, args=(str(tmp_path / "store"), out), nprocs=WORLD, join=False)
    deadline = time.monotonic() + 180
    while not context.join(timeout=5):
        if time.monotonic() > deadline:
            for process in context.processes:
                process.kill()
            raise TimeoutError("the DDP workers did not finish within 180 s")
    logs = [torch.load(out.format(rank=r), weights_only=True) for r in range(WORLD)]
    assert logs[0]["log"] == logs[1]["log"] and logs[0]["seeds"] == logs[1]["seeds"]
    germinations = [entry for entry in logs[0]["log"] if entry[1]]
    assert germinations, "rank 0's heuristic must germinate"
    assert all(same for _, _, same in logs[0]["log"]) and logs[0]["same"]
