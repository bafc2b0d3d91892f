"""Overhead of Kasmina's segmented forward, TRAINING seeds, and cached-prefix counterfactuals and probes.

Run (a standalone script, not a test):

    .venv/bin/python benchmarks/bench_kasmina.py [--device cpu|cuda] [--repeats N] [--batch-size B] [--threads T] \
        [--val-samples N] [--loop-seconds S]
    .venv/bin/python benchmarks/bench_kasmina.py --repeats 1 --batch-size 8 --val-samples 64 --loop-seconds 0.01
                                                                            # a smoke run in seconds

Host: the synthetic/cifar10 `CNNHost(in_channels=3, num_classes=10, channels=(8, 16, 32))`, 32×32 inputs. A training
step is zero_grad → forward → cross-entropy → backward → SGD(lr 0.01, momentum 0.9) step on one fixed batch.

Ratios are medians over the repeats of the paired per-repeat ratio A_r / B_r. The A/A row (a second copy of the
plain host against the first) shows how small a difference the machine can resolve.

1. `model / host`: MorphogeneticModel with slots early, mid, late and no seeds vs the plain host (target ≤ 1.03);
   `train_step / host`: Tolaria's `train_step` on the unseeded model (adds the always-on host gradient norm and the
   on-device loss/accuracy accumulators) vs the plain host.
2. The incubator: Tolaria's `train_step` with one TRAINING conv_light seed (in `early`, `mid` or `late`, or one in
   each) vs the same `train_step` with no seed. A TRAINING seed leaves the model's forward exactly the host's; it
   learns from a second forward of everything after its slot with its output in place, backpropagated to the seed
   only, so its cost grows with the depth after the slot.
3. Validation of `--val-samples` (default 2,000) samples in batches of 512 (eval, no_grad) with three seeds
   (conv_light/early, attention/mid, depthwise/late), in three configurations: all blended in at α = 1.0 (three
   ablations); early still in TRAINING, mid and late blended (one probe, the most expensive one, plus two ablations);
   all three in TRAINING (three probes). `extra = (t_cf − t_plain) / t_plain`, with t_cf for
   `model.forward_with_counterfactuals(x, ablate, probe)` and t_plain for `model(x)` of the same model, is the cost
   of the counterfactuals and probes in validation passes (target ≤ 1.5); `naive extra` is the same for three extra
   full forwards, each with one seed removed.

Method: after a warm-up, the steps per variant and repeat are calibrated to ~`--loop-seconds` (default 0.25 s) and
split into up to 5 loops that interleave with the other variants' loops (order reversed each time) to cancel drift.
Wall time (`time.perf_counter`; CUDA is synchronized before each read) decides the targets; process CPU time is shown
too (with `--threads 1` on a shared CPU it is much less sensitive to other processes), and so is the 1-minute load
average.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import statistics
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F
from rich.console import Console
from rich.table import Table
from torch import nn

from esper.data.optim import OptimizerSpec
from esper.kasmina.hosts import CNNHost
from esper.kasmina.model import MorphogeneticModel, batch_statistics
from esper.kasmina.state import LifecycleConfig
from esper.leyline import SeedStage
from esper.tolaria import TrainState, train_step

SLOTS = ("early", "mid", "late")
VAL_BATCH = 512
SUB_LOOPS = 5  # per variant and repeat: the calibrated steps split into up to 5 interleaved loops
Step = Callable[[], object]
Times = dict[str, list[tuple[float, float]]]  # variant -> per-repeat (wall, CPU) s


def make_host(device: torch.device) -> CNNHost:
    torch.manual_seed(0)
    return CNNHost(in_channels=3, num_classes=10, channels=(8, 16, 32)).to(device)


def make_model(device: torch.device) -> MorphogeneticModel:
    return MorphogeneticModel(make_host(device), slots=SLOTS, lifecycle=LifecycleConfig())


def plain_step(module: nn.Module, x: torch.Tensor, y: torch.Tensor) -> Step:
    """The reference loop: one SGD over all of `module`'s parameters, nothing else."""
    opt = torch.optim.SGD(module.parameters(), lr=0.01, momentum=0.9)

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        F.cross_entropy(module(x), y).backward()
        opt.step()

    module.train()
    return step


def tolaria_step(model: MorphogeneticModel, x: torch.Tensor, y: torch.Tensor) -> Step:
    spec = OptimizerSpec(name="sgd", lr=0.01, momentum=0.9)
    ts = TrainState(model, spec, spec, "classification", x.device)
    return lambda: train_step(ts, x, y)


def timed(fn: Step, n: int, sync: Callable[[], None]) -> tuple[float, float]:
    """(wall, process CPU) seconds per call of `n` back-to-back calls, the device synchronized before timer reads."""
    sync()
    t0, c0 = time.perf_counter(), time.process_time()
    for _ in range(n):
        fn()
    sync()
    return (time.perf_counter() - t0) / n, (time.process_time() - c0) / n


def bench(variants: dict[str, Step], repeats: int, loop_seconds: float, sync: Callable[[], None]) -> Times:
    """Per-call (wall, CPU) times of each variant per repeat (about `loop_seconds` each); variants interleave in
    short sub-loops."""
    per_call: list[float] = []
    for fn in variants.values():
        timed(fn, 2, sync)  # warm-up (allocator, oneDNN primitive cache), then estimate the per-call time
        per_call.append(timed(fn, 2, sync)[0])
    steps = max(1, math.ceil(loop_seconds / max(per_call)))  # per variant and repeat
    n_sub = min(SUB_LOOPS, steps)
    times: Times = {name: [] for name in variants}
    names = list(variants)
    for r in range(repeats):
        sub: Times = {name: [] for name in names}
        for k in range(n_sub):
            for name in names if (r * n_sub + k) % 2 == 0 else names[::-1]:
                sub[name].append(timed(variants[name], math.ceil(steps / n_sub), sync))
        for name, ts in sub.items():
            times[name].append((statistics.fmean(w for w, _ in ts), statistics.fmean(c for _, c in ts)))
    return times


def ratio(times: Times, a: str, b: str, clock: int = 0) -> float:
    """Median over repeats of the paired ratio a/b (clock 0: wall, 1: process CPU time)."""
    return statistics.median(ta[clock] / tb[clock] for ta, tb in zip(times[a], times[b], strict=True))


CF_CONFIGS = {  # configuration -> slots whose seed stays in TRAINING (the others blend in at alpha 1.0)
    "3 blended": (),
    "2 blended + 1 TRAINING": ("early",),
    "3 TRAINING": SLOTS,
}


def seed_three_slots(model: MorphogeneticModel, training: tuple[str, ...]) -> None:
    """Germinate three seeds and drive `step_epoch` with stubbed measurements until every seed outside `training`
    blends at alpha 1.0; the probe stub keeps the seeds in `training` from passing G2."""
    for slot, blueprint in zip(SLOTS, ("conv_light", "attention", "depthwise"), strict=True):
        model.germinate_seed(blueprint, f"bench-{slot}", slot=slot, baseline_accuracy=50.0, epoch=0)
    model.step_epoch(0)

    def done() -> bool:
        return all(s.state is not None and (s.state.stage == SeedStage.TRAINING if s.slot_id in training
                                            else s.state.stage == SeedStage.BLENDING and s.alpha == 1.0)
                   for s in model.slots())

    epoch = 0
    while not done():
        epoch += 1
        if epoch > 50:
            raise RuntimeError(f"Seeds did not reach their stages: {model.lifecycle_snapshot()}")
        model.record_accuracy(50.0 + epoch)
        for s in model.slots():
            s.update_gradient_ratio(1.0)
            s.set_probe_contribution(-1.0 if s.slot_id in training else 1.0)
        model.step_epoch(epoch)


def naive_forward(model: MorphogeneticModel, x: torch.Tensor, slot: str, how: str) -> torch.Tensor:
    """A full chained forward where `slot` outputs its host activation ("ablate") or its seed's output ("probe"),
    with the host's BatchNorm layers after it on batch statistics, as the cached counterfactuals do."""
    prev, prev_slot = x, None
    with contextlib.ExitStack() as after_slot:
        for s in model.slot_ids:
            h = model.segments.forward_to_segment(s, prev, from_segment=prev_slot)
            if s == slot:
                seed = model.slot(s).seed
                assert seed is not None
                prev = h if how == "ablate" else seed(h)
                after_slot.enter_context(batch_statistics(model.host))
            else:
                prev = model.slot(s)(h)
            prev_slot = s
        return model.segments.forward_from_segment(model.slot_ids[-1], prev)


def validation_pass(model: MorphogeneticModel, batches: list[torch.Tensor], ablate: tuple[str, ...] | None = None,
                    probe: tuple[str, ...] = ()) -> Step:
    """One pass over `batches`: the plain forward when `ablate` is None, else the counterfactual forward."""
    if ablate is None:
        return lambda: [model(b) for b in batches]
    return lambda: [model.forward_with_counterfactuals(b, ablate, probe) for b in batches]


def naive_validation_pass(model: MorphogeneticModel, batches: list[torch.Tensor]) -> Step:
    """One pass of the full forward plus one full forward per slot with its seed removed."""
    return lambda: [(model(b), *(naive_forward(model, b, k, "ablate") for k in SLOTS)) for b in batches]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's)")
    parser.add_argument("--val-samples", type=int, default=2000, help="samples of section 3's validation pass")
    parser.add_argument("--loop-seconds", type=float, default=0.25, help="time per variant and repeat")
    args = parser.parse_args()
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    load_before = os.getloadavg()[0]  # other processes on the machine skew timings: reported with the results
    device = torch.device(args.device)
    sync: Callable[[], None] = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(args.batch_size, 3, 32, 32, generator=gen).to(device)
    y = torch.randint(0, 10, (args.batch_size,), generator=gen).to(device)

    # 1. Host-only overhead: no seeds.
    host, model = make_host(device), make_model(device)
    s1 = bench({
        "plain host": plain_step(host, x, y),
        "plain host, 2nd copy (A/A)": plain_step(make_host(device), x, y),
        "model, 3 empty slots": plain_step(model, x, y),
        "Tolaria train_step, no seeds": tolaria_step(make_model(device), x, y),
    }, args.repeats, args.loop_seconds, sync)

    # 2. The incubator: train_step with TRAINING seeds vs without.
    def incubating(slots: tuple[str, ...]) -> MorphogeneticModel:
        m = make_model(device)
        for slot in slots:
            m.germinate_seed("conv_light", f"bench-{slot}", slot=slot, baseline_accuracy=50.0, epoch=0)
        m.step_epoch(0)
        assert all(m.slot(s).state is not None and m.slot(s).state.stage == SeedStage.TRAINING  # type: ignore[union-attr]
                   for s in slots)
        return m

    s2 = bench({
        "train_step, no seeds": tolaria_step(make_model(device), x, y),
        **{f"train_step, TRAINING seed in {slot}": tolaria_step(incubating((slot,)), x, y) for slot in SLOTS},
        "train_step, TRAINING seeds in all three": tolaria_step(incubating(SLOTS), x, y),
    }, args.repeats, args.loop_seconds, sync)

    # 3. Counterfactuals and probes of three seeded slots vs one plain validation pass of the same model.
    batches = list(torch.randn(args.val_samples, 3, 32, 32, generator=gen).to(device).split(VAL_BATCH))
    variants: dict[str, Step] = {}
    max_diff = 0.0
    for config, training in CF_CONFIGS.items():
        cf = make_model(device)
        seed_three_slots(cf, training)
        cf.eval()
        ablate = tuple(s for s in SLOTS if s not in training)
        with torch.no_grad():
            _, ablated, probed = cf.forward_with_counterfactuals(batches[0], ablate, training)
            for k in SLOTS:
                got = probed[k] if k in training else ablated[k]
                want = naive_forward(cf, batches[0], k, "probe" if k in training else "ablate")
                max_diff = max(max_diff, (got - want).abs().max().item())
        # each variant is one pass over the validation set (outputs are tiny logits)
        variants[f"plain validation pass, {config}"] = validation_pass(cf, batches)
        variants[f"counterfactual pass, {config}"] = validation_pass(cf, batches, ablate, training)
        if not training:
            variants["naive: 1 + 3 full forwards, 3 blended"] = naive_validation_pass(cf, batches)
    with torch.no_grad():
        s3 = bench(variants, args.repeats, args.loop_seconds, sync)

    table = Table(title=f"torch {torch.__version__}, device {device}, threads {torch.get_num_threads()}, "
                        f"batch {args.batch_size}, val {args.val_samples}/{VAL_BATCH}, repeats {args.repeats}, "
                        f"1-min load {load_before:.2f} → {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
    for col in ("section", "variant", "wall median ms", "wall min ms", "wall max ms", "CPU median ms"):
        table.add_column(col, justify="left" if col in ("section", "variant") else "right")
    sections = (("1 train", s1, "step"), ("2 train", s2, "step"), ("3 val", s3, f"{args.val_samples}-sample pass"))
    for section, times, unit in sections:
        for name, ts in times.items():
            ms = [t * 1e3 for t, _ in ts]
            table.add_row(f"{section} ({unit})", name, f"{statistics.median(ms):.3f}", f"{min(ms):.3f}",
                          f"{max(ms):.3f}", f"{statistics.median(c * 1e3 for _, c in ts):.3f}")
        table.add_section()
    console = Console()
    console.print(table)

    h, b2 = "plain host", "train_step, no seeds"
    rows: list[tuple[str, Times, str, str, float, float | None]] = [
        ("A/A noise floor: plain host copy / plain host", s1, "plain host, 2nd copy (A/A)", h, 0.0, None),
        ("model (no seeds) / plain host", s1, "model, 3 empty slots", h, 0.0, 1.03),
        ("Tolaria train_step (no seeds) / plain host", s1, "Tolaria train_step, no seeds", h, 0.0, None),
        *((f"train_step with a TRAINING seed in {slot} / without", s2, f"train_step, TRAINING seed in {slot}", b2,
           0.0, None) for slot in SLOTS),
        ("train_step with three TRAINING seeds / without", s2, "train_step, TRAINING seeds in all three", b2, 0.0,
         None),
        *((f"counterfactual extra (t_cf − t_plain) / t_plain, {c}", s3, f"counterfactual pass, {c}",
           f"plain validation pass, {c}", 1.0, 1.5) for c in CF_CONFIGS),
        ("naive extra (3 more full forwards), 3 blended", s3, "naive: 1 + 3 full forwards, 3 blended",
         "plain validation pass, 3 blended", 1.0, None),
    ]
    summary = Table(title="median paired ratios (× = slowdown; extras in validation passes); status from wall time")
    for col in ("metric", "wall", "process CPU", "target", "status"):
        summary.add_column(col, justify="left" if col == "metric" else "right")
    for name, times, a, b, offset, target in rows:
        wall, cpu = ratio(times, a, b) - offset, ratio(times, a, b, clock=1) - offset
        status = "—" if target is None else ("[green]OK[/]" if wall <= target else "[red]MISSED[/]")
        unit = "×" if offset == 0.0 else ""
        summary.add_row(name, f"{wall:.3f}{unit}", f"{cpu:.3f}{unit}", "—" if target is None else f"≤ {target}", status)
    console.print(summary)
    console.print(f"cached-prefix vs naive ablated and probed logits, max |diff| = {max_diff:.2e}")


if __name__ == "__main__":
    main()
