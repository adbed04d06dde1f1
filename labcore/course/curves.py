"""Learning curves against env steps and wall time for the jitted value-based trainers, side by side.

    pqn_run = curves.pqn_curve(PQNConfig.minatar("Breakout-MinAtar", total_steps=1_000_000), seeds=3)
    dqn_run = curves.dqn_scan_curve(DQNConfig.minatar("Breakout-MinAtar", total_steps=100_000), seeds=3)
    pqn_run.env_steps, pqn_run.wall_s, pqn_run.mean_return        # one point per chunk
    pqn_run.time_to(9.2)                                           # (env steps, seconds) or (None, None)

Each run trains ``seeds`` seeds at once (``jax.vmap`` over keys) in ``chunks`` compiled calls
(``labcore.loop.chunks``: the chunk compiled once, its compile time kept apart), so every chunk's
end is a point of the curve against env steps and against wall time. A point is the mean return of the training
episodes (epsilon-greedy) that ended within the chunk, per seed, then averaged over seeds. DQN's
replay warm-up (its first ``learning_starts`` steps, without updates) counts in its wall time.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import numpy as np

from labcore import loop
from labcore.agents.dqn import core as dqn
from labcore.agents.dqn import scan as dqn_scan
from labcore.agents.pqn import core as pqn
from labcore.agents.pqn import run as pqn_run


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


def _per_seed_means(episodes: np.ndarray, sums: np.ndarray) -> list[float]:
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(episodes > 0, sums / np.maximum(episodes, 1), np.nan).tolist()


def _follow(curve: Curve, program: loop.Program, state: Any, sizes: list[int], seeds: int, points_from: int,
            stop_at: float | None) -> Any:
    """Run ``program`` over ``seeds`` seeds in chunks of ``sizes`` (``labcore.loop.chunks``), a
    point of ``curve`` after each chunk from the ``points_from``-th on; returns the final state."""
    wall, done = 0.0, loop.updates_done(program, state, seeds)  # counted on from here, not read per chunk
    for index, chunk in enumerate(loop.chunks(program, state, sizes, seeds=seeds)):
        state, wall, done = chunk.state, wall + chunk.run_s, done + chunk.updates
        curve.compile_s += chunk.compile_s
        if index < points_from:
            continue
        episodes = np.asarray(chunk.metrics["episodes"], np.float64)  # [seeds, updates]
        sums = (episodes * np.nan_to_num(np.asarray(chunk.metrics["episode_return"], np.float64))).sum(1)
        curve.returns.append(_per_seed_means(episodes.sum(1), sums))
        curve.env_steps.append(done * program.steps_per_update)
        curve.wall_s.append(wall)
        if stop_at is not None and curve.mean_return[-1] >= stop_at:
            break
    return state


def pqn_curve(
    config: pqn.PQNConfig, seeds: int = 3, chunks: int = 10, seed: int = 0, name: str = "PQN", stop_at: float | None = None
) -> Curve:
    """PQN (``labcore.agents.pqn``) for ``config.total_steps`` env steps per seed; with
    ``stop_at``, only until the first chunk whose seed-mean return reaches it."""
    program = pqn_run.make_program(config)
    per_chunk = max(1, config.num_updates // chunks)
    keys = jax.random.split(jax.random.key(seed), seeds)
    runners = jax.block_until_ready(jax.jit(jax.vmap(program.init))(keys))
    curve = Curve(name, [], [], [], 0.0, seeds=seeds)
    runners = _follow(curve, program, runners, [per_chunk] * (config.num_updates // per_chunk), seeds, 0, stop_at)
    greedy = jax.jit(jax.vmap(pqn.make_pqn(config).evaluate))(runners.params,
                                                               jax.random.split(jax.random.key(seed + 1), seeds))
    curve.greedy_return = float(np.mean(greedy))
    return curve


def dqn_scan_curve(
    config: dqn.DQNConfig, seeds: int = 3, chunks: int = 10, seed: int = 0, name: str = "DQN (scan)",
    stop_at: float | None = None,
) -> Curve:
    """The jitted DQN (``labcore.agents.dqn.scan``) for ``config.total_steps`` agent steps per seed;
    with ``stop_at``, only until the first chunk whose seed-mean return reaches it. The replay
    warm-up runs first as one chunk of its own, without a point."""
    parts = dqn_scan.make_parts(config)
    program = dqn_scan.make_program(config)
    per_chunk = max(1, parts.learn_iterations // chunks)
    keys = jax.random.split(jax.random.key(seed), seeds)
    carries = jax.jit(jax.vmap(lambda key: parts.init(*jax.random.split(key, 3))))(keys)
    sizes = [parts.warmup_iterations] + [per_chunk] * (parts.learn_iterations // per_chunk)
    curve = Curve(name, [], [], [], 0.0, seeds=seeds)
    carries = _follow(curve, program, carries, sizes, seeds, 1, stop_at)
    greedy_keys = jax.random.split(jax.random.key(seed + 1), seeds)
    curve.greedy_return = float(np.mean(jax.jit(jax.vmap(parts.evaluate))(carries.train_state.params, greedy_keys)))
    return curve
