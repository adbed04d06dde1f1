"""Running masked PPO for real: a results folder, a progress bar, checkpoints, resume, evaluation.

    result = train(PPOConfig(env_id="Vault-v0"), run_dir="runs/vault")
    config, runner = load_checkpoint("runs/vault")

The training itself stays the one jitted program of ``labcore.agents.ppo.core``; this module only
cuts it into chunks of ``checkpoint_every`` updates (each chunk one compiled ``ppo.run``), so a
checkpoint can be written between chunks. Chunking does not change the result: the runner
state carries everything, so 3 + 3 updates equal 6 (tests/test_ppo.py checks it).

A run directory (``labcore.runs.RunDir``) holds:

    config.json         every PPOConfig field
    metrics.jsonl/.csv  one row every ``log_every`` updates, keyed by "update" (labcore.logging)
    events.out.tfevents.*  the same rows for TensorBoard, at their update (unless tensorboard=False)
    metrics.png         return, entropy, invalid-action rate and losses against timesteps
    checkpoints/        orbax checkpoints of the runner state, one per chunk, by update; the last is the final one
    summary.json        compile and run time, steps/s, final training return, greedy / sampled / random returns
"""

from __future__ import annotations

import dataclasses
import os
import time
from pathlib import Path
from typing import Any, NamedTuple

import jax
import numpy as np

from labcore import checkpoint, evaluation, runs
from labcore.agents.ppo import core as ppo

PLOTTED = ("episode_return", "entropy", "invalid_action_rate", "value_loss")


class PPORunResult(NamedTuple):
    config: ppo.PPOConfig
    runner: ppo.RunnerState
    metrics: list[dict[str, Any]]  # the logged rows
    summary: dict[str, Any]


def train(
    config: ppo.PPOConfig,
    run_dir: str | os.PathLike | None = None,
    log_every: int = 10,
    checkpoint_every: int | None = None,
    resume: bool = False,
    progress: bool = True,
    eval_episodes: int = 64,  # 0: no evaluation at the end
    overwrite: bool = False,
    tensorboard: bool = True,
) -> PPORunResult:
    """Train ``config`` end to end; with ``run_dir``, write the folder described above.

    checkpoint_every: updates per chunk (default: the whole run in one chunk, checkpointed at
    the end). resume: continue from the newest checkpoint in run_dir/checkpoints, which must
    have been written with the same config; the metrics rows past it are dropped, and logged
    again. A run_dir holding an earlier run is refused unless resume or overwrite (which deletes
    that run's files, and only those) is set (``labcore.runs.RunDir``). tensorboard: also write
    the metrics as TensorBoard event files in run_dir.
    """
    if checkpoint_every is not None and checkpoint_every < 1:
        raise ValueError(f"checkpoint_every must be >= 1 update, got {checkpoint_every}")
    batch = config.num_envs * config.num_steps
    watch = ppo.EntropyWatch(config)

    def on_metrics(metrics: dict[str, np.ndarray]) -> None:
        watch(metrics)
        row = run.log({"update": int(metrics["timesteps"]) // batch, **metrics})
        bar.update(row["timesteps"] - bar.n)
        if row["episode_return"] is not None:
            bar.set_postfix(ret=f"{row['episode_return']:.2f}", ent=f"{row['entropy']:.2f}", refresh=False)

    # First, so that a bad env id fails before anything is written or compiled.
    agent = ppo.make_ppo(config, callback=on_metrics, log_every=log_every)
    # Rows are keyed by update, the unit of the checkpoint steps, so a resume cuts them exactly.
    run = runs.RunDir.open(run_dir, config, step_key="update", resume=resume, overwrite=overwrite, tensorboard=tensorboard)
    bar = runs.progress_bar(config.num_updates * batch, desc=config.env_id, unit="step", unit_scale=True,
                            enabled=progress)
    key = jax.random.key(config.seed)
    runner = agent.init(key)
    if resume:
        runner, _ = checkpoint.restore(run.checkpoints, like=runner, step=run.resume_step)
        bar.update(int(runner.update_step) * batch)

    run_chunk = jax.jit(agent.run, static_argnums=1)
    first_update = int(runner.update_step)
    compile_s = run_s = 0.0
    compiled: dict[int, Any] = {}
    while (done := int(runner.update_step)) < config.num_updates:
        chunk = min(checkpoint_every or config.num_updates, config.num_updates - done)
        if chunk not in compiled:
            started = time.perf_counter()
            compiled[chunk] = run_chunk.lower(runner, chunk).compile()
            compile_s += time.perf_counter() - started
        started = time.perf_counter()
        runner, _ = jax.block_until_ready(compiled[chunk](runner))
        jax.effects_barrier()  # every metrics callback of the chunk has run
        run_s += time.perf_counter() - started
        if run.checkpoints is not None:
            save_checkpoint(run.checkpoints, config, runner)
    bar.close()

    steps_run = (int(runner.update_step) - first_update) * batch
    summary = summarize(agent, runner, run.history(), compile_s, run_s, steps_run, eval_episodes)
    run.finish(summary, lambda rows: plot_run(rows, config))
    return PPORunResult(config, runner, run.rows, summary)


def summarize(
    agent: ppo.PPO, runner: ppo.RunnerState, rows: list[dict], compile_s: float, run_s: float, steps_run: int, eval_episodes: int
) -> dict[str, Any]:
    """The numbers of a finished run. rows: all of the run's rows (a resumed run's earlier ones
    included); steps_run, run_s: this call's share, for a resumed run."""
    config = agent.config
    recent = [row["episode_return"] for row in rows[-max(1, len(rows) // 10) :] if row["episode_return"] is not None]
    summary = {
        "env": config.env_id,
        "timesteps": int(runner.update_step) * config.num_envs * config.num_steps,
        "compile_s": round(compile_s, 2),
        "run_s": round(run_s, 2),
        "steps_per_second": round(steps_run / run_s, 1) if run_s > 0 else None,
        "final_episode_return": float(np.mean(recent)) if recent else None,
        "max_invalid_action_rate": max((row["invalid_action_rate"] for row in rows), default=None),
    }
    if eval_episodes > 0:
        summary.update(evaluate(agent, runner.params, eval_episodes, seed=config.seed + 1))
    return summary


def play_returns(agent: ppo.PPO, params: Any, num_episodes: int, seed: int = 0) -> dict[str, np.ndarray]:
    """Returns [num_episodes] of greedy, sampled and random-legal play on the same layouts."""
    key = jax.random.key(seed)
    play = jax.jit(lambda params, greedy: ppo.policy_returns(agent, params, key, num_episodes, greedy), static_argnums=1)
    random_play = jax.jit(lambda k: evaluation.random_returns(agent.env, agent.env_params, k, num_episodes))(key)
    return {"greedy": np.asarray(play(params, True)), "sampled": np.asarray(play(params, False)),
            "random": np.asarray(random_play)}


def evaluate(agent: ppo.PPO, params: Any, num_episodes: int, seed: int = 0) -> dict[str, Any]:
    """Mean and spread of greedy, sampled and random-legal play on the same ``num_episodes`` layouts."""
    returns = play_returns(agent, params, num_episodes, seed)
    return {
        "eval_episodes": num_episodes,
        "greedy_return_mean": float(returns["greedy"].mean()),
        "greedy_return_std": float(returns["greedy"].std()),
        "sampled_return_mean": float(returns["sampled"].mean()),
        "sampled_return_std": float(returns["sampled"].std()),
        "random_return_mean": float(returns["random"].mean()),
    }


def plot_run(rows: list[dict[str, Any]], config: ppo.PPOConfig):
    from labcore.logging import plot_metrics

    masked = "masked" if config.mask_actions else "unmasked"
    return plot_metrics(rows, PLOTTED, x_key="timesteps", title=f"PPO on {config.env_id} ({masked})")


def save_checkpoint(directory: str | os.PathLike, config: ppo.PPOConfig, runner: ppo.RunnerState) -> Path:
    step = int(runner.update_step)
    metadata = {"config": dataclasses.asdict(config), "update_step": step}
    return checkpoint.save(directory, step, runner, metadata)


def load_checkpoint(path: str | os.PathLike, step: int | None = None) -> tuple[ppo.PPOConfig, ppo.RunnerState]:
    """(config, runner) from a run directory or its checkpoints/ folder (default: newest step)."""
    directory = runs.checkpoint_dir(path)
    metadata = checkpoint.restore_metadata(directory, step)
    config = ppo.PPOConfig(**metadata["config"])
    like = ppo.make_ppo(config).init(jax.random.key(0))
    runner, _ = checkpoint.restore(directory, like=like, step=step)
    return config, runner
