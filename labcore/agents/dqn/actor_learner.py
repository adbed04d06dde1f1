"""Actors and a learner on Ray: the actor-learner DQN, in the style of Ape-X and Gorila.

    result = train(DQNConfig(env_id="CartPole-v1", total_steps=60_000), num_actors=2)            # this machine
    result = train(config, num_actors=16, address="auto")      # the Ray cluster `ray start` runs (docs/guide/distributed.md)

* **Actors** are Ray actors (``RolloutActor``), one process each, placed on the cluster's nodes
  (spread over them). Each steps ``envs_per_actor`` gymnax envs with a jitted epsilon-greedy
  rollout of ``rollout_steps`` steps and returns the transitions, tagged with the parameter
  version it acted with and the node it ran on. ``exploration`` sets their epsilon: "linear", one
  rate for every actor, the config's schedule over the transitions received; or "ape_x", Ape-X's
  constant rate of its own for each actor (``actor_pool.ape_x_epsilon``: actor 0 explores most, the last least).
* **Parameters** travel through Ray's object store: every ``broadcast_every`` updates the learner
  puts one copy there (``ray.put``), and each rollout it asks for carries a reference to the newest
  copy; an actor on another node fetches it from there once.
* **The learner** (this process) owns the replay buffer (the DQN's ``buffer``, ``labcore.replay``), adds each rollout
  as it returns, makes one jitted DQN update (``labcore.agents.dqn.core``) per
  ``train_frequency`` transitions received, and at once asks that actor for its next rollout. Two
  rollouts are queued per actor, so an actor never waits for the learner; the price is
  **staleness**: data acted with parameters ``staleness`` updates older than the learner's. The
  result's summary reports it with the actors' steps per second and the learner's updates per second.

Faults. An actor whose process dies is restarted by Ray (``max_restarts`` times per actor): a
rollout that fails with it is lost and counted (``transitions_lost``: ``rollout_steps x
envs_per_actor`` per death; none where every rollout asked of it had already come back), the run
goes on with the other actors, and the restarted actor gets work again once it answers. An actor
that dies once more than ``max_restarts`` stops the run with an error naming it. An actor that is
silent (no rollout for ``actor_deadline_s``: a process stopped, hung in a call that never returns,
starved of CPU; a restart that never answers) is killed
by the learner, said in one line, and restarted through the same path (``actor_restarts``, and
``silent_restarts`` for these); a rollout that has come back and waits while the learner is busy
elsewhere does not count as silence. No rollout from any actor for ``stall_timeout_s`` stops the
run with the cluster's resources (actors that cannot be placed); either way a run with checkpoints
saves one first, and the actors die with the learner (Ray owns them). A learner killed mid-run leaves its newest
checkpoint (``checkpoint_every`` updates: train state, replay buffer, key, counters) in
``run_dir``; ``resume=True`` continues from it with new actors. A resumed run continues the
learner's state exactly, but not the run: which actor's rollout arrives first is decided by the
operating system, so no two asynchronous runs are the same.

The actors run JAX on the CPU platform (``actor_platform``) whatever the learner uses: a GPU or
TPU is held by one process, and acting with a small network is CPU-sized work. They run at the
priority their Ray node was started with (the learner's, where labcore starts Ray), not at the
niceness 15 Ray gives its workers by default, so that a busy machine slows them no more than it
slows the learner.

Why this driver keeps a loop of its own instead of ``labcore.loop.train``: the learner's steps are
driven by rollouts arriving from other processes, in an order the operating system decides, so
there is no pure ``run(state, n)`` to compile. It uses the shared driver's pieces:
``labcore.training_run.TrainingRun`` (run folder, progress bar, rows, resume from the newest intact
checkpoint, summary, plot) and ``labcore.checkpoint``, and returns its result type,
``labcore.training_run.RunResult``: ``state`` is the learner's final state as a checkpoint holds it,
``{"train_state", "replay", "key"}`` (``params`` reads the parameters of either). One update is one learner update; ``log_every``
and ``checkpoint_every`` count them. Rows hold the "update" and "timesteps" (transitions received
from all actors). ``summary`` (summary.json) starts with the entries every driver writes (env,
seeds, timesteps, updates; compile_s: from the start to the first rollout received, the actors'
start and compiles; run_s and steps_per_second, all actors together: from then on), then adds what
an asynchronous run has: transitions lost, restarts, staleness, the learner's rate, transitions
per node, the actors, and the evaluation (``evaluate``, the one ``eval dqn-actor-learner`` runs).
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from labcore import ray_cluster, training_run
from labcore.agents.dqn import core as dqn
from labcore.agents.dqn.actor_pool import ActorPool, every_ready
from labcore.agents.dqn.config import ACTOR_LEARNER, ActorLearnerSettings
from labcore.agents.dqn.learner_checkpoints import (  # noqa: F401 (ALGORITHM, load_checkpoint, params, evaluate: this driver's)
    ALGORITHM, Counters as _Counters, evaluate, learner_state, load_checkpoint, params, restore as _restore,
    save as _save)
from labcore.training_run import TrainingRun

PLOTTED = ("episode_return", "loss", "staleness")


class RolloutActor:
    """One actor's state and jitted rollout; ``run`` makes it a Ray actor (``ray.remote``).

    rollout(params, version, epsilon) -> a dict of numpy arrays ``obs`` [T*E, *obs_shape],
    ``actions`` [T*E] int32, ``rewards`` [T*E] float32, ``next_obs``, ``terminated`` and ``done`` (the
    episode ended, a time limit included) [T*E] bool (T = rollout_steps, E = envs_per_actor), plus ``version``, ``finished`` (returns of the
    episodes that ended), ``rank``, ``node_id`` and ``pid``.
    """

    def __init__(self, config_fields: dict, rank: int, envs_per_actor: int, rollout_steps: int):
        from labcore import compile_cache

        # An actor is a process of labcore's own, like the CLI: it opts into the compilation cache
        # (on a node that `ray start` began, it cannot inherit the driver's environment).
        compile_cache.configure()
        import jax

        from labcore import envs
        from labcore.agents.dqn.agent import make_dqn

        config = dqn.DQNConfig(**config_fields)
        self.rank, self.envs_per_actor, self.rollout_steps = rank, envs_per_actor, rollout_steps
        env, env_params = envs.make_jax_env(config.env_id)
        agent = make_dqn(config, env=env, env_params=env_params, num_envs=envs_per_actor)  # the learner's DQN

        def rollout(params, env_state, obs, key, epsilon):
            def one_step(carry, step_key):
                env_state, obs = carry
                act_key, env_key = jax.random.split(step_key)
                env_state, next_obs, t, done = agent.collect(params, env_state, obs, epsilon, act_key, env_key)
                return (env_state, next_obs), (t.obs, t.action, t.reward, t.next_obs, t.terminated, done)

            return jax.lax.scan(one_step, (env_state, obs), jax.random.split(key, rollout_steps))

        self._rollout = jax.jit(rollout)
        # A restarted actor (same rank) must not replay its predecessor's random stream: its pid differs.
        self._key = jax.random.fold_in(jax.random.fold_in(jax.random.key(config.seed), rank), os.getpid())
        self._key, reset_key = jax.random.split(self._key)
        self._obs, self._env_state = jax.vmap(env.reset, in_axes=(0, None))(
            jax.random.split(reset_key, envs_per_actor), env_params)
        self._episode_return = np.zeros(envs_per_actor)
        self.node_id = _node_id()

    def ready(self) -> bool:
        """Answers once the actor is constructed (the learner's check that a restarted actor is up)."""
        return True

    def rollout(self, params: Any, version: int, epsilon: float) -> dict[str, Any]:
        import jax

        self._key, key = jax.random.split(self._key)
        (self._env_state, self._obs), transitions = self._rollout(params, self._env_state, self._obs, key, epsilon)
        obs, actions, rewards, next_obs, terminated, done = (np.asarray(x) for x in transitions)
        finished = []
        for t in range(self.rollout_steps):  # episode returns, for the learner's log
            self._episode_return += rewards[t]
            finished.extend(self._episode_return[done[t]].tolist())
            self._episode_return[done[t]] = 0.0
        flat = (self.rollout_steps * self.envs_per_actor,)
        return {"obs": obs.reshape(flat + obs.shape[2:]), "actions": actions.reshape(flat), "rewards": rewards.reshape(flat),
                "next_obs": next_obs.reshape(flat + obs.shape[2:]), "terminated": terminated.reshape(flat),
                "done": done.reshape(flat),
                "version": version, "finished": finished, "rank": self.rank, "node_id": self.node_id, "pid": os.getpid()}


def _node_id() -> str:
    import ray

    return ray.get_runtime_context().get_node_id()


def train(
    config: dqn.DQNConfig,
    run_dir: str | os.PathLike | None = None,
    *,
    num_actors: int = ACTOR_LEARNER.num_actors,
    envs_per_actor: int = ACTOR_LEARNER.envs_per_actor,
    rollout_steps: int = ACTOR_LEARNER.rollout_steps,
    broadcast_every: int = ACTOR_LEARNER.broadcast_every,
    log_every: int | None = None,
    address: str | None = ACTOR_LEARNER.address,
    max_restarts: int = ACTOR_LEARNER.max_restarts,
    cpus_per_actor: float = ACTOR_LEARNER.cpus_per_actor,
    actor_platform: str = "cpu",
    checkpoint_every: int | None = None,
    resume: bool = False,
    overwrite: bool = False,
    progress: bool = True,
    tensorboard: bool = True,
    evaluate: bool = True,
    on_log: Callable[[dict[str, Any], list[dict[str, Any]]], None] | None = None,
    stall_timeout_s: float = ACTOR_LEARNER.stall_timeout_s,
    actor_deadline_s: float | None = ACTOR_LEARNER.actor_deadline_s,
    timeout_s: float | None = ACTOR_LEARNER.timeout_s,
    exploration: str = ACTOR_LEARNER.exploration,
) -> training_run.RunResult:
    """Train ``config`` (its total_steps counts transitions from all actors); see the module docstring. The
    settings' defaults and help: ``labcore.agents.dqn.config.ActorLearnerSettings``. The result's ``state`` is
    the learner's, as ``load_checkpoint`` returns it: ``{"train_state", "replay", "key"}``.

    address: None joins the Ray this process runs, or starts one here on 127.0.0.1 (stopped at the
    end); "auto" or "host:port" joins a cluster (``labcore.ray_cluster.init``). log_every and
    checkpoint_every count updates, learner updates (log_every's default: ``training_run.default_log_every``
    of the run's ``total_updates(config)``, about 100 rows). on_log(row, actors) is called after
    each metrics row with the actors' table (rank, node_id, pid, restarts, transitions, epsilon: the
    rate its newest request asks for). evaluate:
    end with ``evaluate(config, params, config.seed)`` of the final parameters (``config.eval_episodes``
    episodes at ``config.eval_epsilon``: eval_episodes, eval_epsilon, eval_return_mean and eval_return_std
    in the summary, as the jitted DQN's). timeout_s: a limit on the whole run (None: none); stall_timeout_s: the longest wait
    for any rollout; actor_deadline_s: the longest an actor may go without delivering a rollout (from
    its start or restart, or its last delivery; the first one includes its compiles) before it is
    killed and restarted (None: never).
    """
    settings = ActorLearnerSettings(  # checked here, naming a bad field, before Ray starts
        address=address, num_actors=num_actors, envs_per_actor=envs_per_actor, rollout_steps=rollout_steps,
        broadcast_every=broadcast_every, max_restarts=max_restarts, cpus_per_actor=cpus_per_actor,
        stall_timeout_s=stall_timeout_s, actor_deadline_s=actor_deadline_s, timeout_s=timeout_s,
        exploration=exploration)
    for name, value in (("log_every", log_every), ("checkpoint_every", checkpoint_every)):
        if value is not None and value < 1:
            raise ValueError(f"{name} must be >= 1, got {value}")
    if checkpoint_every is not None and run_dir is None:
        raise ValueError("checkpoint_every needs a run_dir to write checkpoints to")
    log_every = training_run.default_log_every(total_updates(config)) if log_every is None else log_every
    import ray

    started_ray = not ray.is_initialized()
    try:
        # Ray first: an address that answers nothing must not leave a run folder behind. A one-node
        # Ray started here gets a logical CPU per actor, so every actor is placed even on a machine
        # with fewer cores (they then share them, as processes do).
        ray_cluster.init(address, num_cpus=max(os.cpu_count() or 1, int(np.ceil(num_actors * cpus_per_actor)) + 1)
                         if address is None else None)
        host = TrainingRun.open(run_dir, config, name=f"DQN actor-learner on {config.env_id}",
                                total_steps=config.total_steps, plotted=PLOTTED, resume=resume, overwrite=overwrite,
                                tensorboard=tensorboard, progress=progress)
        try:
            return _train(config, host, settings, log_every=log_every, checkpoint_every=checkpoint_every,
                          actor_platform=actor_platform, on_log=on_log, evaluate_at_end=evaluate)
        finally:
            host.close()
    finally:
        if started_ray and ray.is_initialized():
            ray.shutdown()


def total_updates(config: dqn.DQNConfig) -> int:
    """The learner updates of a run: one per ``train_frequency`` transitions received past ``learning_starts``."""
    return max(1, (config.total_steps - config.learning_starts) // config.train_frequency)


def _train(config: dqn.DQNConfig, host: TrainingRun, settings: ActorLearnerSettings, *, log_every: int,
           checkpoint_every: int | None, actor_platform: str, on_log: Callable | None,
           evaluate_at_end: bool) -> training_run.RunResult:
    import jax
    import ray

    from labcore import envs
    from labcore.agents.dqn.agent import make_dqn

    env, env_params = envs.make_jax_env(config.env_id)
    agent = make_dqn(config, env=env, env_params=env_params)  # the actors' DQN: the same functions
    update = jax.jit(agent.learn, donate_argnums=0)
    key, init_key = jax.random.split(jax.random.key(config.seed))
    state = agent.init(init_key)
    buffer = agent.buffer.init(agent.example)
    add = jax.jit(agent.buffer.add, donate_argnums=0)
    sample = jax.jit(agent.buffer.sample)
    run, last_update, num_actors = host.folder, total_updates(config), settings.num_actors
    before = _Counters(0, 0, 0, 0.0, 0.0, {}, [0] * num_actors)
    if run.awaiting_restore:
        state, buffer, key, before = _restore(run, state, buffer)
    received, updates, credit = before.received, before.updates, before.credit

    # Ray starts its worker processes at niceness 15, for work that should yield to the driver. The
    # actors are this run's work: at 15 they get almost no CPU while any normal-priority process is
    # busy (a browser, a build), and a start or restart that takes 9 s on an idle 2-core machine
    # took more than 120 s. They keep their node's priority instead, as Ray's job drivers do.
    remote = ray.remote(RolloutActor).options(
        num_cpus=settings.cpus_per_actor, max_restarts=settings.max_restarts, max_task_retries=0,
        scheduling_strategy="SPREAD",
        runtime_env={"env_vars": {"JAX_PLATFORMS": actor_platform, "RAY_worker_niceness": "0"}})
    fields = dataclasses.asdict(config)
    handles = [remote.remote(fields, rank, settings.envs_per_actor, settings.rollout_steps)
               for rank in range(num_actors)]
    earlier_restarts = before.restarts + [0] * max(0, num_actors - len(before.restarts))  # a resume may add actors
    # Every node alive now has a column from the first row on (a CSV's columns are fixed by its first row).
    by_node = {node["node_id"]: 0 for node in ray_cluster.nodes() if node["alive"]} | dict(before.by_node)
    params_ref, version = ray.put(jax.device_get(state.params)), updates

    actors = ActorPool(config, settings, handles, earlier_restarts, before.lost)
    for rank in range(num_actors):
        actors.ask(rank, params_ref, version, received)
    host.start(steps=received)
    started = time.perf_counter()
    actors.start(started)

    def save() -> None:
        _save(run.checkpoints, updates, state, buffer, key, config,
              _Counters(received, updates, actors.lost, before.seconds + time.perf_counter() - started, credit,
                        dict(by_node), [actor["restarts"] for actor in actors.table]))

    last_arrival = started
    first_data = None  # rates are measured from the first rollout: start-up and compiles excluded
    staleness: list[int] = []
    returns: list[float] = []
    try:
        while updates < last_update:
            now = time.perf_counter()
            if settings.timeout_s is not None and now - started > settings.timeout_s:
                raise TimeoutError(f"actor-learner run exceeded {settings.timeout_s:.0f} s")
            if (now - last_arrival > settings.stall_timeout_s
                    and not every_ready(list(actors.in_flight), ray.wait, timeout_s=0)):
                raise RuntimeError(f"no actor returned a rollout for {settings.stall_timeout_s:.0f} s (Ray's cluster: "
                                   f"{ray.cluster_resources()}; each actor asks for {settings.cpus_per_actor} CPU)")
            actors.silence(now)
            for ref in every_ready([*actors.in_flight, *actors.restarting], ray.wait):
                if ref not in actors.in_flight and ref not in actors.restarting:
                    continue  # written off by a death taken earlier in this batch
                rank, out, up = actors.back(ref)
                if out is None:
                    if up:  # a restarted actor answers: work for it
                        actors.ask(rank, params_ref, version, received)
                    continue
                last_arrival = actors.last_heard[rank]  # when it came back
                first_data = first_data or last_arrival
                batch = len(out["actions"])
                by_node[out["node_id"]] = by_node.get(out["node_id"], 0) + batch
                buffer = add(buffer, dqn.Transition(out["obs"], out["actions"], out["rewards"], out["next_obs"],
                                                    out["terminated"]), out["done"])
                received += batch
                host.advance(received)
                returns.extend(out["finished"])
                if received > config.learning_starts:
                    staleness.append(updates - out["version"])
                    credit += min(batch, received - config.learning_starts) / config.train_frequency
                while credit >= 1 and updates < last_update:
                    key, sample_key = jax.random.split(key)
                    state, metrics = update(state, sample(buffer, sample_key))
                    updates += 1
                    credit -= 1
                    if updates % settings.broadcast_every == 0:
                        params_ref, version = ray.put(jax.device_get(state.params)), updates
                    if updates % log_every == 0:
                        recent = returns[-20:]
                        row = host.log(updates, {
                            "loss": float(metrics["loss"]),
                            "episode_return": float(np.mean(recent)) if recent else None,
                            "staleness": float(np.mean(staleness[-50:])) if staleness else 0.0,
                            **actors.counts(),
                            "seconds": before.seconds + time.perf_counter() - started,
                            **{f"transitions_node_{node[:12]}": count for node, count in sorted(by_node.items())},
                        }, steps=received)
                        if on_log is not None:
                            on_log(row, [dict(a) for a in actors.table])
                    if checkpoint_every is not None and updates % checkpoint_every == 0:
                        save()
                if updates < last_update and rank not in actors.restarting.values():
                    actors.ask(rank, params_ref, version, received)
        acting_seconds = max(time.perf_counter() - (first_data or started), 1e-9)
    except (TimeoutError, RuntimeError):
        if checkpoint_every is not None and updates > before.updates:
            save()  # the work since the last checkpoint is kept
        raise
    finally:
        for handle in handles:  # the actors stop now, not when Ray collects them
            ray.kill(handle, no_restart=True)
    if checkpoint_every is not None and updates % checkpoint_every:
        save()
    own = {
        # transitions lost in rollouts that died with their actor; actor processes Ray started again; of them,
        # killed for a missed deadline
        **actors.counts(),
        "mean_staleness": float(np.mean(staleness)) if staleness else 0.0,  # updates between acting and learning
        # this call's, from the first rollout received (start-up and compiles excluded), as steps_per_second
        "learner_updates_per_second": round((updates - before.updates) / acting_seconds, 1),
        "transitions_by_node": dict(by_node),  # Ray node id -> transitions its actors delivered
        "actors": [dict(actor) for actor in actors.table],  # rank, node_id, pid (the newest), restarts, transitions
    }
    # the final parameters played as the record's evaluate plays them (the jitted DQN's, on the actors' gymnax envs)
    evaluation = evaluate(config, state.params, config.seed) if evaluate_at_end else {}
    # updates and timesteps (transitions received) in all, a resumed run's earlier ones included
    return host.finish(learner_state(jax.device_get(state), buffer, key), updates=updates, steps=received,
                       compile_s=(first_data or started) - started, run_s=acting_seconds, extra=own,
                       evaluation=evaluation)
