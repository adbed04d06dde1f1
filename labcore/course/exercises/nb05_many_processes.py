"""Notebook 05 (many processes): the bookkeeping of a multi-process run (per-device keys, the rows each
process feeds, one global batch from per-device blocks, a gradient mean over unequal shards).

``global_batch_array`` depends on the device count: a whole batch on one device is trivially "sharded", so its
checker builds a mesh of at least 2 CPU devices (``meshes``) and, where this process has fewer, refuses.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from labcore.course.exercises import behaviour
from labcore.course.exercises.checking import Exercise, jnp_f32
from labcore.course.exercises.meshes import PMEAN_AXIS, draw_mesh, refuse_small

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
