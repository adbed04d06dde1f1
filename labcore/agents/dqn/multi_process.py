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

Time is counted per device, as in the single-device DQN: ``total_steps`` agent steps on each
device, so the cluster as a whole collects ``total_steps * device_count`` transitions and makes
``learn_iterations`` updates, each on ``batch_size`` samples per device (an effective batch of
``batch_size * device_count``).

Seeds: device d explores with ``fold_in(key(seed), d)``; the parameters start from ``key(seed)``
on every device. The same command with the same cluster shape gives the same run.
"""

from __future__ import annotations

import dataclasses
import os
import time
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from labcore import checkpoint, distributed, runs
from labcore.agents.dqn import core as dqn
from labcore.agents.dqn import scan as dqn_scan

AXIS = distributed.AXIS


class DistributedResult(NamedTuple):
    config: dqn.DQNConfig
    params: Any  # this process's copy (identical everywhere)
    metrics: list[dict[str, Any]]  # one row per chunk (every process computes the same rows)
    fingerprints: list[str]  # the parameters' fingerprint at every check
    wall_time: float
    summary: dict[str, Any]  # what process 0 writes to summary.json


def _device_keys(seed: int, num_devices: int) -> np.ndarray:
    """[num_devices, key_data] the raw data of fold_in(key(seed), d) for every global device d."""
    base = jax.random.key(seed)
    return np.stack([np.asarray(jax.random.key_data(jax.random.fold_in(base, d))) for d in range(num_devices)])


def _replicas(tree: Any) -> list[Any]:
    """This process's copies of a tree whose leaves are stacked [device_count, ...] over the mesh."""
    leaves, treedef = jax.tree_util.tree_flatten(tree)
    shards = [sorted(leaf.addressable_shards, key=lambda shard: shard.index[0].start) for leaf in leaves]
    return [jax.tree_util.tree_unflatten(treedef, [np.asarray(s[i].data)[0] for s in shards]) for i in range(len(shards[0]))]


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
    """
    if chunk_iterations < 1 or check_every < 1 or (checkpoint_every is not None and checkpoint_every < 1):
        raise ValueError(f"chunk_iterations, check_every and checkpoint_every must be >= 1, got "
                         f"{chunk_iterations}, {check_every}, {checkpoint_every}")
    parts = dqn_scan.make_parts(config, axis_name=AXIS)
    rank = jax.process_index()
    run = runs.RunDir.open(run_dir, config, step_key="updates", resume=resume, overwrite=overwrite, primary=rank == 0,
                           tensorboard=tensorboard)
    checkpoints = run.checkpoints
    mesh = distributed.global_mesh()
    num_devices = jax.device_count()
    spread = NamedSharding(mesh, P(AXIS))

    def per_device(fn):
        """Run fn on one device's slice of [num_devices, ...] stacked state."""

        def body(*stacked):
            outputs = fn(*jax.tree_util.tree_map(lambda x: x[0], stacked))
            return jax.tree_util.tree_map(lambda x: x[None], outputs)

        return body

    def init_one(key_data):
        reset_key, loop_key = jax.random.split(jax.random.wrap_key_data(key_data))
        return parts.init(jax.random.key(config.seed), reset_key, loop_key)  # same parameters everywhere

    # check_vma=False: the carry's leaves differ per device, but the parameters inside are kept
    # equal by the pmean'd update; the metrics below are psum'd / pmean'd and so replicated.
    init_all = jax.jit(jax.shard_map(per_device(init_one), mesh=mesh, in_specs=P(AXIS), out_specs=P(AXIS), check_vma=False))

    def make_chunk(num_iterations: int, learn: bool):
        def one_device(carry):
            carry, metrics = parts.iterate(carry, num_iterations, learn)
            summed = {k: jax.lax.psum(metrics[k], AXIS) for k in ("episodes", "episode_return_sum")}
            return carry, {**metrics, **summed, "loss": jax.lax.pmean(metrics["loss"], AXIS)}

        def body(stacked_carry):
            carry, metrics = one_device(jax.tree_util.tree_map(lambda x: x[0], stacked_carry))
            return jax.tree_util.tree_map(lambda x: x[None], carry), metrics

        mapped = jax.shard_map(body, mesh=mesh, in_specs=P(AXIS), out_specs=(P(AXIS), P()), check_vma=False)
        return jax.jit(mapped, donate_argnums=0)

    keys = distributed.global_array(_device_keys(config.seed, num_devices), mesh, P(AXIS))
    carry = init_all(keys)
    done_updates, resumed_step, seconds_before = 0, None, 0.0
    if resume:  # RunDir.open has checked the checkpoint's config
        like = {"train_state": _replicas(carry.train_state)[0], "step": np.int32(0)}
        learner, metadata = run.restore(like).restored
        stacked = jax.tree_util.tree_map(
            lambda leaf: distributed.global_array(np.broadcast_to(np.asarray(leaf)[None], (num_devices, *np.shape(leaf))), mesh, P(AXIS)),
            learner["train_state"],
        )
        done_updates, resumed_step = int(metadata["updates"]), int(learner["step"])
        seconds_before = float(metadata.get("seconds", 0.0))
        # the refill explores at the epsilon where the run stopped
        carry = carry._replace(train_state=stacked, step=distributed.global_array(np.full(num_devices, resumed_step, np.int32), mesh, P(AXIS)))
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
            carry = carry._replace(step=distributed.global_array(np.full(num_devices, resumed_step, np.int32), mesh, P(AXIS)))
        metrics = {k: np.asarray(v) for k, v in metrics.items()}
        updates += num_iterations if learn else 0
        episodes = int(metrics["episodes"].sum())
        row = {
            "step": (resumed_step if not learn and resumed_step is not None else int(metrics["step"][-1])) * num_devices,
            "updates": updates,
            "episodes": episodes,
            "episode_return": float(metrics["episode_return_sum"].sum() / episodes) if episodes else None,
            "loss": float(metrics["loss"][-1]) if learn else None,
            "epsilon": float(metrics["epsilon"][-1]),
            "seconds": seconds_before + time.perf_counter() - started,  # a resumed run's clock goes on
        }
        if learn and index % check_every == 0:
            replicas = _replicas(carry.train_state.params)
            local = {distributed.fingerprint(replica) for replica in replicas}
            if len(local) != 1:
                raise AssertionError(f"process {rank}: its {len(replicas)} devices hold different parameters")
            row["fingerprint"] = distributed.assert_same_on_every_process(replicas[0])
            fingerprints.append(row["fingerprint"])
        refill = not learn and resumed_step is not None
        rows.append(row if refill else run.log(row))
        if log is not None and rank == 0:
            log(f"updates {row['updates']:>6}  steps {row['step']:>8}  return {row['episode_return'] or float('nan'):7.1f}  "
                f"loss {row['loss'] if row['loss'] is not None else float('nan'):.4f}  {row.get('fingerprint', '')}")
        last = index == len(schedule) - 1
        if checkpoints is not None and learn and (last or (checkpoint_every and (chunks_before + index) % checkpoint_every == 0)):
            _save(checkpoints, config, carry, updates, num_devices, row["seconds"])
    params = _replicas(carry.train_state.params)[0]
    wall_time = time.perf_counter() - started
    last_row = rows[-1]
    summary = {"devices": num_devices, "processes": jax.process_count(), "updates": last_row["updates"],
               "steps": last_row["step"], "wall_time_s": round(wall_time, 1),
               "final_episode_return": last_row["episode_return"],
               "params_fingerprint": fingerprints[-1] if fingerprints else None}
    run.finish(summary, _plot)
    return DistributedResult(config, params, rows, fingerprints, wall_time, summary)


def _plot(rows: list[dict[str, Any]]):
    from labcore.logging import plot_metrics

    return plot_metrics(rows, ("episode_return", "loss", "epsilon"), x_key="updates",
                        title=f"Data-parallel DQN, {jax.device_count()} devices in {jax.process_count()} processes")


def _save(directory, config: dqn.DQNConfig, carry: Any, updates: int, num_devices: int, seconds: float) -> None:
    """Every process calls this (orbax coordinates them; the primary process writes the files)."""
    learner = {"train_state": _replicas(carry.train_state)[0], "step": np.int32(_replicas(carry.step)[0])}
    metadata = {"config": dataclasses.asdict(config), "updates": updates, "devices": num_devices,
                "processes": jax.process_count(), "seconds": seconds}
    checkpoint.save(directory, updates, learner, metadata)
