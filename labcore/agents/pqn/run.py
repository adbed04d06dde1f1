"""Running PQN for real: a results folder, a progress bar, checkpoints, resume, evaluation.

    result = train(PQNConfig.minatar("Breakout-MinAtar", total_steps=2_000_000), run_dir="runs/breakout-pqn")
    config, runner = load_checkpoint("runs/breakout-pqn")

Training stays the one jitted program of ``labcore.agents.pqn.core``; this module cuts it into
chunks of ``checkpoint_every`` updates (each chunk one compiled ``pqn.run``) and writes a
checkpoint between chunks. The runner state carries everything (parameters, optimiser, envs, key),
so 2 + 2 updates equal 4 and a resumed run continues exactly (tests/test_pqn.py checks both).

A run directory (``labcore.runs.RunDir``) holds:

    config.json         every PQNConfig field
    metrics.jsonl/.csv  one row every ``log_every`` updates, keyed by "update" (labcore.logging)
    events.out.tfevents.*  the same rows for TensorBoard, at their update (unless tensorboard=False)
    metrics.png         training return, epsilon, TD loss and mean Q against env steps
    checkpoints/        orbax checkpoints of the runner state, by update; the last is the final one
    summary.json        compile and run time, steps/s, final training return, greedy and random returns
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
from labcore.agents.pqn import core as pqn

PLOTTED = ("episode_return", "epsilon", "loss", "q_mean")


class PQNRunResult(NamedTuple):
    config: pqn.PQNConfig
    runner: pqn.RunnerState
    metrics: list[dict[str, Any]]  # the logged rows
    summary: dict[str, Any]


def train(
    config: pqn.PQNConfig,
    run_dir: str | os.PathLike | None = None,
    log_every: int = 10,
    checkpoint_every: int | None = None,
    resume: bool = False,
    progress: bool = True,
    overwrite: bool = False,
    tensorboard: bool = True,
    evaluate: bool = True,
) -> PQNRunResult:
    """Train ``config`` end to end; with ``run_dir``, write the folder described above.

    checkpoint_every: updates per chunk (default: the whole run in one chunk, checkpointed at the
    end). resume: continue from the newest checkpoint in run_dir/checkpoints, written with the same
    config; metrics rows past it are dropped and logged again. A run_dir holding an earlier run is
    refused unless resume or overwrite is set (``labcore.runs.RunDir``). evaluate: play
    ``config.eval_episodes`` episodes at ``config.eval_epsilon`` and as many at random at the end.
    """
    if checkpoint_every is not None and checkpoint_every < 1:
        raise ValueError(f"checkpoint_every must be >= 1 update, got {checkpoint_every}")

    def on_metrics(metrics: dict[str, np.ndarray]) -> None:
        row = run.log({"update": int(metrics["timesteps"]) // config.batch_size, **metrics})
        bar.update(row["timesteps"] - bar.n)
        if row["episode_return"] is not None:
            bar.set_postfix(ret=f"{row['episode_return']:.2f}", eps=f"{row['epsilon']:.2f}", refresh=False)

    agent = pqn.make_pqn(config, callback=on_metrics, log_every=log_every)  # a bad env id fails here, first
    run = runs.RunDir.open(run_dir, config, step_key="update", resume=resume, overwrite=overwrite, tensorboard=tensorboard)
    bar = runs.progress_bar(config.num_updates * config.batch_size, desc=config.env_id, unit="step", unit_scale=True,
                            enabled=progress)
    runner = agent.init(jax.random.key(config.seed))
    if resume:
        runner, _ = checkpoint.restore(run.checkpoints, like=runner, step=run.resume_step)
        bar.update(int(runner.update_step) * config.batch_size)

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

    rows = run.history()
    recent = [row["episode_return"] for row in rows[-max(1, len(rows) // 10) :] if row["episode_return"] is not None]
    steps_run = (int(runner.update_step) - first_update) * config.batch_size
    summary = {
        "env": config.env_id,
        "timesteps": int(runner.update_step) * config.batch_size,
        "compile_s": round(compile_s, 2),
        "run_s": round(run_s, 2),
        "steps_per_second": round(steps_run / run_s, 1) if run_s > 0 else None,
        "final_episode_return": float(np.mean(recent)) if recent else None,
    }
    if evaluate:
        summary.update(evaluate_returns(agent, runner.params, seed=config.seed + 1))
    run.finish(summary, lambda rows: plot_run(rows, config))
    return PQNRunResult(config, runner, run.rows, summary)


def evaluate_returns(agent: pqn.PQN, params: Any, seed: int = 0) -> dict[str, Any]:
    """Mean and spread of ``eval_episodes`` episodes at ``eval_epsilon``, beside random play."""
    key = jax.random.key(seed)
    played = np.asarray(jax.jit(agent.evaluate)(params, key))
    random_play = jax.jit(lambda k: evaluation.random_returns(agent.env, agent.env_params, k, agent.config.eval_episodes))
    return {
        "eval_episodes": agent.config.eval_episodes,
        "eval_epsilon": agent.config.eval_epsilon,
        "eval_return_mean": float(played.mean()),
        "eval_return_std": float(played.std()),
        "random_return_mean": float(np.mean(random_play(key))),
    }


def plot_run(rows: list[dict[str, Any]], config: pqn.PQNConfig):
    from labcore.logging import plot_metrics

    return plot_metrics(rows, PLOTTED, x_key="timesteps", title=f"PQN on {config.env_id}")


def save_checkpoint(directory: str | os.PathLike, config: pqn.PQNConfig, runner: pqn.RunnerState) -> Path:
    step = int(runner.update_step)
    return checkpoint.save(directory, step, runner, {"config": dataclasses.asdict(config), "update_step": step})


def load_checkpoint(path: str | os.PathLike, step: int | None = None) -> tuple[pqn.PQNConfig, pqn.RunnerState]:
    """(config, runner) from a run directory or its checkpoints/ folder (default: newest step)."""
    directory = runs.checkpoint_dir(path)
    metadata = checkpoint.restore_metadata(directory, step)
    fields = metadata["config"]
    config = pqn.PQNConfig(**{**fields, "hidden_sizes": tuple(fields["hidden_sizes"])})
    like = pqn.make_pqn(config).init(jax.random.key(0))
    runner, _ = checkpoint.restore(directory, like=like, step=step)
    return config, runner
