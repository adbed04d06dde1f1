"""A fully jitted DQN: environment, acting, replay and updates inside one ``lax.scan``.

The host loop in ``labcore.agents.dqn.host_loop`` steps gymnasium envs in Python and pays a
host-device round trip every step. A gymnax env is a pure JAX function, so the whole of
training (every env step, every epsilon-greedy action, every buffer write and every update)
can be traced once and compiled into a single XLA program. The algorithm is not copied: this
module wires together DQN's pure functions (``labcore.agents.dqn.agent.make_dqn``: ``collect``, ``learn``
and the replay ``buffer``, ``labcore.replay``'s uniform ring).

    config = DQNConfig(env_id="CartPole-v1", total_steps=100_000)
    train = make_train(config)                      # pure: train(key) -> (carry, metrics)
    carry, metrics = jax.jit(train)(jax.random.key(0))
    many = jax.jit(jax.vmap(train))(jax.random.split(jax.random.key(0), 64))   # 64 agents at once

Time is counted in agent steps as in the host loop: each env step of the ``num_envs`` envs adds
``num_envs`` transitions; one iteration is ``train_frequency`` agent steps followed by one update.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from labcore import envs, logged_scan, loop, replay
from labcore.agents.dqn import core as dqn
from labcore.agents.dqn.agent import make_dqn
from labcore.agents.dqn.config import SCAN_NAME as ALGORITHM  # the registry name its checkpoints record


class Carry(NamedTuple):
    """The jitted DQN's whole state between iterations: what ``make_train`` ends with and a checkpoint holds."""

    train_state: dqn.TrainState
    buffer: replay.ReplayState
    env_state: Any  # gymnax state, leaves [num_envs, ...]
    obs: jax.Array  # [num_envs, *obs_shape]
    episode_return: jax.Array  # [num_envs] running return of each env's current episode
    recent_returns: jax.Array  # [RECENT_EPISODES] returns of the last episodes to end (a ring)
    episodes_done: jax.Array  # [] int32 episodes ended so far
    step: jax.Array  # [] int32 agent steps so far
    key: jax.Array


# A row's "episode_return": the mean return of this many last finished episodes (the host loop's too).
RECENT_EPISODES = 20


def recent_returns(carry: Carry) -> tuple[jax.Array, jax.Array]:
    """(sum, number) of the returns of the last ``RECENT_EPISODES`` episodes to end (fewer before
    that many have)."""
    count = jnp.minimum(carry.episodes_done, RECENT_EPISODES)
    return jnp.sum(jnp.where(jnp.arange(RECENT_EPISODES) < count, carry.recent_returns, 0.0)), count


def iteration_counts(config: dqn.DQNConfig) -> tuple[int, int]:
    """(warm-up iterations without updates, iterations with one update each).

    Learning starts once ``learning_starts`` agent steps (rounded up to whole iterations, and at
    least one) are in the buffer.
    """
    total = config.total_steps // config.train_frequency
    warmup = max(1, -(-config.learning_starts // config.train_frequency))
    if warmup >= total:
        raise ValueError(
            f"DQNConfig.total_steps must exceed learning_starts by at least one train_frequency "
            f"({config.train_frequency}) for the jitted DQN, got total_steps={config.total_steps}, "
            f"learning_starts={config.learning_starts}"
        )
    return warmup, total - warmup


def gymnax_env(config: dqn.DQNConfig, env: Any = None, env_params: Any = None) -> tuple[Any, Any]:
    """(env, env_params) of the jitted DQN: ``envs.env_and_params`` with gymnax's envs
    (``envs.make_jax_env``) and the field ``DQNConfig.env_id``."""
    return envs.env_and_params(env, env_params, config.env_id, envs.make_jax_env, "DQNConfig.env_id")


class ScanParts(NamedTuple):
    """The pieces ``make_train`` is built from, for callers that drive the iterations themselves
    (``labcore.agents.dqn.multi_process`` runs them on every device of a cluster)."""

    init: Callable[[jax.Array, jax.Array, jax.Array], Carry]  # (params_key, reset_key, loop_key) -> carry
    iterate: Callable[..., tuple[Carry, dict[str, jax.Array]]]  # (carry, n, learn, *, callback=None, log_every=1)
    iteration: Callable[[Carry], tuple[Carry, dict[str, jax.Array]]]  # one, learning once past the warm-up
    evaluate: Callable[[Any, jax.Array], jax.Array]  # (params, key) -> [eval_episodes] returns
    warmup_iterations: int
    learn_iterations: int


def make_parts(config: dqn.DQNConfig, env: Any = None, env_params: Any = None, axis_name: str | None = None) -> ScanParts:
    """Everything ``make_train`` needs, checked before tracing (see ``make_train``).

    axis_name: average each update's gradients over this mapped axis (``dqn.make_update``), for
    data parallelism under ``jax.shard_map`` / ``jax.pmap``.
    """
    env, env_params = gymnax_env(config, env, env_params)
    if config.train_frequency % config.num_envs:
        raise ValueError(
            f"DQNConfig.num_envs must divide train_frequency ({config.train_frequency}) for the jitted DQN, "
            f"got {config.num_envs}"
        )
    if config.replay_storage != "transitions":
        raise ValueError("DQNConfig.replay_storage must be 'transitions' for the jitted DQN (gymnax envs)")
    warmup_iterations, learn_iterations = iteration_counts(config)
    env_steps_per_iteration = config.train_frequency // config.num_envs
    agent = make_dqn(config, env=env, env_params=env_params, axis_name=axis_name)  # DQN's pure functions
    reset_envs = jax.vmap(env.reset, in_axes=(0, None))

    def env_step(carry: Carry, _) -> tuple[Carry, tuple[jax.Array, jax.Array]]:
        """num_envs agent steps: act, step every env, store the transitions."""
        key, act_key, env_key = jax.random.split(carry.key, 3)
        epsilon = dqn.linear_epsilon(carry.step, config)
        env_state, next_obs, transitions, done = agent.collect(
            carry.train_state.params, carry.env_state, carry.obs, epsilon, act_key, env_key
        )
        buffer = agent.buffer.add(carry.buffer, transitions, done)
        episode_return = carry.episode_return + transitions.reward
        finished = (jnp.sum(done), jnp.sum(jnp.where(done, episode_return, 0.0)))
        # the finished episodes' returns into the ring, in env order (a slot past its end is dropped;
        # with more than RECENT_EPISODES envs ending at once, some of them share a slot)
        order = carry.episodes_done + jnp.cumsum(done) - 1
        slots = jnp.where(done, order % RECENT_EPISODES, RECENT_EPISODES)
        carry = carry._replace(
            buffer=buffer,
            env_state=env_state,
            obs=next_obs,
            episode_return=jnp.where(done, 0.0, episode_return),
            recent_returns=carry.recent_returns.at[slots].set(episode_return, mode="drop"),
            episodes_done=carry.episodes_done + jnp.sum(done, dtype=jnp.int32),
            step=carry.step + config.num_envs,
            key=key,
        )
        return carry, finished

    def iteration(carry: Carry, learn: bool) -> tuple[Carry, dict[str, jax.Array]]:
        epsilon = dqn.linear_epsilon(carry.step, config)
        carry, (episodes, return_sums) = jax.lax.scan(env_step, carry, None, length=env_steps_per_iteration)
        loss = jnp.float32(0.0)
        if learn:
            key, sample_key = jax.random.split(carry.key)
            batch = agent.buffer.sample(carry.buffer, sample_key)
            train_state, update_metrics = agent.learn(carry.train_state, batch)
            carry, loss = carry._replace(train_state=train_state, key=key), update_metrics["loss"]
        metrics = {
            "step": carry.step,
            "epsilon": epsilon,
            "episodes": jnp.sum(episodes),
            "episode_return_sum": jnp.sum(return_sums),
            "loss": loss,
        }
        return carry, metrics

    def iterate(carry: Carry, num_iterations: int, learn: bool, *, callback=None,
                log_every: int = 1) -> tuple[Carry, dict[str, jax.Array]]:
        """``num_iterations`` iterations (static) with or without updates; metrics [num_iterations];
        ``callback`` as ``labcore.logged_scan.scan_updates``'s, counting iterations."""
        return logged_scan.scan_updates(lambda c: iteration(c, learn), carry, num_iterations,
                                        updates_done=lambda c: c.step // config.train_frequency, callback=callback,
                                        log_every=log_every,
                                        rows_per_burst=logged_scan.burst_rows(config.train_frequency, log_every))

    def iteration_in_phase(carry: Carry) -> tuple[Carry, dict[str, jax.Array]]:
        """One iteration, with its update only once the warm-up iterations are done (for callers
        whose chunks do not stop at the warm-up's end)."""
        # Seeds of a vmapped run share the step: one cond for all of them, not both branches.
        learning = loop.same_for_all_seeds(carry.step) >= warmup_iterations * config.train_frequency
        return jax.lax.cond(learning, lambda c: iteration(c, True), lambda c: iteration(c, False), carry)

    def init(params_key: jax.Array, reset_key: jax.Array, loop_key: jax.Array) -> Carry:
        """Fresh parameters (from params_key), envs (reset_key), an empty buffer, the loop's key."""
        obs, env_state = reset_envs(jax.random.split(reset_key, config.num_envs), env_params)
        return Carry(
            train_state=agent.init(params_key),
            buffer=agent.buffer.init(agent.example),
            env_state=env_state,
            obs=obs,
            episode_return=jnp.zeros(config.num_envs, jnp.float32),
            recent_returns=jnp.zeros(RECENT_EPISODES, jnp.float32),
            episodes_done=jnp.int32(0),
            step=jnp.int32(0),
            key=loop_key,
        )

    return ScanParts(init, iterate, iteration_in_phase, agent.evaluate, warmup_iterations, learn_iterations)


def run_keys(key: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
    """A run's key split as every entry point splits it: (parameters, env resets, evaluation, the
    loop's key). ``make_train``, ``make_program`` and ``evaluate`` agree on a seed through this."""
    init_key, reset_key, eval_key, loop_key = jax.random.split(key, 4)
    return init_key, reset_key, eval_key, loop_key


def make_train(config: dqn.DQNConfig, *, env: Any = None, env_params: Any = None,
               callback: Callable[[dict[str, np.ndarray]], None] | None = None,
               log_every: int = 1) -> Callable[[jax.Array], tuple[Carry, dict[str, jax.Array]]]:
    """A pure ``train(key) -> (carry, metrics)``: all of training as one traced function.

    carry: the final state (``carry.train_state.params``; the state ``make_program`` checkpoints).
    metrics: per iteration, each [num_iterations]:
        step                agent steps taken by the end of the iteration
        epsilon             exploration rate used in the iteration
        episodes            training episodes that ended in the iteration
        episode_return_sum  the sum of their returns (a curve: ``episode_return_curve``)
        loss                TD loss of the iteration's update (0 before learning starts)
    Its evaluation: ``evaluate(config, params(carry), seed)`` (mean and spread, played with the evaluation
    key the run of ``jax.random.key(seed)`` leaves unused), or each episode's return under jit and vmap,
    ``make_evaluate_run(config)``.

    env, env_params: a gymnax env (default ``envs.make_jax_env(config.env_id)``). callback: called on
    the host with the metrics of every ``log_every``-th iteration while it runs (it changes no number).
    Everything is checked here, before tracing: a bad env id or a num_envs that does not divide
    train_frequency fails with a message naming the field.
    """
    parts = make_parts(config, env, env_params)
    logged = dict(callback=callback, log_every=log_every)

    def train(key: jax.Array) -> tuple[Carry, dict[str, jax.Array]]:
        init_key, reset_key, _, loop_key = run_keys(key)
        carry = parts.init(init_key, reset_key, loop_key)
        carry, warmup_metrics = parts.iterate(carry, parts.warmup_iterations, False, **logged)
        carry, learn_metrics = parts.iterate(carry, parts.learn_iterations, True, **logged)
        return carry, jax.tree_util.tree_map(lambda a, b: jnp.concatenate([a, b]), warmup_metrics, learn_metrics)

    return train


PLOTTED = ("episode_return", "epsilon", "loss")


def make_program(config: dqn.DQNConfig, callback=None, log_every: int = 1) -> loop.Program:
    """The jitted DQN as a ``labcore.loop.Program``: an update is one iteration (``train_frequency``
    agent steps, then one gradient step once the replay warm-up is over), so ``log_every`` and
    ``checkpoint_every`` count iterations. Seeded as ``make_train``: the run of ``config.seed`` ends
    on the parameters of ``make_train(config)(jax.random.key(config.seed))`` (to XLA's rounding: that
    one compiles the warm-up and the learning as two loops), and its evaluation is
    ``evaluate(config, params, config.seed)``. Rows carry the iteration's metrics (see
    ``make_train``) plus "timesteps" (agent steps) and "episode_return" (the mean return of the
    last ``RECENT_EPISODES`` episodes to end, as the host loop's rows; NaN before the first)."""
    parts = make_parts(config)

    def init(key: jax.Array) -> Carry:
        init_key, reset_key, _, loop_key = run_keys(key)
        return parts.init(init_key, reset_key, loop_key)

    def update(carry: Carry) -> tuple[Carry, dict[str, jax.Array]]:
        carry, metrics = parts.iteration(carry)
        total, count = recent_returns(carry)
        mean_return = jnp.where(count > 0, total / jnp.maximum(count, 1), jnp.nan)
        return carry, {**metrics, "timesteps": metrics["step"], "episode_return": mean_return}

    def run(carry: Carry, num_updates: int) -> tuple[Carry, dict[str, jax.Array]]:
        return logged_scan.scan_updates(update, carry, num_updates, updates_done=lambda c: c.step // config.train_frequency,
                                        callback=callback, log_every=log_every,
                                        rows_per_burst=logged_scan.burst_rows(config.train_frequency, log_every))

    def evaluate_state(carry: Carry, seed: int) -> dict[str, Any]:
        return evaluation(config, parts.evaluate, carry.train_state.params, seed)

    return loop.Program(
        config=config,
        init=init,
        run=run,
        updates_done=lambda carry: int(carry.step) // config.train_frequency,
        num_updates=parts.warmup_iterations + parts.learn_iterations,
        steps_per_update=config.train_frequency,
        name=f"DQN (jitted) on {config.env_id}",
        plotted=PLOTTED,
        shown={"ret": "episode_return", "eps": "epsilon"},
        evaluate=evaluate_state,
        algorithm=ALGORITHM,
    )


# train(config, run_dir=None, **options): labcore.loop.train's options, every count in updates (one
# update: ``train_frequency`` agent steps, then a gradient step once the replay warm-up is over); a
# run folder (config, metrics, TensorBoard, metrics.png, summary.json), checkpoints of the whole
# state (network, optimiser, replay buffer, envs, key) and an exact resume. The result's ``state``
# is the final carry (``state.train_state.params``).
train = loop.trainer(make_program, "the jitted DQN")


def evaluate(config: dqn.DQNConfig, params: Any, seed: int = 0) -> dict[str, Any]:
    """``config.eval_episodes`` episodes at ``config.eval_epsilon`` with the evaluation key the run of
    ``jax.random.key(seed)`` splits off and leaves for this (``run_keys``): their mean and spread."""
    return evaluation(config, make_evaluate(config), params, seed)


def evaluation(config: dqn.DQNConfig, play: Callable, params: Any, seed: int) -> dict[str, Any]:
    """The summary entries of ``play(params, key)`` (a ``make_evaluate`` function) with the evaluation key
    of the run of ``jax.random.key(seed)`` (``run_keys``)."""
    _, _, eval_key, _ = run_keys(jax.random.key(seed))
    played = np.asarray(jax.jit(play)(params, eval_key))
    return {"eval_episodes": config.eval_episodes, "eval_epsilon": config.eval_epsilon,
            "eval_return_mean": float(played.mean()), "eval_return_std": float(played.std())}


def params(carry: Carry) -> Any:
    """The Q-network's parameters in a state of ``train`` or ``load_checkpoint``."""
    return carry.train_state.params


def load_checkpoint(path: str | os.PathLike, step: int | None = None) -> tuple[dqn.DQNConfig, Carry]:
    """(config, carry) from a run folder of ``train`` or its checkpoints/ folder (default: newest)."""
    return loop.load_checkpoint(path, dqn.DQNConfig, make_program, step, algorithm=ALGORITHM)


def make_evaluate(
    config: dqn.DQNConfig, env: Any = None, env_params: Any = None, epsilon: float | None = None
) -> Callable[[Any, jax.Array], jax.Array]:
    """A pure ``evaluate(params, key) -> [eval_episodes] returns``: one episode per env, no learning.

    All episodes run side by side for the env's step limit; each return counts rewards up to
    that env's first episode end. env, env_params: a gymnax env (default: ``config.env_id``'s).
    epsilon: default ``config.eval_epsilon`` (0 for greedy).
    """
    env, env_params = gymnax_env(config, env, env_params)
    if epsilon is not None:
        config = dataclasses.replace(config, eval_epsilon=epsilon)
    return make_dqn(config, env=env, env_params=env_params).evaluate


def make_evaluate_run(config: dqn.DQNConfig, *, env: Any = None,
                      env_params: Any = None) -> Callable[[Any, jax.Array], jax.Array]:
    """A pure ``evaluate_run(params, key) -> [eval_episodes] returns``: ``make_evaluate``'s episodes played
    with the evaluation key the run of ``key`` splits off (``run_keys``), so that under jit and vmap
    it plays what ``evaluate(config, params, seed)`` plays for the run of ``jax.random.key(seed)``."""
    play = make_evaluate(config, env, env_params)
    return lambda params, key: play(params, run_keys(key)[2])


def make_train_and_evaluate(config: dqn.DQNConfig, *, env: Any = None,
                            env_params: Any = None) -> Callable[[jax.Array], jax.Array]:
    """A pure ``run(key) -> [eval_episodes] returns``: the whole run of ``key`` (``make_train``), then
    its trained network's episodes (``make_evaluate_run``), as one function, so that
    ``jax.jit(jax.vmap(run))(keys)`` trains and plays every seed in one compiled call."""
    train = make_train(config, env=env, env_params=env_params)
    evaluate_run = make_evaluate_run(config, env=env, env_params=env_params)

    def run(key: jax.Array) -> jax.Array:
        carry, _ = train(key)
        return evaluate_run(params(carry), key)

    return run


def episode_return_curve(metrics: dict[str, Any], window: int = 20) -> tuple[np.ndarray, np.ndarray]:
    """(agent steps, mean return of the last ``window`` iterations' finished episodes), on the host.

    metrics: ``make_train``'s metrics, [num_iterations] leaves, or [seeds, num_iterations] after
    vmap (then the curves are [seeds, num_iterations]). Before any episode ends the value is NaN.
    """
    steps = np.asarray(metrics["step"])
    episodes = np.asarray(metrics["episodes"], np.float64)
    sums = np.asarray(metrics["episode_return_sum"], np.float64)

    def trailing(x):
        cumulative = np.cumsum(x, axis=-1)
        shifted = np.concatenate([np.zeros_like(cumulative[..., :window]), cumulative[..., :-window]], axis=-1)
        return cumulative - shifted[..., : cumulative.shape[-1]]

    count, total = trailing(episodes), trailing(sums)
    with np.errstate(invalid="ignore", divide="ignore"):
        curve = np.where(count > 0, total / np.maximum(count, 1), np.nan)
    return steps, curve
