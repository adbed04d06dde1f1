"""Notebook 03 (distributed): a data-parallel step on several devices, and multi-process bookkeeping."""

from __future__ import annotations

import numpy as np

from labcore.exercises.checking import Exercise, jnp_f32

PMEAN_AXIS = "devices"  # the axis name the pmean'd update exercise is run under


# Replicas the pmean'd step runs on. With one device a single replica's local gradient IS the whole
# batch's, so an answer without its pmean would pass; the checker then runs the replicas with
# jax.vmap under the same axis name instead (collectives mean the same there), 4 side by side.
REPLICAS_ON_ONE_DEVICE = 4


def _pmean_replicas() -> int:
    import jax

    return min(4, jax.device_count()) if jax.device_count() >= 2 else REPLICAS_ON_ONE_DEVICE


def _pmean_step_inputs(rng: np.random.Generator) -> tuple:
    features = int(rng.integers(2, 9))
    batch = _pmean_replicas() * int(rng.integers(2, 9))
    return (
        rng.normal(size=(features,)).astype(np.float32),
        rng.normal(size=(batch, features)).astype(np.float32),
        rng.normal(size=(batch,)).astype(np.float32),
        float(rng.uniform(0.01, 0.5)),
    )


def _mse_sgd_step(w, xs, ys, learning_rate):
    import jax
    import jax.numpy as jnp

    grad = jax.grad(lambda w: jnp.mean(0.5 * (xs @ w - ys) ** 2))(w)
    return w - learning_rate * grad


def _pmean_step_reference(w, xs, ys, learning_rate):
    """The single-device step on the whole batch, as every replica should return it: [n, D]."""
    import jax.numpy as jnp

    return jnp.broadcast_to(_mse_sgd_step(w, xs, ys, learning_rate), (_pmean_replicas(), *w.shape))


def _run_under_pmap(step):
    """Shard the batch over the replicas, run ``step`` with jax.pmap (jax.vmap on one device, see
    REPLICAS_ON_ONE_DEVICE), return every replica's weights."""
    import jax

    def run(w, xs, ys, learning_rate):
        n = _pmean_replicas()
        shard = lambda a: a.reshape(n, a.shape[0] // n, *a.shape[1:])  # noqa: E731
        one_replica = lambda w, x, y: step(w, x, y, learning_rate)  # noqa: E731
        if jax.device_count() >= 2:
            replicas = jax.pmap(one_replica, axis_name=PMEAN_AXIS, in_axes=(None, 0, 0), devices=jax.devices()[:n])
        else:
            replicas = jax.vmap(one_replica, axis_name=PMEAN_AXIS, in_axes=(None, 0, 0))
        return replicas(w, shard(xs), shard(ys))

    return run




def _device_keys_inputs(rng: np.random.Generator) -> tuple:
    # never process 0, where forgetting the process offset would go unnoticed
    processes = int(rng.integers(2, 6))
    return int(rng.integers(0, 2**31)), int(rng.integers(1, processes)), int(rng.integers(1, 5))


def _device_keys_reference(seed, process_index, local_device_count):
    import jax
    import jax.numpy as jnp

    base = jax.random.key(seed)
    first = process_index * local_device_count  # global index of this process's first device
    return jnp.stack([jax.random.key_data(jax.random.fold_in(base, first + d)) for d in range(local_device_count)])


def _process_rows_inputs(rng: np.random.Generator) -> tuple:
    processes = int(rng.integers(2, 9))
    return int(processes * rng.integers(1, 65)), int(rng.integers(0, processes)), processes


def _process_rows_reference(global_batch, process_index, process_count):
    import jax.numpy as jnp

    per_process = global_batch // process_count
    return jnp.arange(process_index * per_process, (process_index + 1) * per_process)


def _weighted_mean_inputs(rng: np.random.Generator) -> tuple:
    processes, dim = int(rng.integers(2, 6)), int(rng.integers(1, 9))
    counts = rng.integers(1, 100, size=processes).astype(np.float32)
    return jnp_f32(rng.normal(size=(processes, dim))), jnp_f32(counts)


def _weighted_mean_reference(shard_means, counts):
    return (shard_means * counts[:, None]).sum(0) / counts.sum()


def catalogue() -> list[Exercise]:
    """This notebook's exercises, in the order the notebook checks them."""
    return [
        Exercise(
            name="pmean_update",
            description=f"One data-parallel SGD step step(w, xs, ys, lr) on this device's shard, run under jax.pmap "
            f"with axis_name='{PMEAN_AXIS}'.\n"
            "grad = jax.grad(lambda w: jnp.mean(0.5 * (xs @ w - ys) ** 2))(w) is this shard's gradient; average it "
            f"over devices with jax.lax.pmean(grad, '{PMEAN_AXIS}') before returning w - lr * grad, so every replica "
            "takes the step a single device would take on the whole batch.",
            reference=_pmean_step_reference,
            make_inputs=_pmean_step_inputs,
            run_with=_run_under_pmap,
        ),
        Exercise(
            name="device_keys",
            description="The raw PRNG key data of every LOCAL device of one process: (seed, process_index, "
            "local_device_count) -> uint32 [local_device_count, 2].\n"
            "Global device index = process_index * local_device_count + d; device d's key is "
            "jax.random.fold_in(jax.random.key(seed), global_index); return jax.random.key_data of each, stacked. "
            "Every process derives its keys from the one seed, so the same command twice gives the same run, and "
            "no two devices share a stream.",
            reference=_device_keys_reference,
            make_inputs=_device_keys_inputs,
            rtol=0.0,
            atol=0.0,
        ),
        Exercise(
            name="process_rows",
            description="Which rows of a global batch this process feeds: (global_batch, process_index, "
            "process_count) -> int [global_batch / process_count] row indices.\n"
            "Contiguous blocks in process order: process p owns rows p * n ... (p + 1) * n - 1 with "
            "n = global_batch // process_count (jnp.arange). This is the layout jax.make_array_from_process_local_data "
            "expects for a batch sharded over a 1-D mesh ordered by process.",
            reference=_process_rows_reference,
            make_inputs=_process_rows_inputs,
            rtol=0.0,
            atol=0.0,
        ),
        Exercise(
            name="weighted_gradient_mean",
            description="The global mean gradient from per-process mean gradients over UNEQUAL shards: "
            "shard_means [P, D], counts [P] (examples per process) -> [D].\n"
            "A plain mean of the P shard means (what pmean of the means gives) overweights small shards; weight "
            "each by its count: sum_p counts[p] * shard_means[p] / sum_p counts[p] (in a real run: psum of "
            "counts * mean and psum of counts).",
            reference=_weighted_mean_reference,
            make_inputs=_weighted_mean_inputs,
            jit=True,
        ),
    ]
