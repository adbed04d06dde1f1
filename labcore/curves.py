"""Learning curves against env steps and wall time for the jitted value-based trainers, side by side.

    pqn_run = curves.pqn_curve(PQNConfig.minatar("Breakout-MinAtar", total_steps=1_000_000), seeds=3)
    dqn_run = curves.dqn_scan_curve(DQNConfig.minatar("Breakout-MinAtar", total_steps=100_000), seeds=3)
    pqn_run.env_steps, pqn_run.wall_s, pqn_run.mean_return        # one point per chunk
    pqn_run.time_to(9.2)                                           # (env steps, seconds) or (None, None)

Each run trains ``seeds`` seeds at once (``jax.vmap`` over keys) in ``chunks`` compiled calls
(the chunk compiled once, its compile time kept apart), so every chunk's end is a point of the
curve against env steps and against wall time. A point is the mean return of the training
episodes (epsilon-greedy) that ended within the chunk, per seed, then averaged over seeds. DQN's
replay warm-up (its first ``learning_starts`` steps, without updates) counts in its wall time.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import Any

import jax
import numpy as np

from labcore.agents.dqn import core as dqn
from labcore.agents.dqn import scan as dqn_scan
from labcore.agents.pqn import core as pqn


@dataclasses.dataclass
class Curve:
    """One algorithm's run over several seeds, a point per chunk."""

    name: str
    env_steps: list[int]  # per seed, at each chunk's end
    wall_s: list[float]  # seconds of running (all seeds at once) by each chunk's end, compiles excluded
    returns: list[list[float]]  # [chunks][seeds] mean return of the episodes that ended in the chunk (NaN: none)
    compile_s: float
    greedy_return: float = float("nan")  # mean over seeds of the final parameters' greedy episodes
    seeds: int = 1

    @property
    def mean_return(self) -> list[float]:
        return [float(np.nanmean(row)) if np.any(np.isfinite(row)) else float("nan") for row in self.returns]

    def time_to(self, score: float) -> tuple[int | None, float | None]:
        """(env steps, seconds) at the first chunk end whose seed-mean return is >= score."""
        for steps, wall, value in zip(self.env_steps, self.wall_s, self.mean_return):
            if value >= score:
                return steps, wall
        return None, None

    def as_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "mean_return": self.mean_return}


def _timed(fn: Callable, *args) -> tuple[Any, float]:
    started = time.perf_counter()
    out = jax.block_until_ready(fn(*args))
    return out, time.perf_counter() - started


def _compiled(fn: Callable, example: Any) -> tuple[Callable, float]:
    started = time.perf_counter()
    compiled = jax.jit(fn).lower(example).compile()
    return compiled, time.perf_counter() - started


def _per_seed_means(episodes: np.ndarray, sums: np.ndarray) -> list[float]:
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(episodes > 0, sums / np.maximum(episodes, 1), np.nan).tolist()


def pqn_curve(
    config: pqn.PQNConfig, seeds: int = 3, chunks: int = 10, seed: int = 0, name: str = "PQN", stop_at: float | None = None
) -> Curve:
    """PQN (``labcore.agents.pqn.core``) for ``config.total_steps`` env steps per seed; with
    ``stop_at``, only until the first chunk whose seed-mean return reaches it."""
    agent = pqn.make_pqn(config)
    per_chunk = max(1, config.num_updates // chunks)
    keys = jax.random.split(jax.random.key(seed), seeds)
    runners = jax.block_until_ready(jax.jit(jax.vmap(agent.init))(keys))
    advance, compile_s = _compiled(jax.vmap(lambda runner: agent.run(runner, per_chunk)), runners)
    curve = Curve(name, [], [], [], compile_s, seeds=seeds)
    wall = 0.0
    for _ in range(config.num_updates // per_chunk):
        (runners, metrics), seconds = _timed(advance, runners)
        wall += seconds
        episodes = np.asarray(metrics["episodes"], np.float64)  # [seeds, updates]
        sums = (episodes * np.nan_to_num(np.asarray(metrics["episode_return"], np.float64))).sum(1)
        curve.returns.append(_per_seed_means(episodes.sum(1), sums))
        curve.env_steps.append(int(np.asarray(runners.update_step)[0]) * config.batch_size)
        curve.wall_s.append(wall)
        if stop_at is not None and curve.mean_return[-1] >= stop_at:
            break
    greedy = jax.jit(jax.vmap(agent.evaluate))(runners.params, jax.random.split(jax.random.key(seed + 1), seeds))
    curve.greedy_return = float(np.mean(greedy))
    return curve


def dqn_scan_curve(
    config: dqn.DQNConfig, seeds: int = 3, chunks: int = 10, seed: int = 0, name: str = "DQN (scan)",
    stop_at: float | None = None,
) -> Curve:
    """The jitted DQN (``labcore.agents.dqn.scan``) for ``config.total_steps`` agent steps per seed;
    with ``stop_at``, only until the first chunk whose seed-mean return reaches it."""
    parts = dqn_scan.make_parts(config)
    per_chunk = max(1, parts.learn_iterations // chunks)
    keys = jax.random.split(jax.random.key(seed), seeds)
    carries = jax.jit(jax.vmap(lambda key: parts.init(*jax.random.split(key, 3))))(keys)
    warm_up, warm_compile_s = _compiled(jax.vmap(lambda c: parts.iterate(c, parts.warmup_iterations, False)), carries)
    (carries, _), wall = _timed(warm_up, carries)  # filling the replay before the first update
    advance, compile_s = _compiled(jax.vmap(lambda c: parts.iterate(c, per_chunk, True)), carries)
    curve = Curve(name, [], [], [], warm_compile_s + compile_s, seeds=seeds)
    for _ in range(parts.learn_iterations // per_chunk):
        (carries, metrics), seconds = _timed(advance, carries)
        wall += seconds
        episodes = np.asarray(metrics["episodes"], np.float64).sum(1)
        sums = np.asarray(metrics["episode_return_sum"], np.float64).sum(1)
        curve.returns.append(_per_seed_means(episodes, sums))
        curve.env_steps.append(int(np.asarray(metrics["step"])[0, -1]))
        curve.wall_s.append(wall)
        if stop_at is not None and curve.mean_return[-1] >= stop_at:
            break
    greedy_keys = jax.random.split(jax.random.key(seed + 1), seeds)
    curve.greedy_return = float(np.mean(jax.jit(jax.vmap(parts.evaluate))(carries.train_state.params, greedy_keys)))
    return curve
