"""Notebook 04 (many devices in one process): one global batch from per-device blocks
(``global_batch_array``), then the data-parallel step under ``jax.shard_map``, first a small regression
(``shard_map_pmean``, a warm-up), then DQN's own update (``data_parallel_dqn_update``).

On one device a collective changes nothing and a whole batch on one device is trivially "sharded", so a
wrong answer would pass; these checkers build a mesh of at least 2 CPU devices (``meshes``) and, where this
process has fewer, refuse: the check fails with the reason and the fix instead of passing.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from labcore.course.exercises.checking import Exercise
from labcore.course.lessons.nb04_many_devices.meshes import PMEAN_AXIS, draw_mesh, refuse_small

# ----------------------------------------------------------------------------------------------
# global_batch_array: one global jax.Array from the blocks each device holds.


def _global_batch_inputs(rng: np.random.Generator) -> tuple:
    mesh = draw_mesh(rng, shuffled=True)
    rows, features = int(rng.integers(1, 5)), int(rng.integers(1, 6))
    blocks = [rng.normal(size=(rows, features)).astype(np.float32) for _ in range(mesh.size)]
    return blocks, mesh


def _global_batch_expected(blocks, mesh):
    """The global batch (the blocks in mesh order) and, for each device of the mesh in order, the
    rows it holds: its own block and nothing else."""
    return {"values": np.concatenate(blocks), "rows_on_each_mesh_device": list(blocks)}


def _placement(array, mesh) -> dict:
    """What the checker compares for the learner's array: its values, and the rows each device of
    the mesh holds (none: an empty block)."""
    if not isinstance(array, jax.Array):
        raise TypeError(f"the answer must be a jax.Array placed on the mesh's devices, not a {type(array).__module__}.{type(array).__name__}")
    held = {shard.device: np.asarray(shard.data) for shard in array.addressable_shards}
    nothing = np.zeros((0, *array.shape[1:]), array.dtype)
    return {"values": np.asarray(array), "rows_on_each_mesh_device": [held.get(device, nothing) for device in mesh.devices.flat]}


def _run_and_locate(build):
    def run(blocks, mesh):
        refuse_small(mesh)
        return _placement(build(blocks, mesh), mesh)

    return run


def global_batch_array_solution(blocks, mesh):
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    # Block i belongs on the mesh's i-th device (mesh.devices, not jax.devices(): the orders differ).
    on_devices = [jax.device_put(block, device) for block, device in zip(blocks, mesh.devices.flat, strict=True)]
    global_shape = (sum(block.shape[0] for block in blocks), *blocks[0].shape[1:])
    return jax.make_array_from_single_device_arrays(global_shape, NamedSharding(mesh, P("devices")), on_devices)


def global_batch_array_concatenated(blocks, mesh):
    return jnp.concatenate([jnp.asarray(block) for block in blocks])  # the right values, all on one device


def global_batch_array_replicated(blocks, mesh):
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    return jax.device_put(np.concatenate(blocks), NamedSharding(mesh, P()))  # every device holds everything


def global_batch_array_in_device_order(blocks, mesh):
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    on_devices = [jax.device_put(block, device) for block, device in zip(blocks, jax.devices("cpu"))]
    global_shape = (sum(block.shape[0] for block in blocks), *blocks[0].shape[1:])
    return jax.make_array_from_single_device_arrays(global_shape, NamedSharding(mesh, P("devices")), on_devices)


# ----------------------------------------------------------------------------------------------
# shard_map_pmean: the data-parallel SGD step, run on every device of a mesh.


def _sgd_step_inputs(rng: np.random.Generator) -> tuple:
    mesh = draw_mesh(rng)
    features, rows_per_device = int(rng.integers(2, 9)), int(rng.integers(2, 9))
    batch = mesh.size * rows_per_device
    return (
        rng.normal(size=(features,)).astype(np.float32),
        rng.normal(size=(batch, features)).astype(np.float32),
        rng.normal(size=(batch,)).astype(np.float32),
        float(rng.uniform(0.01, 0.5)),
        mesh,
    )


def _sgd_step_on_every_replica(w, xs, ys, learning_rate, mesh):
    """The single-device step on the whole batch, as every replica should return it: [devices, D]."""
    grad = jax.grad(lambda w: jnp.mean(0.5 * (xs @ w - ys) ** 2))(w)
    return jnp.broadcast_to(w - learning_rate * grad, (mesh.size, *w.shape))


def _run_under_shard_map(step):
    """Run ``step(w, xs, ys, lr)`` as the per-device program of jax.shard_map over the mesh: w
    replicated, the batch split along PMEAN_AXIS; return every replica's weights, stacked."""
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    def run(w, xs, ys, learning_rate, mesh):
        refuse_small(mesh)

        def per_device(w, x, y):
            return jnp.asarray(step(w, x, y, learning_rate))[None]  # [1, D] here, [devices, D] outside

        # check_vma=False, as labcore.agents.dqn.data_parallel.make_shard_map_update: each device's
        # program sees plain per-device values, so the learner's collective is the whole reduction.
        sharded = jax.jit(jax.shard_map(per_device, mesh=mesh, in_specs=(P(), P(PMEAN_AXIS), P(PMEAN_AXIS)),
                                        out_specs=P(PMEAN_AXIS), check_vma=False))
        put = lambda value, spec: jax.device_put(value, NamedSharding(mesh, spec))  # noqa: E731
        return sharded(put(w, P()), put(xs, P(PMEAN_AXIS)), put(ys, P(PMEAN_AXIS)))

    return run


def shard_map_pmean_solution(w, xs, ys, learning_rate):
    # This device's shard: xs [B / n, D], ys [B / n]. The gradient of the mean squared error over
    # the shard, written out, then averaged over the devices so every replica takes the same step.
    residual = xs @ w - ys
    local_grad = xs.T @ residual / xs.shape[0]
    grad = jax.lax.pmean(local_grad, axis_name="devices")
    return w - learning_rate * grad


def shard_map_pmean_without_pmean(w, xs, ys, learning_rate):
    grad = jax.grad(lambda w: jnp.mean(0.5 * (xs @ w - ys) ** 2))(w)
    return w - learning_rate * grad  # each replica steps on its own shard: the replicas drift apart


def shard_map_pmean_psum(w, xs, ys, learning_rate):
    grad = jax.grad(lambda w: jnp.mean(0.5 * (xs @ w - ys) ** 2))(w)
    return w - learning_rate * jax.lax.psum(grad, "devices")  # the sum of n means: n times the step


def shard_map_pmean_summed_loss(w, xs, ys, learning_rate):
    grad = jax.grad(lambda w: jnp.sum(0.5 * (xs @ w - ys) ** 2))(w)  # summed over the shard's rows
    return w - learning_rate * jax.lax.pmean(grad, "devices")


def catalogue() -> list[Exercise]:
    """This notebook's exercises, in the order the notebook checks them."""
    from labcore.course.lessons.nb04_many_devices import data_parallel_dqn

    return [
        Exercise(
            name="global_batch_array",
            description="One global batch from per-device blocks: (blocks, mesh) -> a jax.Array [n * b, ...] whose "
            f"i-th block of rows lives on the mesh's i-th device, sharded along the mesh axis '{PMEAN_AXIS}'. blocks "
            "is a list of n NumPy arrays [b, ...]; mesh a 1-D jax.sharding.Mesh of n devices.\n"
            "Put each block on its device (jax.device_put(block, device), the devices in mesh.devices order, which "
            "need not be jax.devices('cpu') order), then join them with jax.make_array_from_single_device_arrays(global "
            f"shape, NamedSharding(mesh, PartitionSpec('{PMEAN_AXIS}')), arrays). This is what "
            "jax.make_array_from_process_local_data does in each process of a multi-process run, where a process "
            "holds only its own devices' blocks. The checker compares the values and the rows each device holds.",
            reference=_global_batch_expected,
            make_inputs=_global_batch_inputs,
            rtol=0.0,
            atol=0.0,
            run_with=_run_and_locate,
            solution=global_batch_array_solution,
            mistakes=(
                ("jnp.concatenate: the right values, but the whole batch on one device", global_batch_array_concatenated),
                ("NamedSharding(mesh, PartitionSpec()): replicated, every device holds the whole batch",
                 global_batch_array_replicated),
                ("blocks placed on jax.devices(\"cpu\") in order instead of on mesh.devices: rows land on the wrong devices "
                 "and come back out of order", global_batch_array_in_device_order),
            ),
        ),
        Exercise(
            name="shard_map_pmean",
            description="One data-parallel SGD step step(w, xs, ys, lr) -> new w, the program each device of a mesh "
            f"runs under jax.shard_map (mesh axis '{PMEAN_AXIS}'): w [D] replicated, xs [B / n, D] and ys [B / n] "
            "this device's shard of the batch.\n"
            "Compute this shard's gradient of the mean squared error jnp.mean(0.5 * (xs @ w - ys) ** 2), average it "
            f"over the devices with jax.lax.pmean(grad, '{PMEAN_AXIS}'), and return w - lr * grad: every replica then "
            "takes the step one device would take on the whole batch. The mean of equal shards' means is the whole "
            "batch's mean; psum would give n times it.",
            reference=_sgd_step_on_every_replica,
            make_inputs=_sgd_step_inputs,
            run_with=_run_under_shard_map,
            solution=shard_map_pmean_solution,
            mistakes=(
                ("no pmean: each device steps on its own shard's gradient, and the replicas drift apart",
                 shard_map_pmean_without_pmean),
                ("psum instead of pmean: the sum of the devices' mean gradients, a step n times too large",
                 shard_map_pmean_psum),
                ("the shard's loss summed over its rows instead of averaged: a step B / n times too large",
                 shard_map_pmean_summed_loss),
            ),
        ),
        Exercise(
            name="data_parallel_dqn_update",
            description="The data-parallel DQN gradient step each device runs under jax.shard_map (mesh axis "
            f"'{PMEAN_AXIS}'): (params, target_params, opt_state, batch, loss_fn, optimizer) -> (params, opt_state, "
            "loss), with params, target_params and opt_state replicated and batch (a dqn.Transition) this device's "
            "shard.\n"
            "loss_fn(params, target_params, batch) is DQN's TD loss, a mean over the shard's rows; take "
            "jax.value_and_grad of it with respect to params, average the gradient AND the loss over the devices "
            f"with jax.lax.pmean(..., '{PMEAN_AXIS}'), then updates, opt_state = optimizer.update(grads, opt_state, "
            "params) and params = optax.apply_updates(params, updates). Every replica must end with what one "
            "device computes on the whole batch (labcore.agents.dqn.core.make_update with axis_name does this). "
            "The optimizer is Adam: averaging the parameters after each device's own step is not the same.",
            reference=data_parallel_dqn.reference,
            make_inputs=data_parallel_dqn.inputs,
            run_with=data_parallel_dqn.run_on_every_device,
            trials=3,
            rtol=1e-5,
            atol=1e-6,
            solution=data_parallel_dqn.solution,
            mistakes=data_parallel_dqn.MISTAKES,
            core=True,
        ),
    ]
