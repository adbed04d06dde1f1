"""Actors and a learner in separate processes: the actor-learner DQN, in the style of Ape-X and Gorila.

    result = run(DQNConfig(env_id="CartPole-v1", total_steps=60_000), num_actors=2, broadcast_every=10)

* **Actors** (``num_actors`` processes) each step ``envs_per_actor`` gymnax envs with a jitted
  epsilon-greedy rollout of ``rollout_steps`` steps, using the newest parameters they have
  received, and send the transitions, tagged with the parameter version they acted with, to the
  learner.
* **The learner** (this process) owns the replay buffer (``labcore.replay``), adds what arrives,
  makes one jitted DQN update (``labcore.agents.dqn.core``) per ``train_frequency`` transitions
  received, and every ``broadcast_every`` updates sends the parameters and the current epsilon
  back to every actor.

The transport is real: ``multiprocessing`` pipes between processes (OS socket pairs; numpy
arrays, pickled), one for parameters into each actor and one for data out of it. Actors never wait for the learner (they act with whatever parameters they have), so
the data is **stale**: an actor's transitions come from parameters ``staleness`` updates older
than the learner's. ``broadcast_every`` sets how stale; the result reports it with the actors'
steps per second and the learner's updates per second.

A dead actor (or none sending data within ``connect_timeout_s``) stops the run with an error
naming it; every actor process is joined or killed on the way out.

The actors run JAX on the CPU platform (``JAX_PLATFORMS=cpu`` in the environment they start
with, ``labcore.distributed.children_on_cpu``) whatever this process uses: a GPU or TPU is held
by one process, so actors asking for the chip a notebook kernel holds would fail or preallocate
its memory again. The learner keeps this process's devices.
"""

from __future__ import annotations

import dataclasses
import multiprocessing
import time
from multiprocessing.connection import Connection, wait
from typing import Any, NamedTuple

import numpy as np

from labcore import distributed
from labcore.agents.dqn import core as dqn


class ActorLearnerResult(NamedTuple):
    params: Any
    metrics: list[dict[str, Any]]  # one row per ``log_every`` updates
    actor_steps_per_second: float  # all actors together, over the run
    learner_updates_per_second: float
    mean_staleness: float  # learner updates between acting and learning, averaged over batches
    eval_returns: np.ndarray
    wall_time: float


def _actor_main(rank: int, params_in: Connection, data_out: Connection, config_fields: dict, envs_per_actor: int,
                rollout_steps: int, seed: int) -> None:
    """One actor process: act with the newest parameters and send transitions until told to stop.

    A thread drains the parameter pipe, keeping only the newest message, so the learner's
    broadcasts never back up while this process is busy acting or blocked sending data.
    """
    import threading

    import jax
    import jax.numpy as jnp

    from labcore import envs
    from labcore.nets.q_networks import make_q_network

    config = dqn.DQNConfig(**config_fields)
    newest: list[Any] = [params_in.recv()]  # (version, params, epsilon); None means stop
    stop = threading.Event()

    def receive() -> None:
        try:
            while not stop.is_set():
                message = params_in.recv()
                newest[0] = message
                if message is None:
                    stop.set()
        except (EOFError, OSError):
            stop.set()

    threading.Thread(target=receive, daemon=True).start()
    env, env_params = envs.make_jax_env(config.env_id)
    network = make_q_network(config.network, env.action_space(env_params).n, config.hidden_sizes)
    step_envs = jax.vmap(env.step, in_axes=(0, 0, 0, None))

    @jax.jit
    def rollout(params, env_state, obs, key, epsilon):
        def one_step(carry, step_key):
            env_state, obs = carry
            act_key, env_key = jax.random.split(step_key)
            actions = dqn.select_action(network, params, obs, epsilon, act_key)
            next_obs, env_state, reward, terminated, truncated, info = step_envs(
                jax.random.split(env_key, envs_per_actor), env_state, actions, env_params
            )
            transition = (obs, actions, reward.astype(jnp.float32), info["final_observation"], terminated, terminated | truncated)
            return (env_state, next_obs), transition

        (env_state, obs), transitions = jax.lax.scan(one_step, (env_state, obs), jax.random.split(key, rollout_steps))
        return env_state, obs, transitions

    key = jax.random.fold_in(jax.random.key(seed), rank)
    key, reset_key = jax.random.split(key)
    obs, env_state = jax.vmap(env.reset, in_axes=(0, None))(jax.random.split(reset_key, envs_per_actor), env_params)
    episode_return = np.zeros(envs_per_actor)
    while True:
        message = newest[0]
        if stop.is_set() or message is None:
            return
        version, params, epsilon = message
        key, rollout_key = jax.random.split(key)
        env_state, obs, (o, a, r, next_o, term, done) = rollout(params, env_state, obs, rollout_key, epsilon)
        o, a, r, next_o, term, done = (np.asarray(x) for x in (o, a, r, next_o, term, done))
        finished = []
        for t in range(rollout_steps):  # episode returns, for the learner's log
            episode_return += r[t]
            finished.extend(episode_return[done[t]].tolist())
            episode_return[done[t]] = 0.0
        shape = (rollout_steps * envs_per_actor,)
        batch = (o.reshape(shape + o.shape[2:]), a.reshape(shape), r.reshape(shape), next_o.reshape(shape + o.shape[2:]),
                 term.reshape(shape))
        try:
            data_out.send((version, batch, finished))
        except (BrokenPipeError, ConnectionResetError, OSError):
            return  # the learner has gone


def run(
    config: dqn.DQNConfig,
    num_actors: int = 2,
    envs_per_actor: int = 4,
    rollout_steps: int = 32,
    broadcast_every: int = 10,
    log_every: int = 200,
    connect_timeout_s: float = 60.0,
    timeout_s: float = 900.0,
) -> ActorLearnerResult:
    """Train ``config`` (its total_steps counts transitions from all actors); see the module docstring."""
    import jax
    import jax.numpy as jnp

    from labcore import envs, replay
    from labcore.agents.dqn import scan as dqn_scan
    from labcore.nets.q_networks import make_q_network

    for name, value in (("num_actors", num_actors), ("envs_per_actor", envs_per_actor), ("rollout_steps", rollout_steps),
                        ("broadcast_every", broadcast_every), ("log_every", log_every)):
        if value < 1:
            raise ValueError(f"{name} must be >= 1, got {value}")
    env, env_params = envs.make_jax_env(config.env_id)
    network = make_q_network(config.network, env.action_space(env_params).n, config.hidden_sizes)
    optimizer = dqn.make_optimizer(config)
    update = jax.jit(dqn.make_update(config, network, optimizer), donate_argnums=0)
    obs_shape = env.observation_space(env_params).shape
    key = jax.random.key(config.seed)
    key, init_key = jax.random.split(key)
    state = dqn.init_train_state(config, network, optimizer, jnp.zeros(obs_shape, jnp.float32), init_key)
    example = dqn.Transition(jnp.zeros(obs_shape), jnp.int32(0), jnp.float32(0), jnp.zeros(obs_shape), jnp.bool_(False))
    buffer = replay.init(example, config.buffer_size)
    add_batch = jax.jit(replay.add_batch, donate_argnums=0)
    sample = jax.jit(replay.sample, static_argnums=2)
    total_updates = max(1, (config.total_steps - config.learning_starts) // config.train_frequency)

    context = multiprocessing.get_context("spawn")  # a fresh interpreter: no forked JAX runtime
    params_pipes = [context.Pipe(duplex=False) for _ in range(num_actors)]  # (actor's end, learner's end)
    data_pipes = [context.Pipe(duplex=False) for _ in range(num_actors)]  # (learner's end, actor's end)
    actors = [
        context.Process(target=_actor_main, args=(rank, params_pipes[rank][0], data_pipes[rank][1], dataclasses.asdict(config),
                                                  envs_per_actor, rollout_steps, config.seed), daemon=True)
        for rank in range(num_actors)
    ]
    with distributed.children_on_cpu():  # the actors must not claim the kernel's GPU or TPU
        for actor in actors:
            actor.start()
    senders = [pipe[1] for pipe in params_pipes]
    inbox = [pipe[0] for pipe in data_pipes]
    rank_of = {id(connection): rank for rank, connection in enumerate(inbox)}
    for rank in range(num_actors):  # the learner keeps only its own ends open
        params_pipes[rank][0].close()
        data_pipes[rank][1].close()
    started = time.perf_counter()
    rows: list[dict[str, Any]] = []
    try:

        def broadcast(version: int, step: int) -> None:
            message = (version, jax.device_get(state.params), float(dqn.linear_epsilon(step, config)))
            for rank, connection in enumerate(senders):
                try:
                    connection.send(message)
                except (BrokenPipeError, ConnectionResetError, OSError) as error:
                    actors[rank].join(timeout=5)
                    raise RuntimeError(f"actor {rank} died (exit status {actors[rank].exitcode})") from error

        def check_actors() -> None:
            for rank, actor in enumerate(actors):
                if not actor.is_alive():
                    raise RuntimeError(f"actor {rank} died (exit status {actor.exitcode})")

        broadcast(0, 0)
        received = updates = 0
        credit = 0.0  # updates owed: one per train_frequency transitions received
        staleness: list[int] = []
        returns: list[float] = []
        acting_started = time.perf_counter()
        first_data = None  # rates are measured from the first batch: actor start-up and compiles excluded
        while updates < total_updates:
            if time.perf_counter() - started > timeout_s:
                raise TimeoutError(f"actor-learner run exceeded {timeout_s:.0f} s")
            ready = wait(inbox, timeout=1.0)
            if not ready:
                check_actors()
                if time.perf_counter() - acting_started > connect_timeout_s and received == 0:
                    raise RuntimeError(f"no actor sent data within {connect_timeout_s:.0f} s")
            for connection in ready:
                try:
                    version, batch, finished = connection.recv()
                except (EOFError, ConnectionResetError, OSError) as error:
                    actor = actors[rank_of[id(connection)]]
                    actor.join(timeout=5)
                    raise RuntimeError(f"actor {rank_of[id(connection)]} died (exit status {actor.exitcode})") from error
                first_data = first_data or time.perf_counter()
                o, a, r, next_o, term = batch
                buffer = add_batch(buffer, dqn.Transition(o, a, r, next_o, term))
                received += len(a)
                returns.extend(finished)
                if received < config.learning_starts:
                    continue
                staleness.append(updates - version)
                credit += len(a) / config.train_frequency
                while credit >= 1 and updates < total_updates:
                    key, sample_key = jax.random.split(key)
                    state, metrics = update(state, sample(buffer, sample_key, config.batch_size))
                    updates += 1
                    credit -= 1
                    if updates % broadcast_every == 0:
                        broadcast(updates, received)
                    if updates % log_every == 0:
                        recent = returns[-20:]
                        rows.append({"updates": updates, "step": received, "loss": float(metrics["loss"]),
                                     "episode_return": float(np.mean(recent)) if recent else None,
                                     "staleness": float(np.mean(staleness[-50:])), "seconds": time.perf_counter() - started})
        wall = time.perf_counter() - started
        acting_seconds = time.perf_counter() - first_data
        evaluate = jax.jit(dqn_scan.make_evaluate(config, env, env_params))
        eval_returns = np.asarray(evaluate(state.params, jax.random.key(config.seed + 1)))
        return ActorLearnerResult(
            params=jax.device_get(state.params),
            metrics=rows,
            actor_steps_per_second=received / acting_seconds,
            learner_updates_per_second=updates / acting_seconds,
            mean_staleness=float(np.mean(staleness)) if staleness else 0.0,
            eval_returns=eval_returns,
            wall_time=wall,
        )
    finally:
        for connection in senders:
            try:
                connection.send(None)  # stop
            except (BrokenPipeError, ConnectionResetError, OSError):
                pass
        for connection in inbox:  # unblocks an actor waiting to send
            connection.close()
        for actor in actors:
            actor.join(timeout=10)
            if actor.is_alive():
                actor.kill()
                actor.join()
