"""Running masked PPO for real: a results folder, a progress bar, checkpoints, resume, evaluation.

    result = train(PPOConfig(env_id="Vault-v0"), run_dir="runs/vault")
    config, runner = load_checkpoint("runs/vault")

The training itself stays the one jitted program of ``labcore.agents.ppo.core``; ``make_program``
describes it to the shared driver, ``labcore.loop.train``, which cuts it into chunks of
``checkpoint_every`` updates (each chunk one compiled ``ppo.run``) and writes a checkpoint between
chunks. Chunking does not change the result: the runner state carries everything, so 3 + 3
updates equal 6 (tests/test_ppo.py checks it).

A run directory (``labcore.runs.RunDir``) holds:

    config.json         every PPOConfig field
    metrics.jsonl/.csv  one row every ``log_every`` updates, keyed by "update" (labcore.logging)
    events.out.tfevents.*  the same rows for TensorBoard, at their update (unless tensorboard=False)
    metrics.png         return, entropy, invalid-action rate and losses against timesteps
    checkpoints/        orbax checkpoints of the runner state, one per chunk, by update; the last is the final one
    summary.json        compile and run time, steps/s, final training return, greedy / sampled / random returns
"""

from __future__ import annotations

import os
from typing import Any

import jax
import numpy as np

from labcore import evaluation, loop
from labcore.agents.ppo import core as ppo
from labcore.agents.ppo.config import NAME as ALGORITHM  # the registry name its checkpoints record
from labcore.agents.ppo.core import make_train  # noqa: F401 (the contract's: the pure trainer this driver runs)

PLOTTED = ("episode_return", "entropy", "invalid_action_rate", "value_loss")


def make_program(config: ppo.PPOConfig, callback=None, log_every: int = 1) -> loop.Program:
    """PPO as a ``labcore.loop.Program``; logged rows also pass an ``EntropyWatch`` (a warning if the
    policy's entropy collapses early). Its evaluation plays ``config.eval_episodes`` greedy, sampled
    and random episodes."""
    if callback is not None:
        callback = ppo.EntropyWatch(config, then=callback)
    agent = ppo.make_ppo(config, callback=callback, log_every=log_every)
    masked = "masked" if config.mask_actions else "unmasked"
    return loop.Program(
        config=config,
        init=agent.init,
        run=agent.run,
        updates_done=lambda runner: int(runner.update_step),
        num_updates=config.num_updates,
        steps_per_update=config.num_envs * config.num_steps,
        name=f"PPO on {config.env_id} ({masked})",
        plotted=PLOTTED,
        shown={"ret": "episode_return", "ent": "entropy"},
        evaluate=lambda runner, seed: _evaluate(agent, runner.params, seed + 1),
        summarize=lambda rows: {"max_invalid_action_rate": max((row["invalid_action_rate"] for row in rows), default=None)},
        algorithm=ALGORITHM,
    )


# train(config, run_dir=None, **options): labcore.loop.train's options, every count in updates;
# writes the folder described above; the result's ``state`` is the final ``RunnerState``.
train = loop.trainer(make_program, "PPO")


def play_returns(agent: ppo.PPO, params: Any, num_episodes: int, seed: int = 0) -> dict[str, np.ndarray]:
    """Returns [num_episodes] of greedy, sampled and random-legal play on the same layouts."""
    key = jax.random.key(seed)
    play = jax.jit(lambda params, greedy: ppo.policy_returns(agent, params, key, num_episodes, greedy), static_argnums=1)
    random_play = jax.jit(lambda k: evaluation.random_returns(agent.env, agent.env_params, k, num_episodes))(key)
    return {"greedy": np.asarray(play(params, True)), "sampled": np.asarray(play(params, False)),
            "random": np.asarray(random_play)}


def evaluate(config: ppo.PPOConfig, params: Any, seed: int = 0) -> dict[str, Any]:
    """Mean and spread of greedy, sampled and random-legal play on the same ``config.eval_episodes`` layouts."""
    return _evaluate(ppo.make_ppo(config), params, seed)


def _evaluate(agent: ppo.PPO, params: Any, seed: int) -> dict[str, Any]:
    num_episodes = agent.config.eval_episodes
    returns = play_returns(agent, params, num_episodes, seed)
    return {
        "eval_episodes": num_episodes,
        "greedy_return_mean": float(returns["greedy"].mean()),
        "greedy_return_std": float(returns["greedy"].std()),
        "sampled_return_mean": float(returns["sampled"].mean()),
        "sampled_return_std": float(returns["sampled"].std()),
        "random_return_mean": float(returns["random"].mean()),
    }


def params(runner: ppo.RunnerState) -> Any:
    """The policy's parameters in a state of ``train`` or ``load_checkpoint``."""
    return runner.params


def load_checkpoint(path: str | os.PathLike, step: int | None = None) -> tuple[ppo.PPOConfig, ppo.RunnerState]:
    """(config, runner) from a run directory or its checkpoints/ folder (default: newest step)."""
    return loop.load_checkpoint(path, ppo.PPOConfig, make_program, step, algorithm=ALGORITHM)
