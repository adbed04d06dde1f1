"""Synchronous data-parallel DQN across processes, run by ``labcore.loop``.

Every replica runs the jitted DQN of ``labcore.agents.dqn.scan``: its own gymnax envs, its own
replay buffer, its own exploration key. Each update averages the gradients over every replica of
the cluster (``lax.pmean`` inside ``jax.shard_map`` over the global mesh, crossing processes
through gloo on the CPU), so the parameters stay bit-for-bit identical everywhere; this is checked
with a fingerprint across processes after every chunk (``Program.check``), before its checkpoint.

    # in each worker (``python -m labcore launch ... -- train dqn-data-parallel --env CartPole-v1`` does this)
    distributed.initialize()
    result = multi_process.train(DQNConfig(env_id="CartPole-v1", total_steps=50_000), run_dir="runs/dp",
                                 checkpoint_every=500)

``make_program`` makes it a ``labcore.loop.Program`` whose state is the global carry of every
replica (leaves [devices, replicas_per_device, ...], sharded over the mesh), so ``labcore.loop``
runs it like any other: one folder written by process 0 (config, metrics keyed by "update",
TensorBoard, summary, plot), checkpoints of the whole state written by every process together
(orbax: the learner and every replica's envs, replay buffer and key), and an exact resume (the
same parameters as a run that was not stopped, bit for bit). ``log_every`` and
``checkpoint_every`` count updates.

Time is counted per replica, as in the single-device DQN: ``total_steps`` agent steps on each
replica, so the cluster as a whole collects ``total_steps * replicas`` transitions ("timesteps" in
the rows) and makes ``total_steps // train_frequency`` updates (the first ones, the replay warm-up,
without a gradient step), each on ``batch_size`` samples per replica (an effective batch of
``batch_size * replicas``).

Seeds: replica r explores with ``fold_in(key(seed), r)``; the parameters start from ``key(seed)``
on every replica. The same command with the same number of replicas gives the same run.

**Replicas.** A replica is one copy of the DQN (envs, replay buffer, exploration key) taking part
in the averaged update. By default every device holds one; ``replicas_per_device=k`` puts k on
each device (``jax.vmap`` inside the device, the gradient mean over both the devices and the
vmapped axis), so that a cluster of 8 replicas can run on one device, or on 8 devices, or on 2
processes of 4, with the same data and the same updates. Replica r is device ``r // k``'s ``r % k``-th, whatever the cluster.
With one replica per device the parameters agree bit for bit across 1 process of 4 devices and 2
processes of 2 (``tests/test_distributed.py``); on one device the vmapped replicas' gradient mean
adds in another order, so the parameters agree to float rounding (measured there). A checkpoint
resumes on the layout that wrote it (the same devices and replicas per device; another is refused
by name).
"""

from __future__ import annotations

import functools
import os
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import PartitionSpec as P

from labcore import checkpoint, distributed, loop, training_run
from labcore.agents.dqn import core as dqn
from labcore.agents.dqn import scan as dqn_scan
from labcore.agents.dqn.scan import evaluate  # noqa: F401 (this driver's: the jitted DQN's, the same network)
from labcore.agents.dqn.config import DATA_PARALLEL
from labcore.agents.dqn.config import DATA_PARALLEL_NAME as ALGORITHM  # the registry name its checkpoints record


AXIS = distributed.AXIS
REPLICA_AXIS = "replicas"  # the vmapped replicas inside one device (replicas_per_device > 1)


def _replica_keys(key: jax.Array, num_devices: int, per_device: int) -> np.ndarray:
    """[num_devices, per_device, key_data] the raw data of fold_in(key, r) for every replica
    r = device * per_device + slot."""
    keys = [np.asarray(jax.random.key_data(jax.random.fold_in(key, r))) for r in range(num_devices * per_device)]
    return np.stack(keys).reshape(num_devices, per_device, -1)


def _replicas(tree: Any) -> list[Any]:
    """This process's copies of a tree whose leaves are stacked [device_count, per_device, ...]
    over the mesh, one per replica."""
    leaves, treedef = jax.tree_util.tree_flatten(tree)
    shards = [sorted(leaf.addressable_shards, key=lambda shard: shard.index[0].start) for leaf in leaves]
    per_device = np.shape(shards[0][0].data)[1]
    return [jax.tree_util.tree_unflatten(treedef, [np.asarray(s[i].data)[0, slot] for s in shards])
            for i in range(len(shards[0])) for slot in range(per_device)]


def first_replica(tree: Any) -> Any:
    """The first replica this process holds of a tree stacked like ``_replicas``' (every replica
    holds the same learner; only this one is copied to the host)."""
    def first(leaf):
        shard = min(leaf.addressable_shards, key=lambda shard: shard.index[0].start or 0)
        return np.asarray(shard.data[0, 0]) if not _is_key(leaf) else shard.data[0, 0]

    return jax.tree_util.tree_map(first, tree)


def _is_key(leaf: Any) -> bool:
    return jax.dtypes.issubdtype(leaf.dtype, jax.dtypes.prng_key)


PLOTTED = ("episode_return", "epsilon", "loss")


def make_program(config: dqn.DQNConfig, callback=None, log_every: int = 1, *,
                 replicas_per_device: int = DATA_PARALLEL.replicas_per_device) -> loop.Program:
    """The data-parallel DQN on every device of the (already initialised) cluster, as a
    ``labcore.loop.Program`` (see the module docstring). An update is one iteration of every
    replica (``train_frequency`` agent steps each, then one averaged gradient step once the replay
    warm-up is over). Its rows are logged after each chunk (``streams_metrics=False``: a host
    callback inside ``shard_map`` would fire on every device), so ``callback`` is not used.

    Rows: "timesteps" (agent steps of all replicas), "episodes" (ended in the update, all
    replicas), "episode_return" (the mean return of the last ``scan.RECENT_EPISODES`` episodes to
    end on each replica, over all of them; NaN before the first), "loss" (the mean over replicas;
    0 during the warm-up), "epsilon".
    """
    if not isinstance(replicas_per_device, int) or replicas_per_device < 1:
        raise ValueError(f"replicas_per_device must be an integer >= 1, got {replicas_per_device!r}")
    per_device = replicas_per_device
    axes = AXIS if per_device == 1 else (AXIS, REPLICA_AXIS)  # what the update's gradient mean runs over
    parts = dqn_scan.make_parts(config, axis_name=axes)
    mesh = distributed.global_mesh()
    num_devices = jax.device_count()
    replicas = num_devices * per_device
    learning_starts_at = parts.warmup_iterations * config.train_frequency  # agent steps per replica

    def each_replica(fn):
        """fn over the replicas of one device (leaves [per_device, ...]): vmapped over the replica
        axis, or called on the one replica as it is (no vmap of one: the program is then the
        one-replica-per-device program)."""
        if per_device > 1:
            return jax.vmap(fn, axis_name=REPLICA_AXIS)

        def one(*trees):
            outputs = fn(*jax.tree_util.tree_map(lambda x: x[0], trees))
            return jax.tree_util.tree_map(lambda x: x[None], outputs)

        return one

    def on_device(fn):
        """A shard_map body: fn on one device's [per_device, ...] slice of the [1, per_device, ...] block."""
        def body(*blocks):
            outputs = fn(*jax.tree_util.tree_map(lambda x: x[0], blocks))
            return jax.tree_util.tree_map(lambda x: x[None], outputs)

        return body

    def init_replica(replica_key_data, params_key_data):
        reset_key, loop_key = jax.random.split(jax.random.wrap_key_data(replica_key_data))
        return parts.init(jax.random.wrap_key_data(params_key_data), reset_key, loop_key)  # same parameters everywhere

    # check_vma=False: the carry's leaves differ per device, but the parameters inside are kept
    # equal by the pmean'd update; the metrics below are psum'd / pmean'd and so replicated.
    init_all = jax.jit(jax.shard_map(on_device(each_replica(init_replica)), mesh=mesh, in_specs=(P(AXIS), P(AXIS)),
                                     out_specs=P(AXIS), check_vma=False))

    def every_replica(value) -> Any:
        """A global array [num_devices, per_device, ...] holding ``value`` for every replica."""
        value = np.asarray(value)
        return distributed.global_array(np.broadcast_to(value, (num_devices, per_device, *value.shape)), mesh, P(AXIS))

    def init(key: jax.Array) -> Any:
        replica_keys = distributed.global_array(_replica_keys(key, num_devices, per_device), mesh, P(AXIS))
        return init_all(replica_keys, every_replica(jax.random.key_data(key)))

    def replica_iteration(learn: bool):
        def one_replica(carry):
            carry, metrics = parts.iterate(carry, 1, learn)
            metrics = jax.tree_util.tree_map(lambda x: x[0], metrics)
            return carry, {**metrics, "episodes": jax.lax.psum(metrics["episodes"], axes),
                           "loss": jax.lax.pmean(metrics["loss"], axes)}

        return each_replica(one_replica)

    def device_iteration(carry):
        """One update of one device's replicas (leaves [per_device, ...]); they move together, so
        one cond on the first one's step (not a select computing both branches, as a vmapped cond
        would) skips the gradient step during the warm-up."""
        learning = carry.step[0] >= learning_starts_at
        carry, metrics = jax.lax.cond(learning, replica_iteration(True), replica_iteration(False), carry)
        metrics = jax.tree_util.tree_map(lambda x: x[0], metrics)  # summed over every replica: alike
        totals, counts = jax.vmap(dqn_scan.recent_returns)(carry)  # each replica's last episodes
        total, count = jax.lax.psum((jnp.sum(totals), jnp.sum(counts)), AXIS)
        mean_return = jnp.where(count > 0, total / jnp.maximum(count, 1), jnp.nan)
        return carry, {"timesteps": metrics["step"] * replicas, "episodes": metrics["episodes"],
                       "episode_return": mean_return, "loss": metrics["loss"], "epsilon": metrics["epsilon"]}

    def run_on_device(carry, num_updates: int):
        return jax.lax.scan(lambda c, _: device_iteration(c), carry, None, length=num_updates)

    def run(state: Any, num_updates: int) -> tuple[Any, loop.Metrics]:
        def body(blocks):
            local = jax.tree_util.tree_map(lambda x: x[0], blocks)
            carry, metrics = run_on_device(local, num_updates)
            return jax.tree_util.tree_map(lambda x: x[None], carry), metrics

        return jax.shard_map(body, mesh=mesh, in_specs=P(AXIS), out_specs=(P(AXIS), P()), check_vma=False)(state)

    def check(state: Any) -> dict[str, Any]:
        copies = _replicas(state.train_state.params)
        if len({distributed.fingerprint(copy) for copy in copies}) != 1:
            raise AssertionError(f"process {jax.process_index()}: its {len(copies)} replicas hold different parameters")
        return {"params_fingerprint": distributed.assert_same_on_every_process(copies[0])}

    def evaluate_state(state: Any, seed: int) -> dict[str, Any]:
        return dqn_scan.evaluation(config, parts.evaluate, first_replica(state.train_state.params), seed)

    return loop.Program(
        config=config,
        init=init,
        run=run,
        updates_done=lambda state: int(first_replica(state.step)) // config.train_frequency,
        num_updates=parts.warmup_iterations + parts.learn_iterations,
        steps_per_update=config.train_frequency * replicas,
        name=f"Data-parallel DQN on {config.env_id}, {replicas} replicas",
        plotted=PLOTTED,
        shown={"ret": "episode_return", "eps": "epsilon"},
        evaluate=evaluate_state,
        summarize=lambda rows: {"devices": num_devices, "processes": jax.process_count(), "replicas": replicas},
        streams_metrics=False,
        check=check,
        written_with={"devices": num_devices, "replicas_per_device": per_device},
        algorithm=ALGORITHM,
    )


def train(config: dqn.DQNConfig, run_dir: str | os.PathLike | None = None, *,
          replicas_per_device: int = DATA_PARALLEL.replicas_per_device,
          **options: Any) -> training_run.RunResult:
    """Train on every device of the (already initialised) cluster with ``labcore.loop.train`` (same
    keyword options, every count in updates; ``seeds`` is refused: one run per cluster). The
    result's ``state`` is the global carry (leaves [devices, replicas_per_device, ...]), as ``load_checkpoint``
    returns it; its ``summary`` holds "params_fingerprint", the parameters' hash every process agreed on."""
    return loop.train(config, functools.partial(make_program, replicas_per_device=replicas_per_device), run_dir,
                      **options)


def params(carry: Any) -> Any:
    """The learner's parameters, replica 0's (every replica holds the same), in a global carry of ``train`` or
    ``load_checkpoint`` (leaves [devices, replicas_per_device, ...])."""
    return first_replica(carry.train_state.params)


def load_checkpoint(path: str | os.PathLike, step: int | None = None) -> tuple[dqn.DQNConfig, Any]:
    """(config, carry) of a data-parallel run from its folder or checkpoints/ folder (default: the
    newest step), in one process whatever the cluster that wrote it: the global carry as ``train`` returns
    it (leaves [devices, replicas_per_device, ...]: every replica's envs, replay buffer and key, and the
    learner each holds), on this process's default device. ``first_replica`` takes replica 0's."""
    directory, metadata, config = checkpoint.open_run(path, ALGORITHM, dqn.DQNConfig, step)
    layout = (metadata["devices"], metadata["replicas_per_device"])
    one = dqn_scan.make_parts(config).init(*jax.random.split(jax.random.key(0), 3))  # real keys: see checkpoint
    like = jax.tree_util.tree_map(lambda leaf: jnp.broadcast_to(leaf, (*layout, *leaf.shape)), one)
    state, _ = checkpoint.restore(directory, like, step)
    return config, jax.tree_util.tree_map(jnp.asarray, state)
