"""Notebook 05 (many processes): the bookkeeping of a multi-process run: per-device keys, the rows each
process feeds, and a gradient mean over unequal shards.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from labcore.course.exercises import behaviour
from labcore.course.exercises.checking import Exercise, jnp_f32

# ----------------------------------------------------------------------------------------------
# A multi-process run's bookkeeping.


def _device_keys_inputs(rng: np.random.Generator) -> tuple:
    # never process 0, where forgetting the process offset would go unnoticed
    processes = int(rng.integers(2, 6))
    return int(rng.integers(0, 2**31)), int(rng.integers(1, processes)), int(rng.integers(1, 5))


def _device_keys_reference(seed, process_index, local_device_count):
    base = jax.random.key(seed)
    first = process_index * local_device_count  # global index of this process's first device
    return jnp.stack([jax.random.key_data(jax.random.fold_in(base, first + d)) for d in range(local_device_count)])


def device_keys_solution(seed, process_index, local_device_count):
    global_indices = process_index * local_device_count + jnp.arange(local_device_count)
    keys = jax.vmap(lambda index: jax.random.fold_in(jax.random.key(seed), index))(global_indices)
    return jax.random.key_data(keys)


def device_keys_local_index(seed, process_index, local_device_count):
    keys = jax.vmap(lambda d: jax.random.fold_in(jax.random.key(seed), d))(jnp.arange(local_device_count))
    return jax.random.key_data(keys)  # every process repeats process 0's streams


def device_keys_process_index(seed, process_index, local_device_count):
    key = jax.random.key_data(jax.random.fold_in(jax.random.key(seed), process_index))
    return jnp.stack([key] * local_device_count)  # the process's devices all share one stream


def device_keys_one_for_all(seed, process_index, local_device_count):
    key = jax.random.key_data(jax.random.key(seed))
    return jnp.stack([key] * local_device_count)  # every device of every process: one stream


def judge_device_keys(device_keys, rng: np.random.Generator) -> str | None:
    """Any derivation from the seed passes (fold_in of the global index, a split, a hash): each
    process's keys of the right shape, no two devices of the whole run sharing a key, the same seed
    giving the same keys and another seed other keys."""
    processes, local_device_count = int(rng.integers(2, 6)), int(rng.integers(1, 5))
    seed = int(rng.integers(0, 2**31))
    expected = _device_keys_reference(seed, 0, local_device_count)

    def keys_of_every_process(seed):
        return [np.asarray(device_keys(seed, process, local_device_count)) for process in range(processes)]

    run = keys_of_every_process(seed)
    for process, keys in enumerate(run):
        problem = behaviour.shape_problem(keys, expected.shape, "u", f"process {process}'s key data")
        if problem:
            return problem + f" (raw key data: jax.random.key_data of {local_device_count} keys, stacked)"
    if len({row.tobytes() for keys in run for row in keys}) == 1 and processes * local_device_count > 1:
        return "every device of every process has the same key: the whole run draws one stream"
    owner = {}
    for process, keys in enumerate(run):
        for device, row in enumerate(keys):
            first = owner.setdefault(row.tobytes(), (process, device))
            if first != (process, device):
                return (f"with {processes} processes of {local_device_count} devices, device {device} of process "
                        f"{process} has the key of device {first[1]} of process {first[0]}: two devices would "
                        "draw the same numbers")
    if any(not np.array_equal(a, b) for a, b in zip(run, keys_of_every_process(seed), strict=True)):
        return "the same seed gave two different sets of keys: a rerun of the same command would differ"
    other = {row.tobytes() for keys in keys_of_every_process(seed + 1) for row in keys}
    if other & set(owner):
        return "another seed gave some of the same keys: every key must be derived from the seed"
    return None


def _process_rows_inputs(rng: np.random.Generator) -> tuple:
    processes = int(rng.integers(2, 9))
    return int(processes * rng.integers(1, 65)), int(rng.integers(0, processes)), processes


def _process_rows_reference(global_batch, process_index, process_count):
    per_process = global_batch // process_count
    return jnp.arange(process_index * per_process, (process_index + 1) * per_process)


def process_rows_solution(global_batch, process_index, process_count):
    rows_each = global_batch // process_count
    return process_index * rows_each + jnp.arange(rows_each)


def process_rows_strided(global_batch, process_index, process_count):
    return jnp.arange(process_index, global_batch, process_count)  # torch's DistributedSampler deals rows this way


def process_rows_first_block(global_batch, process_index, process_count):
    return jnp.arange(global_batch // process_count)  # every process feeds the same rows


def _weighted_mean_inputs(rng: np.random.Generator) -> tuple:
    processes, dim = int(rng.integers(2, 6)), int(rng.integers(1, 9))
    counts = rng.integers(1, 100, size=processes).astype(np.float32)
    return jnp_f32(rng.normal(size=(processes, dim))), jnp_f32(counts)


def _weighted_mean_reference(shard_means, counts):
    return (shard_means * counts[:, None]).sum(0) / counts.sum()


def weighted_gradient_mean_solution(shard_means, counts):
    return jnp.average(shard_means, axis=0, weights=counts)


def weighted_gradient_mean_plain(shard_means, counts):
    return shard_means.mean(0)  # what pmean of the shard means gives: small shards count too much


def weighted_gradient_mean_not_normalised(shard_means, counts):
    return (shard_means * counts[:, None]).sum(0)  # the sum of all examples' gradients, not their mean



def catalogue() -> list[Exercise]:
    """This notebook's exercises, in the order the notebook checks them."""

    return [
        Exercise(
            name="device_keys",
            description="The raw PRNG key data of every LOCAL device of one process: (seed, process_index, "
            "local_device_count) -> uint32 [local_device_count, 2].\n"
            "Global device index = process_index * local_device_count + d; device d's key can be "
            "jax.random.fold_in(jax.random.key(seed), global_index) (what labcore.distributed does); return "
            "jax.random.key_data of each, stacked. Every process derives its keys from the one seed, so the same "
            "command twice gives the same run, and no two devices share a stream. Any derivation with those two "
            "properties passes: the checker asks every process of a run for its keys and compares them all.",
            reference=_device_keys_reference,
            make_inputs=_device_keys_inputs,
            judge=judge_device_keys,
            rtol=0.0,
            atol=0.0,
            solution=device_keys_solution,
            mistakes=(
                ("folding in the local device index only: every process repeats process 0's keys",
                 device_keys_local_index),
                ("folding in the process index only: all devices of a process share one stream",
                 device_keys_process_index),
                ("one key, unchanged, for every device of every process: one stream for the whole run",
                 device_keys_one_for_all),
            ),
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
            solution=process_rows_solution,
            mistakes=(
                ("strided rows p, p + P, p + 2P, ... (torch's DistributedSampler): not the block a sharded "
                 "global array puts on this process's devices", process_rows_strided),
                ("the first block on every process: the processes all feed the same rows", process_rows_first_block),
            ),
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
            solution=weighted_gradient_mean_solution,
            mistakes=(
                ("the plain mean of the shard means: small shards count as much as large ones", weighted_gradient_mean_plain),
                ("weighted by the counts but not divided by their total: a sum, not a mean",
                 weighted_gradient_mean_not_normalised),
            ),
        ),
    ]
