"""Synchronous data-parallel DQN across processes.

Every device of every process runs the jitted DQN of ``labcore.agents.dqn.scan``: its own
gymnax envs, its own replay buffer, its own exploration key. Each update averages the gradients
over every device of the cluster (``lax.pmean`` inside ``jax.shard_map`` over the global mesh,
crossing processes through gloo on the CPU), so the parameters stay bit-for-bit identical
everywhere; this is checked with a fingerprint across processes every ``check_every`` chunks.
Only process 0 writes the run folder (``labcore.runs.RunDir``: config, metrics keyed by
"updates", the unit of the checkpoint steps, as JSONL, CSV and TensorBoard event files, summary, plot); the checkpoints are written by every
process together (orbax), numbered by update.

    # in each worker (``python -m labcore launch ... -- train dqn --env CartPole-v1`` does this)
    distributed.initialize()
    result = dqn_distributed.train(DQNConfig(env_id="CartPole-v1", total_steps=50_000), run_dir="runs/dp")

Time is counted per replica, as in the single-device DQN: ``total_steps`` agent steps on each
replica, so the cluster as a whole collects ``total_steps * replicas`` transitions and makes
``learn_iterations`` updates, each on ``batch_size`` samples per replica (an effective batch of
``batch_size * replicas``).

Seeds: replica r explores with ``fold_in(key(seed), r)``; the parameters start from ``key(seed)``
on every replica. The same command with the same number of replicas gives the same run.

**Replicas.** A replica is one copy of the DQN (envs, replay buffer, exploration key) taking part
in the averaged update. By default every device holds one; ``replicas_per_device=k`` puts k on
each device (``jax.vmap`` inside the device, the gradient mean over both the devices and the
vmapped axis), so that a cluster of 8 replicas can run on one device, or on 8 devices, or on 2
processes of 4: the same run. Replica r is device ``r // k``'s ``r % k``-th, whatever the cluster.
With one replica per device the parameters agree bit for bit across 1 process of 4 devices and 2
processes of 2 (``tests/test_distributed.py``); on one device the vmapped replicas' gradient mean
adds in another order, so the parameters agree to float rounding (measured there).
"""

from __future__ import annotations

import dataclasses
import os
import time
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import PartitionSpec as P

from labcore import checkpoint, distributed, runs
from labcore.agents.dqn import core as dqn
from labcore.agents.dqn import scan as dqn_scan

AXIS = distributed.AXIS
REPLICA_AXIS = "replicas"  # the vmapped replicas inside one device (replicas_per_device > 1)


class DistributedResult(NamedTuple):
    config: dqn.DQNConfig
    params: Any  # this process's copy (identical everywhere)
    metrics: list[dict[str, Any]]  # one row per chunk (every process computes the same rows)
    fingerprints: list[str]  # the parameters' fingerprint at every check
    wall_time: float
    summary: dict[str, Any]  # what process 0 writes to summary.json


def _replica_keys(seed: int, num_devices: int, per_device: int) -> np.ndarray:
    """[num_devices, per_device, key_data] the raw data of fold_in(key(seed), r) for every replica
    r = device * per_device + slot."""
    base = jax.random.key(seed)
    keys = [np.asarray(jax.random.key_data(jax.random.fold_in(base, r))) for r in range(num_devices * per_device)]
    return np.stack(keys).reshape(num_devices, per_device, -1)


def _replicas(tree: Any) -> list[Any]:
    """This process's copies of a tree whose leaves are stacked [device_count, per_device, ...]
    over the mesh, one per replica."""
    leaves, treedef = jax.tree_util.tree_flatten(tree)
    shards = [sorted(leaf.addressable_shards, key=lambda shard: shard.index[0].start) for leaf in leaves]
    per_device = np.shape(shards[0][0].data)[1]
    return [jax.tree_util.tree_unflatten(treedef, [np.asarray(s[i].data)[0, slot] for s in shards])
            for i in range(len(shards[0])) for slot in range(per_device)]


def _first_replica(tree: Any) -> Any:
    """The first replica this process holds of a tree stacked like ``_replicas``' (every replica
    holds the same learner; only this one is copied to the host)."""
    def first(leaf):
        shard = min(leaf.addressable_shards, key=lambda shard: shard.index[0].start)
        return np.asarray(shard.data[0, 0])

    return jax.tree_util.tree_map(first, tree)


def train(
    config: dqn.DQNConfig,
    run_dir: str | os.PathLike | None = None,
    chunk_iterations: int = 100,
    check_every: int = 1,
    checkpoint_every: int | None = None,
    resume: bool = False,
    log: Any = print,
    overwrite: bool = False,
    tensorboard: bool = True,
    replicas_per_device: int = 1,
) -> DistributedResult:
    """Train on every device of the (already initialised) cluster; see the module docstring.

    chunk_iterations: iterations (one update each) per compiled call; metrics are reported and
    the replicas compared between chunks. check_every: compare parameters across processes every
    this many chunks (counted from the start of the run, a resumed run's earlier chunks included;
    always at the end).
    resume: continue from the newest checkpoint in run_dir: the learner state (parameters,
    target, optimiser, update count and step) is restored exactly; the replay buffers, which stay
    on their devices and are not checkpointed, are refilled with ``learning_starts`` fresh steps
    before updates resume, so a resumed run is a close continuation, not a bit-for-bit replay.
    The metrics rows logged after the checkpoint are dropped; the refill's row is returned and
    printed but not written, so metrics.jsonl holds each chunk once, as an uninterrupted run's.
    overwrite: replace an earlier run in run_dir (without it, or resume, one is refused).
    tensorboard: also write the metrics as TensorBoard event files in run_dir (labcore.runs).
    replicas_per_device: DQN replicas on each device (see the module docstring).
    """
    if chunk_iterations < 1 or check_every < 1 or (checkpoint_every is not None and checkpoint_every < 1):
        raise ValueError(f"chunk_iterations, check_every and checkpoint_every must be >= 1, got "
                         f"{chunk_iterations}, {check_every}, {checkpoint_every}")
    if not isinstance(replicas_per_device, int) or replicas_per_device < 1:
        raise ValueError(f"replicas_per_device must be an integer >= 1, got {replicas_per_device!r}")
    per_device = replicas_per_device
    axes = AXIS if per_device == 1 else (AXIS, REPLICA_AXIS)  # what the update's gradient mean runs over
    parts = dqn_scan.make_parts(config, axis_name=axes)
    rank = jax.process_index()
    run = runs.RunDir.open(run_dir, config, step_key="updates", resume=resume, overwrite=overwrite, primary=rank == 0,
                           tensorboard=tensorboard)
    checkpoints = run.checkpoints
    mesh = distributed.global_mesh()
    num_devices = jax.device_count()
    replicas = num_devices * per_device

    def on_each_replica(fn, replicated_outputs: bool = False):
        """A shard_map body running ``fn`` on each replica of one device's [1, per_device, ...]
        slice. replicated_outputs: fn returns (per-replica tree, tree every replica holds alike, as
        psum'd metrics), and the second comes back once, not per replica."""

        def body(*stacked):
            local = jax.tree_util.tree_map(lambda x: x[0], stacked)  # [per_device, ...]
            if per_device == 1:  # no vmap of one: the program is the one-replica-per-device program
                outputs = jax.tree_util.tree_map(lambda x: x[None], fn(*jax.tree_util.tree_map(lambda x: x[0], local)))
            else:
                outputs = jax.vmap(fn, axis_name=REPLICA_AXIS)(*local)
            if not replicated_outputs:
                return jax.tree_util.tree_map(lambda x: x[None], outputs)
            mine, alike = outputs
            return jax.tree_util.tree_map(lambda x: x[None], mine), jax.tree_util.tree_map(lambda x: x[0], alike)

        return body

    def init_one(key_data):
        reset_key, loop_key = jax.random.split(jax.random.wrap_key_data(key_data))
        return parts.init(jax.random.key(config.seed), reset_key, loop_key)  # same parameters everywhere

    # check_vma=False: the carry's leaves differ per device, but the parameters inside are kept
    # equal by the pmean'd update; the metrics below are psum'd / pmean'd and so replicated.
    init_all = jax.jit(jax.shard_map(on_each_replica(init_one), mesh=mesh, in_specs=P(AXIS), out_specs=P(AXIS),
                                     check_vma=False))

    def make_chunk(num_iterations: int, learn: bool):
        def one_replica(carry):
            carry, metrics = parts.iterate(carry, num_iterations, learn)
            summed = {k: jax.lax.psum(metrics[k], axes) for k in ("episodes", "episode_return_sum")}
            return carry, {**metrics, **summed, "loss": jax.lax.pmean(metrics["loss"], axes)}

        mapped = jax.shard_map(on_each_replica(one_replica, replicated_outputs=True), mesh=mesh, in_specs=P(AXIS),
                               out_specs=(P(AXIS), P()), check_vma=False)
        return jax.jit(mapped, donate_argnums=0)

    def every_replica(value) -> Any:
        """A global array [num_devices, per_device, ...] holding ``value`` for every replica."""
        value = np.asarray(value)
        return distributed.global_array(np.broadcast_to(value, (num_devices, per_device, *value.shape)), mesh, P(AXIS))

    keys = distributed.global_array(_replica_keys(config.seed, num_devices, per_device), mesh, P(AXIS))
    carry = init_all(keys)
    done_updates, resumed_step, seconds_before = 0, None, 0.0
    if resume:  # RunDir.open has checked the checkpoint's config
        like = {"train_state": _first_replica(carry.train_state), "step": np.int32(0)}
        learner, metadata = run.restore(like).restored
        stacked = jax.tree_util.tree_map(every_replica, learner["train_state"])
        done_updates, resumed_step = int(metadata["updates"]), int(learner["step"])
        seconds_before = float(metadata.get("seconds", 0.0))
        # the refill explores at the epsilon where the run stopped
        carry = carry._replace(train_state=stacked, step=every_replica(np.int32(resumed_step)))
    started = time.perf_counter()
    rows: list[dict[str, Any]] = []
    fingerprints: list[str] = []
    schedule = [(parts.warmup_iterations, False)]  # also the refill of a resumed run
    remaining = parts.learn_iterations - done_updates
    while remaining > 0:
        schedule.append((min(chunk_iterations, remaining), True))
        remaining -= schedule[-1][0]
    chunks: dict[tuple[int, bool], Any] = {}
    updates = done_updates
    chunks_before = -(-done_updates // chunk_iterations)  # learning chunks a resumed run has done
    for index, (num_iterations, learn) in enumerate(schedule):
        if (num_iterations, learn) not in chunks:
            chunks[num_iterations, learn] = make_chunk(num_iterations, learn)
        carry, metrics = chunks[num_iterations, learn](carry)
        if not learn and resumed_step is not None:  # refilled: continue the step count where it stopped
            carry = carry._replace(step=every_replica(np.int32(resumed_step)))
        metrics = {k: np.asarray(v) for k, v in metrics.items()}
        updates += num_iterations if learn else 0
        episodes = int(metrics["episodes"].sum())
        row = {
            "step": (resumed_step if not learn and resumed_step is not None else int(metrics["step"][-1])) * replicas,
            "updates": updates,
            "episodes": episodes,
            "episode_return": float(metrics["episode_return_sum"].sum() / episodes) if episodes else None,
            "loss": float(metrics["loss"][-1]) if learn else None,
            "epsilon": float(metrics["epsilon"][-1]),
            "seconds": seconds_before + time.perf_counter() - started,  # a resumed run's clock goes on
        }
        if learn and index % check_every == 0:
            copies = _replicas(carry.train_state.params)
            local = {distributed.fingerprint(copy) for copy in copies}
            if len(local) != 1:
                raise AssertionError(f"process {rank}: its {len(copies)} replicas hold different parameters")
            row["fingerprint"] = distributed.assert_same_on_every_process(copies[0])
            fingerprints.append(row["fingerprint"])
        refill = not learn and resumed_step is not None
        rows.append(row if refill else run.log(row))
        if log is not None and rank == 0:
            log(f"updates {row['updates']:>6}  steps {row['step']:>8}  return {row['episode_return'] or float('nan'):7.1f}  "
                f"loss {row['loss'] if row['loss'] is not None else float('nan'):.4f}  {row.get('fingerprint', '')}")
        last = index == len(schedule) - 1
        if checkpoints is not None and learn and (last or (checkpoint_every and (chunks_before + index) % checkpoint_every == 0)):
            _save(checkpoints, config, carry, updates, num_devices, per_device, row["seconds"])
    params = _first_replica(carry.train_state.params)
    wall_time = time.perf_counter() - started
    last_row = rows[-1]
    summary = {"devices": num_devices, "processes": jax.process_count(), "replicas": replicas, "updates": last_row["updates"],
               "steps": last_row["step"], "wall_time_s": round(wall_time, 1),
               "final_episode_return": last_row["episode_return"],
               "params_fingerprint": fingerprints[-1] if fingerprints else None}
    run.finish(summary, _plot)
    return DistributedResult(config, params, rows, fingerprints, wall_time, summary)


def _plot(rows: list[dict[str, Any]]):
    from labcore.logging import plot_metrics

    return plot_metrics(rows, ("episode_return", "loss", "epsilon"), x_key="updates",
                        title=f"Data-parallel DQN, {jax.device_count()} devices in {jax.process_count()} processes")


def _save(directory, config: dqn.DQNConfig, carry: Any, updates: int, num_devices: int, per_device: int,
          seconds: float) -> None:
    """Every process calls this (orbax coordinates them; the primary process writes the files)."""
    learner = {"train_state": _first_replica(carry.train_state), "step": np.int32(_first_replica(carry.step))}
    metadata = {"config": dataclasses.asdict(config), "updates": updates, "devices": num_devices,
                "replicas": num_devices * per_device, "processes": jax.process_count(), "seconds": seconds}
    checkpoint.save(directory, updates, learner, metadata)


def load_checkpoint(path: str | os.PathLike, step: int | None = None) -> tuple[dqn.DQNConfig, dict[str, Any]]:
    """(config, learner) of a data-parallel run from its folder or checkpoints/ folder (default: the
    newest step): learner is {"train_state": the parameters, target, optimiser and counts every
    replica holds, "step": agent steps per replica}; the replay buffers are not checkpointed."""
    from labcore import loop
    from labcore.agents.dqn.agent import make_dqn_for

    directory = runs.checkpoint_dir(path)
    config = loop.config_from_dict(dqn.DQNConfig, checkpoint.restore_metadata(directory, step)["config"])
    like = {"train_state": make_dqn_for(config).init(jax.random.key(0)), "step": np.int32(0)}
    learner, _ = checkpoint.restore(directory, like, step)
    return config, learner
