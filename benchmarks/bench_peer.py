"""Peer benchmark: esper's PPO against sb3-contrib's MaskablePPO on the same task (a script, not a test).

    pip install -e '.[sb3]'
    python benchmarks/bench_peer.py [--task synthetic] [--max-epochs 10] [--env-epochs 400] [--eval-seeds 5] \
        [--train-samples 2048] [--val-samples 512] [--n-envs 4] [--seed 42] [--device cpu] [--threads T] [--out DIR]

Both learners train for the same number of env-epochs (episodes × epochs of the envs that decide) on the same task,
slots, episode length, sample caps, batch size and reward (`gap`, with the task's measured parameter cost):
* esper: `train_ppo` with the `quick` preset, overridden by the flags above (its own batch-first loop; envs in groups
  of `group_size` share one host seed and one static twin);
* MaskablePPO on `MorphoGymEnv` (`n_envs` gym envs in a DummyVecEnv, each with its own twin), with the PPO settings
  that mean the same thing in both copied from esper's config: learning rate, γ, GAE λ, clip range, value clip,
  epochs per update, minibatch size, entropy and value coefficients, gradient clip, target KL, episodes per update
  (`n_steps` = T − 1 per env, so every update sees `n_envs` whole episodes, like esper's rollout batch), hidden width.
What differs is each implementation's own: esper samples factored heads (op, slot, blueprint, blend) with dependent
masks and normalizes observations and rewards with running statistics; MaskablePPO samples one 43-way masked
categorical over the joint index from the raw (already scaled) features with separate actor and critic networks.

Evaluation: one `run_comparison` on the same paired held-out seeds (the ones `esper study` uses) for the static host,
each learner's initial policy and each learner's final policy, all deterministic; MaskablePPO enters the harness as
the `maskable:PATH` controller registered below. The table gives final accuracy with its 95 % t-interval, the
paired Δ (95 % paired t-interval, wins/losses/ties) of each final policy against static and against its own init,
and wall time: end-to-end training seconds (including each learner's logging and checkpoints) per 1,000 env-epochs,
and per 1,000 trained model-epochs (static twins included), with the ratio MaskablePPO / esper. (Stable-baselines3's
vectorized env resets each env once more after its last episode: `n_envs` extra first epochs, about 1 % of the
default budget, sit in MaskablePPO's time but not in its env-epoch count.)
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from rich.console import Console
from rich.table import Table

try:
    from sb3_contrib import MaskablePPO
    from stable_baselines3.common.vec_env import DummyVecEnv
except ImportError:
    sys.exit("bench_peer.py needs the optional [sb3] extra: pip install -e '.[sb3]'")

from esper.data.tasks import DataCache, DataOptions
from esper.env.features import observation_features
from esper.env.gym import GymEnvConfig, MorphoGymEnv
from esper.evaluation.episodes import one_test_sample
from esper.evaluation.results import ComparisonResult
from esper.evaluation.study import evaluation_plan, run_evaluation
from esper.leyline import EnvObservation
from esper.simic.ppo.config import TrainingConfig
from esper.simic.ppo.train import PPORun, train_ppo
from esper.storage.rundir import RunDirectory, write_json_atomic
from esper.tamiyo import ControllerContext, TamiyoDecision, register_controller

ESPER, PEER = "esper ppo", "maskable ppo"


class MaskableController:
    """A trained MaskablePPO policy as an esper controller: the deterministic action on the env's features and mask."""

    name = "maskable"

    def __init__(self, model: MaskablePPO) -> None:
        self.model = model

    def reset(self, seed: int) -> None:
        """Nothing per episode: the policy is feed-forward."""

    def decide(self, obs: EnvObservation) -> TamiyoDecision:
        features = np.asarray(observation_features(obs), dtype=np.float32)
        mask = np.asarray(obs.validity.joint_mask(), dtype=bool)
        action, _ = self.model.predict(features, action_masks=mask, deterministic=True)
        factored = obs.action_space.from_joint_index(int(action))
        return TamiyoDecision(factored.to_command(obs.action_space), factored, reason="maskable ppo", confidence=1.0)


@register_controller("maskable", argument="PATH", summary="an sb3-contrib MaskablePPO policy (benchmarks only)")
def _maskable(argument: str | None, context: ControllerContext) -> MaskableController:
    assert argument is not None
    return MaskableController(MaskablePPO.load(argument, device="cpu"))


@dataclass(frozen=True)
class Training:
    """One learner's training run: the policies before and after, and what it cost."""

    init: Path
    final: Path
    seconds: float
    env_epochs: int
    model_epochs: int  # env-epochs plus the static twins' epochs


def esper_config(args: argparse.Namespace) -> TrainingConfig:
    episodes = args.env_epochs // args.max_epochs
    return TrainingConfig.preset("quick").with_overrides(
        task=args.task, max_epochs=args.max_epochs, max_train_samples=args.train_samples,
        max_val_samples=args.val_samples, n_episodes=episodes, n_envs=args.n_envs, group_size=args.group_size,
        seed=args.seed, device=args.device, devices=None)


def train_esper(config: TrainingConfig, out: Path, cache: DataCache) -> Training:
    run_dir = RunDirectory(out / "esper_ppo")
    try:
        started = time.perf_counter()
        result = train_ppo(config, PPORun(run_dir, data=cache))
        seconds = time.perf_counter() - started
    finally:
        run_dir.close()
    env_epochs = result.episodes_completed * config.episode.max_epochs
    twins = result.episodes_completed // config.ppo.group_size * config.episode.max_epochs
    checkpoints = run_dir.path / "checkpoints"
    return Training(checkpoints / "init.pt", checkpoints / "final.pt", seconds, env_epochs, env_epochs + twins)


def train_maskable(config: TrainingConfig, out: Path) -> Training:
    """MaskablePPO with esper's PPO settings where they mean the same thing (see the module docstring)."""
    gym_config = GymEnvConfig.from_dict({**config.episode.to_dict(), "device": config.execution.device,
                                         "param_cost": config.reward.param_cost})
    ppo = config.ppo
    folder = out / "maskable_ppo"
    folder.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    envs = DummyVecEnv([lambda: MorphoGymEnv(gym_config) for _ in range(config.ppo.n_envs)])
    model = MaskablePPO(
        "MlpPolicy", envs, learning_rate=ppo.lr, n_steps=config.episode.max_epochs - 1, batch_size=ppo.minibatch_size,
        n_epochs=ppo.n_epochs, gamma=config.reward.gamma, gae_lambda=ppo.gae_lambda, clip_range=ppo.clip_ratio,
        clip_range_vf=ppo.value_clip, ent_coef=ppo.entropy_coef, vf_coef=ppo.value_coef,
        max_grad_norm=ppo.max_grad_norm, target_kl=ppo.target_kl, seed=config.seed, device="cpu",
        policy_kwargs={"net_arch": [ppo.hidden_dim, ppo.hidden_dim], "activation_fn": torch.nn.ReLU})
    model.save(folder / "init.zip")
    model.learn(total_timesteps=config.ppo.n_episodes * (config.episode.max_epochs - 1))
    model.save(folder / "final.zip")
    seconds = time.perf_counter() - started
    envs.close()
    env_epochs = model.num_timesteps // (config.episode.max_epochs - 1) * config.episode.max_epochs
    return Training(folder / "init.zip", folder / "final.zip", seconds, env_epochs, 2 * env_epochs)


def evaluate(config: TrainingConfig, runs: dict[str, Training], seeds: int, out: Path, cache: DataCache
             ) -> ComparisonResult:
    specs, labels = ["static"], ["static"]
    for learner, prefix in ((ESPER, "ppo"), (PEER, "maskable")):
        specs += [f"{prefix}:{runs[learner].init}", f"{prefix}:{runs[learner].final}"]
        labels += [f"{learner} (init)", f"{learner} (final)"]
    plan = evaluation_plan(config)
    run_dir = RunDirectory(out / "eval")
    try:  # ties as `esper study` counts them: differences below one test sample's worth of accuracy
        return run_evaluation(plan, specs, labels, seeds, cache, run_dir=run_dir,
                              tie_threshold=one_test_sample(plan, cache))
    finally:
        run_dir.close()


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    cores = os.cpu_count()
    text = f"CPU {cpu} ({cores} logical cores), torch {torch.__version__}, {torch.get_num_threads()} threads"
    if torch.cuda.is_available():
        text += f", GPU {torch.cuda.get_device_name(0)}"
    return text


def delta(pair: dict[str, Any]) -> str:
    low, high = pair["ci95"]
    return f"{pair['mean_delta']:+.2f} [{low:+.2f}, {high:+.2f}] {pair['wins']}/{pair['losses']}/{pair['ties']}"


def report(result: ComparisonResult, runs: dict[str, Training], config: TrainingConfig, args: argparse.Namespace,
           load: float) -> None:
    console = Console(width=max(Console().width, 230))
    episode = config.episode
    table = Table(title=(
        f"bench_peer — {episode.task}, {episode.max_epochs}-epoch episodes, {episode.max_train_samples} train / "
        f"{episode.max_val_samples} val samples, {args.env_epochs} training env-epochs per learner, "
        f"{args.eval_seeds} paired held-out seeds\n{machine()}, device {config.execution.device}, load avg {load:.2f}"))
    for col in ("learner", "final acc % [95 % CI]", "Δ final vs static", "Δ final vs own init", "Δ init vs static",
                "train s", "env-epochs", "s / 1k env-epochs", "model-epochs", "s / 1k model-epochs"):
        table.add_column(col, justify="left" if col == "learner" else "right")
    pairs = result.pairwise
    for learner in (ESPER, PEER):
        init, final, run = f"{learner} (init)", f"{learner} (final)", runs[learner]
        acc = result.per_controller[final]["final_accuracy"]
        table.add_row(learner, f"{acc['mean']:.2f} [{acc['ci95'][0]:.2f}, {acc['ci95'][1]:.2f}]",
                      delta(pairs[final]["static"]), delta(pairs[final][init]), delta(pairs[init]["static"]),
                      f"{run.seconds:.0f}", str(run.env_epochs), f"{1000 * run.seconds / run.env_epochs:.0f}",
                      str(run.model_epochs), f"{1000 * run.seconds / run.model_epochs:.0f}")
    static = result.per_controller["static"]["final_accuracy"]
    console.print(table)
    ratio = (runs[PEER].seconds / runs[PEER].env_epochs) / (runs[ESPER].seconds / runs[ESPER].env_epochs)
    console.print(f"static: {static['mean']:.2f} % [{static['ci95'][0]:.2f}, {static['ci95'][1]:.2f}]; "
                  f"{ESPER} (final) − {PEER} (final): {delta(pairs[f'{ESPER} (final)'][f'{PEER} (final)'])} pp; "
                  f"wall time per env-epoch, {PEER} / {ESPER}: {ratio:.2f}×")
    console.print("Δ: mean paired difference in final validation accuracy (pp), 95 % paired t-interval, "
                  f"wins/losses/ties (|Δ| < {result.tie_threshold:.3g} pp is a tie).")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--task", default="synthetic")
    parser.add_argument("--max-epochs", type=int, default=10, help="epochs per episode (T); T − 1 decisions")
    parser.add_argument("--env-epochs", type=int, default=400, help="training env-epochs per learner")
    parser.add_argument("--eval-seeds", type=int, default=5, help="paired held-out evaluation seeds")
    parser.add_argument("--train-samples", type=int, default=2048)
    parser.add_argument("--val-samples", type=int, default=512)
    parser.add_argument("--n-envs", type=int, default=4, help="episodes per PPO update (both learners)")
    parser.add_argument("--group-size", type=int, default=4, help="esper envs sharing one static twin")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--device", default="cpu", help="cpu or cuda:N: the envs of both learners and esper's policy "
                        "(MaskablePPO's MLP policy stays on the CPU, as stable-baselines3 advises)")
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's)")
    parser.add_argument("--out", type=Path, default=None, help="keep runs and results here (default: a temp dir)")
    args = parser.parse_args()
    episodes, rest = divmod(args.env_epochs, args.max_epochs)
    if rest or episodes % args.n_envs or args.n_envs % args.group_size:
        parser.error(f"--env-epochs must be a multiple of --max-epochs × --n-envs ({args.max_epochs * args.n_envs}), "
                     f"and --n-envs a multiple of --group-size")
    if args.eval_seeds < 2:
        parser.error("--eval-seeds must be >= 2 (a paired interval needs several seeds)")
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    config = esper_config(args)

    with tempfile.TemporaryDirectory(prefix="bench_peer_") as tmp:
        out = args.out if args.out is not None else Path(tmp)
        load = os.getloadavg()[0]
        cache = DataCache(DataOptions())
        runs = {ESPER: train_esper(config, out, cache), PEER: train_maskable(config, out)}
        result = evaluate(config, runs, args.eval_seeds, out, cache)
        load = max(load, os.getloadavg()[0])
        write_json_atomic(out / "bench_peer.json", {
            "argv": sys.argv, "machine": machine(), "config": config.to_dict(), "comparison": result.to_dict(),
            "training": {k: {"seconds": r.seconds, "env_epochs": r.env_epochs, "model_epochs": r.model_epochs}
                         for k, r in runs.items()}})
        report(result, runs, config, args, load)
        if args.out is not None:
            Console().print(f"runs and bench_peer.json in {out}")


if __name__ == "__main__":
    main()
