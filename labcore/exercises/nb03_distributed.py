"""Notebook 03 (distributed): multi-process bookkeeping, checked without a cluster."""

from __future__ import annotations

import numpy as np

from labcore.exercises.checking import Exercise, jnp_f32


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
