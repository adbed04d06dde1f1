"""Running PQN for real: a results folder, a progress bar, checkpoints, resume, evaluation.

    result = train(PQNConfig.minatar("Breakout-MinAtar", total_steps=2_000_000), run_dir="runs/breakout-pqn")
    config, runner = load_checkpoint("runs/breakout-pqn")

Training stays the one jitted program of ``labcore.agents.pqn.core``; ``make_program`` describes it
to the shared driver, ``labcore.loop.train``, which cuts it into chunks of ``checkpoint_every``
updates (each chunk one compiled ``pqn.run``) and writes a checkpoint between chunks. The runner
state carries everything (parameters, optimiser, envs, key), so 2 + 2 updates equal 4 and a resumed
run continues exactly (tests/test_pqn.py checks both).

A run directory (``labcore.runs.RunDir``) holds:

    config.json         every PQNConfig field
    metrics.jsonl/.csv  one row every ``log_every`` updates, keyed by "update" (labcore.logging)
    events.out.tfevents.*  the same rows for TensorBoard, at their update (unless tensorboard=False)
    metrics.png         training return, epsilon, TD loss and mean Q against env steps
    checkpoints/        orbax checkpoints of the runner state, by update; the last is the final one
    summary.json        compile and run time, steps/s, final training return, greedy and random returns
"""

from __future__ import annotations

import os
from typing import Any

import jax
import numpy as np

from labcore import evaluation, loop
from labcore.agents.pqn import core as pqn
from labcore.agents.pqn.config import NAME as ALGORITHM  # the registry name its checkpoints record
from labcore.agents.pqn.core import make_train  # noqa: F401 (the contract's: the pure trainer this driver runs)

PLOTTED = ("episode_return", "epsilon", "loss", "q_mean")


def make_program(config: pqn.PQNConfig, callback=None, log_every: int = 1) -> loop.Program:
    """PQN as a ``labcore.loop.Program``; its evaluation plays ``config.eval_episodes`` episodes."""
    agent = pqn.make_pqn(config, callback=callback, log_every=log_every)
    games = getattr(agent.env, "restore", None)  # Atari: emulators outside JAX, rebuilt after a checkpoint is read
    return loop.Program(
        config=config,
        init=agent.init,
        run=agent.run,
        updates_done=lambda runner: int(runner.update_step),
        num_updates=config.num_updates,
        steps_per_update=config.batch_size,
        name=f"PQN on {config.env_id}",
        plotted=PLOTTED,
        shown={"ret": "episode_return", "eps": "epsilon"},
        evaluate=lambda runner, seed: _evaluate(agent, runner.params, seed + 1),
        algorithm=ALGORITHM,
        after_restore=None if games is None else (
            lambda runner: runner.replace(env_state=games(runner.env_state, np.asarray(runner.obs)))),
        summarize=None if games is None else (lambda rows: {"env_stepping": agent.env.stepping}),
        one_seed="" if games is None else "PQN on Atari runs one seed per process (its games live in ALE's C++ vector env)",
    )


# train(config, run_dir=None, **options): labcore.loop.train's options, every count in updates;
# writes the folder described above; the result's ``state`` is the final ``RunnerState``.
train = loop.trainer(make_program, "PQN")


def evaluate(config: pqn.PQNConfig, params: Any, seed: int = 0) -> dict[str, Any]:
    """Mean and spread of ``config.eval_episodes`` episodes at ``config.eval_epsilon``, beside random play."""
    return _evaluate(pqn.make_pqn(config), params, seed)


def _evaluate(agent: pqn.PQN, params: Any, seed: int) -> dict[str, Any]:
    key = jax.random.key(seed)
    if agent.env_params is None:  # Atari: whole games played on the host
        from labcore.envs import ale_vector

        played = agent.evaluate(params, key)
        rng = np.random.default_rng(seed)
        random_play = ale_vector.play_games(
            pqn.atari_settings(agent.config, num_envs=min(agent.config.eval_episodes, 16)),
            lambda obs, step: rng.integers(0, agent.batch.num_actions, len(obs)), agent.config.eval_episodes, seed=seed)
    else:
        played = np.asarray(jax.jit(agent.evaluate)(params, key))
        random_play = jax.jit(lambda k: evaluation.random_returns(agent.env, agent.env_params, k, agent.config.eval_episodes))(key)
    return {
        "eval_episodes": agent.config.eval_episodes,
        "eval_epsilon": agent.config.eval_epsilon,
        "eval_return_mean": float(played.mean()),
        "eval_return_std": float(played.std()),
        "random_return_mean": float(np.mean(random_play)),
    }


def params(runner: pqn.RunnerState) -> Any:
    """The Q-network's parameters in a state of ``train`` or ``load_checkpoint``."""
    return runner.params


def load_checkpoint(path: str | os.PathLike, step: int | None = None) -> tuple[pqn.PQNConfig, pqn.RunnerState]:
    """(config, runner) from a run directory or its checkpoints/ folder (default: newest step)."""
    return loop.load_checkpoint(path, pqn.PQNConfig, make_program, step, algorithm=ALGORITHM)
