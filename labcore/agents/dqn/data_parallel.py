"""Data parallelism for the DQN update: one algorithm, three ways to spread it over devices.

Each replica holds the same parameters and gets an equal shard of the batch; the gradients
are averaged across replicas, so every replica applies the update a single device would
compute on the whole batch. ``labcore.agents.dqn.core.make_update(..., axis_name=AXIS)`` inserts the
``lax.pmean``; this module places the data and compiles the three forms:

- ``make_pmap_update``: ``jax.pmap``, the classic form. Inputs carry an explicit leading device
  axis: ``replicate(state, n)`` and ``shard_batch(batch, n)``. Works, but is in maintenance mode.
- ``make_shard_map_update``: ``jax.shard_map`` over a ``jax.make_mesh`` mesh: the same
  per-device program with explicit collectives, on ordinary (global) arrays placed with
  ``put_replicated`` / ``put_sharded``.
- ``make_sharded_jit_update``: plain ``jax.jit`` of the single-device update on arrays that carry
  a ``NamedSharding``; the compiler partitions it and inserts the all-reduce itself.

On a CPU, ``XLA_FLAGS=--xla_force_host_platform_device_count=8`` (set before jax is imported)
simulates 8 devices, so all of this runs and is tested without accelerators.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import haiku as hk
import jax
import jax.numpy as jnp
import optax
from jax.sharding import AxisType, Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from labcore.agents.dqn import core as dqn

AXIS = "devices"  # the one mesh / pmap axis name used throughout


def _device_list(num_devices: int | None, devices: Sequence[jax.Device] | None) -> list[jax.Device]:
    available = list(jax.devices() if devices is None else devices)
    count = len(available) if num_devices is None else num_devices
    if not 1 <= count <= len(available):
        raise ValueError(
            f"num_devices must be in [1, {len(available)}] (the devices available), got {count}; on a CPU set "
            "XLA_FLAGS=--xla_force_host_platform_device_count=8 before importing jax to simulate more"
        )
    return available[:count]


def replicate(tree: Any, num_devices: int) -> Any:
    """A copy of every leaf per device, stacked on a new leading axis: [n, ...] (pmap's input form)."""
    return jax.tree_util.tree_map(lambda leaf: jnp.broadcast_to(leaf, (num_devices, *jnp.shape(leaf))), tree)


def unreplicate(tree: Any) -> Any:
    """Device 0's copy of a replicated tree (the copies are identical after a pmean'd update)."""
    return jax.tree_util.tree_map(lambda leaf: leaf[0], tree)


def shard_batch(batch: Any, num_devices: int) -> Any:
    """Split each leaf's batch axis into [num_devices, B // num_devices, ...] (pmap's input form)."""

    def split(leaf):
        if leaf.shape[0] % num_devices:
            raise ValueError(f"batch size {leaf.shape[0]} must be divisible by the number of devices {num_devices}")
        return leaf.reshape(num_devices, leaf.shape[0] // num_devices, *leaf.shape[1:])

    return jax.tree_util.tree_map(split, batch)


def make_mesh(num_devices: int | None = None, devices: Sequence[jax.Device] | None = None) -> Mesh:
    """A 1-D mesh named ``AXIS`` over the first ``num_devices`` devices.

    The axis type is given explicitly (its default changed in jax 0.9): Explicit means each
    array's sharding is part of its type, so a mismatch fails at trace time instead of being
    resolved silently by the compiler.
    """
    chosen = _device_list(num_devices, devices)
    return jax.make_mesh((len(chosen),), (AXIS,), axis_types=(AxisType.Explicit,), devices=chosen)


def put_replicated(tree: Any, mesh: Mesh) -> Any:
    """Every leaf copied to every device of the mesh (PartitionSpec())."""
    return jax.device_put(tree, NamedSharding(mesh, P()))


def put_sharded(batch: Any, mesh: Mesh) -> Any:
    """Each leaf's leading (batch) axis split over the mesh axis (PartitionSpec(AXIS))."""
    return jax.device_put(batch, NamedSharding(mesh, P(AXIS)))


def device_key(key: jax.Array, axis_name: str = AXIS) -> jax.Array:
    """This replica's own PRNG key: ``fold_in(key, device index)``, inside pmap / shard_map.

    Replicas explore differently, and a rerun with the same key draws the same numbers on each.
    """
    return jax.random.fold_in(key, jax.lax.axis_index(axis_name))


Update = Callable[[dqn.TrainState, dqn.Transition], tuple[dqn.TrainState, dict[str, jax.Array]]]


def make_pmap_update(
    config: dqn.DQNConfig,
    network: hk.Transformed,
    optimizer: optax.GradientTransformation,
    num_devices: int | None = None,
    devices: Sequence[jax.Device] | None = None,
) -> Update:
    """``update(replicated_state, sharded_batch)`` with ``jax.pmap``; gradients pmean'd over AXIS.

    state leaves [n, ...] (``replicate``), batch leaves [n, B / n, ...] (``shard_batch``);
    returns the new state and metrics with the same leading device axis.
    """
    update = dqn.make_update(config, network, optimizer, axis_name=AXIS)
    return jax.pmap(update, axis_name=AXIS, devices=_device_list(num_devices, devices))


def make_shard_map_update(
    config: dqn.DQNConfig, network: hk.Transformed, optimizer: optax.GradientTransformation, mesh: Mesh
) -> Update:
    """``update(state, batch)`` with ``jax.shard_map`` over ``mesh``; gradients pmean'd over AXIS.

    state: replicated on the mesh (``put_replicated``); batch: [B, ...] split over AXIS
    (``put_sharded``). Inside, each device sees its [B / n, ...] shard; outputs are replicated.
    """
    update = dqn.make_update(config, network, optimizer, axis_name=AXIS)
    # check_vma=False: the per-device program sees plain per-device values, as under pmap, so the
    # explicit pmean of the gradients is the whole reduction. (With check_vma=True JAX tracks that
    # the parameters are identical on every device, and differentiating through that already sums
    # the gradients over devices: a pmean on top would give n times the mean.)
    sharded = jax.shard_map(update, mesh=mesh, in_specs=(P(), P(AXIS)), out_specs=(P(), P()), check_vma=False)
    return jax.jit(sharded)


def make_sharded_jit_update(
    config: dqn.DQNConfig, network: hk.Transformed, optimizer: optax.GradientTransformation, mesh: Mesh
) -> Update:
    """``update(state, batch)``: plain ``jax.jit`` of the single-device update, partitioned by the compiler.

    No collective is written: the batch's sharding (``put_sharded``) and the state's
    (``put_replicated``) tell XLA where the data is, and it inserts the gradient all-reduce.
    """
    del mesh  # the shardings travel with the arrays; kept in the signature to match the shard_map form
    return jax.jit(dqn.make_update(config, network, optimizer))
