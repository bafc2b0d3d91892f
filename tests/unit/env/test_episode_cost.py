"""Every episode records what it cost: the FLOPs of the env's own passes (an exact, reproducible int; a live
twin's are its own) and its wall-clock seconds."""

from __future__ import annotations

import torch

from esper.data.tasks import DataCache, DataOptions, get_task_spec
from esper.env import EnvSpec, EpochData, MorphoEnv, run_episodes
from esper.env.logs import EpisodeResult
from esper.env.rewards import make_reward_fn
from esper.leyline import EnvObservation, LifecycleCommand, LifecycleOp
from esper.tamiyo import TamiyoDecision

TASK = get_task_spec("synthetic")
MAX_EPOCHS = 3


class GerminateOnce:
    """Germinate into `mid` after epoch 1 when `grow`, else always wait."""

    name = "germinate_once"

    def __init__(self, grow: bool) -> None:
        self.grow = grow

    def decide(self, obs: EnvObservation) -> TamiyoDecision:
        cmd = LifecycleCommand(LifecycleOp.WAIT)
        if self.grow and obs.epoch == 1:
            cmd = LifecycleCommand(LifecycleOp.GERMINATE, "mid", "conv_light", "linear")
        return TamiyoDecision.from_command(cmd, space=obs.action_space, reason="script", confidence=1.0)


def _env(twin: MorphoEnv | None = None) -> MorphoEnv:
    spec = EnvSpec(TASK, ("early", "mid", "late"), MAX_EPOCHS, env_seed=3, device=torch.device("cpu"))
    return MorphoEnv(spec, GerminateOnce.name, twin=twin)


def _run(envs: list[MorphoEnv], grow: bool) -> list[EpisodeResult]:
    data = EpochData.build(TASK, DataCache(DataOptions()), [torch.device("cpu")], batch_size=64, seed=9,
                           max_train_samples=128, max_val_samples=64)
    return run_episodes(envs, [GerminateOnce(grow)] * len(envs), data, make_reward_fn("contribution", TASK, 0.995))


def test_an_episode_records_its_flops_and_wall_time() -> None:
    [static] = _run([_env()], grow=False)
    [grown] = _run([_env()], grow=True)
    [rerun] = _run([_env()], grow=True)
    assert isinstance(static.train_flops, int) and static.train_flops > 0
    assert grown.train_flops > static.train_flops  # the seed's incubator and probe passes
    assert rerun.train_flops == grown.train_flops
    assert static.wall_seconds > 0 and grown.wall_seconds > 0
    assert static.to_dict()["train_flops"] == static.train_flops


def test_a_live_twins_passes_are_not_the_envs() -> None:
    [alone] = _run([_env()], grow=True)
    twin = _env()
    [shadowed] = _run([_env(twin)], grow=True)
    assert twin.flops.total > 0  # the twin trained in the same loop, on its own meter
    assert shadowed.train_flops == alone.train_flops
