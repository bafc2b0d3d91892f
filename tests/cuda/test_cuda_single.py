"""One-GPU checks. Skip without CUDA.

* The same synthetic episodes (2 envs, same env and data seeds, scripted germinations after epochs 1–3, default
  lifecycle) with amp=False and amp=True (fp16 autocast + one GradScaler per env): no NaN and no governor rollback,
  and G2 passes (TRAINING → BLENDING) occur in both. A forward hook on the host's first conv records, per forward,
  whether grad was enabled, the output dtype and the current CUDA stream: training forwards are fp16 under AMP
  (fp32 without) and always run on the env's own, non-default `torch.cuda.Stream`.
* A quick `train_ppo` run with amp=True on cuda:0 completes with a finite history.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch

from esper.data.tasks import DataCache, DataOptions, get_task_spec
from esper.env import EnvStep, EpochData, run_episodes
from esper.env.env import EnvSpec, MorphoEnv
from esper.env.rewards import make_reward_fn
from esper.leyline import EnvObservation, LifecycleCommand, LifecycleOp, SeedStage
from esper.tamiyo import TamiyoDecision

pytestmark = [pytest.mark.cuda, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

SLOTS = ("early", "mid", "late")
MAX_EPOCHS = 8
ENV_SEEDS = (11, 12)
GERMINATE_AT = {1: ("mid", "conv_light", "linear"), 2: ("late", "norm", "sigmoid"), 3: ("early", "depthwise", "gated")}

Forward = tuple[bool, torch.dtype, int | None]  # grad enabled, output dtype, current stream id (None on CPU)


class ScriptedGerminator:
    """Germinates one seed after each of epochs 1–3 (when the slot is free), then waits; Kasmina advances stages."""

    name = "scripted"

    def decide(self, obs: EnvObservation) -> TamiyoDecision:
        cmd = LifecycleCommand(LifecycleOp.WAIT)
        planned = GERMINATE_AT.get(obs.epoch)
        if planned is not None and planned[0] in obs.validity.valid_slots(LifecycleOp.GERMINATE):
            cmd = LifecycleCommand(LifecycleOp.GERMINATE, *planned)
        return TamiyoDecision.from_command(cmd, space=obs.action_space, reason="script", confidence=1.0)


def run_scripted(device: torch.device, amp: bool) -> dict[str, Any]:
    """Run the scripted episodes: returns the steps, the envs, and every host forward per env."""
    task = get_task_spec("synthetic")
    data = EpochData.build(task, DataCache(DataOptions()), [device], batch_size=128, seed=5,
                           max_train_samples=2048, max_val_samples=512)
    torch.manual_seed(0)
    envs = [MorphoEnv(EnvSpec(task, SLOTS, MAX_EPOCHS, env_seed=s, device=device, env_id=i, amp=amp), "scripted")
            for i, s in enumerate(ENV_SEEDS)]
    forwards: dict[int, list[Forward]] = {env.env_id: [] for env in envs}

    def recorder(env_id: int) -> Any:
        def hook(_module: Any, _inputs: Any, output: torch.Tensor) -> None:
            stream = torch.cuda.current_stream(device).cuda_stream if device.type == "cuda" else None
            forwards[env_id].append((torch.is_grad_enabled(), output.dtype, stream))
        return hook

    handles = [env.model.host.blocks[0][0].register_forward_hook(recorder(env.env_id))  # type: ignore[index]
               for env in envs]
    steps: list[EnvStep] = []
    try:
        run_episodes(envs, [ScriptedGerminator() for _ in envs], data, make_reward_fn("contribution", task, 0.995),
                     on_step=steps.extend)
    finally:
        for handle in handles:
            handle.remove()
    return {"steps": steps, "envs": envs, "forwards": forwards}


def g2_passes(steps: list[EnvStep]) -> list[tuple[int, str, int]]:
    """(env, slot, epoch) of every seed that was TRAINING when a decision was made and BLENDING one epoch later."""
    passes = []
    for s in steps:
        before = {slot: stage for slot, stage, _ in s.record.before.snapshot}
        passes += [(s.env.env_id, slot, s.epoch) for slot, stage, _ in s.record.after.snapshot
                   if before[slot] == SeedStage.TRAINING and stage == SeedStage.BLENDING]
    return passes


def assert_finite_run(run: dict[str, Any]) -> None:
    assert len(run["steps"]) == (MAX_EPOCHS - 1) * len(ENV_SEEDS)  # one transition per decision, none after the end
    for step in run["steps"]:
        assert not step.rollback, f"governor rollback in env {step.env.env_id} at epoch {step.epoch}"
        values = [step.train.train_loss, step.val.val_loss, step.val.val_accuracy, step.record.after.val_loss,
                  step.reward.total()]
        assert all(math.isfinite(v) for v in values), (step.env.env_id, step.epoch, values)
    for env in run["envs"]:
        for name, p in env.model.named_parameters():
            assert p.dtype == torch.float32, name  # AMP keeps fp32 weights
            assert torch.isfinite(p).all(), name


@pytest.fixture(scope="module")
def runs() -> dict[bool, dict[str, Any]]:
    """The same episodes without and with AMP (keyed by amp)."""
    device = torch.device("cuda:0")
    return {amp: run_scripted(device, amp) for amp in (False, True)}


@pytest.mark.parametrize("amp", [False, True])
def test_episodes_are_finite_and_pass_g2(runs: dict[bool, dict[str, Any]], amp: bool) -> None:
    run = runs[amp]
    assert_finite_run(run)
    assert g2_passes(run["steps"]), f"no seed passed G2 with amp={amp}"


def test_g2_passes_occur_in_both_precisions_on_the_same_seeds(runs: dict[bool, dict[str, Any]]) -> None:
    """Same env seeds: every env that blends a seed in fp32 also blends one under AMP, and vice versa."""
    envs_fp32 = {env for env, _, _ in g2_passes(runs[False]["steps"])}
    envs_amp = {env for env, _, _ in g2_passes(runs[True]["steps"])}
    assert envs_fp32 and envs_fp32 == envs_amp


@pytest.mark.parametrize("amp", [False, True])
def test_autocast_dtype_and_one_scaler_per_env(runs: dict[bool, dict[str, Any]], amp: bool) -> None:
    run = runs[amp]
    for env in run["envs"]:
        train = [dtype for grad, dtype, _ in run["forwards"][env.env_id] if grad]
        assert train, "no training forward recorded"
        assert set(train) == {torch.float16 if amp else torch.float32}
        if amp:
            assert isinstance(env.ts.scaler, torch.amp.GradScaler) and math.isfinite(env.ts.scaler.get_scale())
        else:
            assert env.ts.scaler is None
    if amp:
        first, second = run["envs"]
        assert first.ts.scaler is not second.ts.scaler


def test_each_env_trains_on_its_own_cuda_stream(runs: dict[bool, dict[str, Any]]) -> None:
    for run in runs.values():
        device = torch.device("cuda:0")
        default = torch.cuda.default_stream(device).cuda_stream
        own = set()
        for env in run["envs"]:
            stream = env.ts.stream
            assert isinstance(stream, torch.cuda.Stream) and stream.device == device
            assert stream.cuda_stream != default
            own.add(stream.cuda_stream)
            used = {s for grad, _, s in run["forwards"][env.env_id] if grad}
            assert used == {stream.cuda_stream}, "train_step must run inside the env's stream context"
        assert len(own) == len(run["envs"]), "envs share a stream"


def test_quick_ppo_run_with_amp_is_finite(quick_ppo_run: Any) -> None:
    run = quick_ppo_run(["cuda:0"], amp=True)
    history = run.result.history
    assert history and history[0].skipped_update is None
    for row in history:
        for key, value in row.to_dict().items():
            if isinstance(value, float):
                assert math.isfinite(value), key
    assert [b["param_devices"] for b in run.built] == [{"cuda:0"}]
    assert isinstance(run.built[0]["scaler"], torch.amp.GradScaler)
    assert isinstance(run.built[0]["stream"], torch.cuda.Stream)
