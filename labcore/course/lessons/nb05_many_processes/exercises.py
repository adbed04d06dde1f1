"""Notebook 05 (many processes): the bookkeeping of a multi-process run (per-device keys, the rows each
process feeds, a gradient mean over unequal shards, the actor-learner's learner), and its core exercise,
the actors' own exploration: Ape-X's epsilon-greedy, one rate per actor (Horgan et al. 2018).
"""

from __future__ import annotations


import jax
import jax.numpy as jnp
import numpy as np

from labcore.course.exercises import behaviour
from labcore.course.exercises.checking import Exercise, jnp_f32
from labcore.course.lessons.nb05_many_processes.ape_x_checks import (
    _ape_x_inputs, _ape_x_reference, ape_x_divides_by_n, ape_x_epsilon_greedy_solution, ape_x_lone_actor_divides_by_zero,
    ape_x_one_coin, ape_x_one_rate, ape_x_reversed, ape_x_unnormalised, judge_ape_x)

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
# The actor-learner's learner: updates owed, parameter versions, staleness


def _learner_inputs(rng: np.random.Generator) -> tuple:
    num_actors = int(rng.integers(2, 5))
    rollout = int(rng.choice([8, 12, 16, 32]))
    arrivals = rng.integers(0, num_actors, int(rng.integers(20, 60))).tolist()  # which actor's rollout came back
    learning_starts = int(rng.integers(0, 6)) * rollout + int(rng.integers(0, rollout))
    train_frequency = int(rng.choice([1, 2, 4, 8]))
    total_updates = int(rng.integers(10, 200))
    return arrivals, num_actors, rollout, learning_starts, train_frequency, int(rng.integers(1, 12)), total_updates


def _learner_edge_inputs(rng: np.random.Generator) -> list[tuple]:
    """Two schedules every check tries: learning_starts on a rollout's boundary (where `>=` and `>` part),
    and inside a rollout; both with rollouts of a fractional number of updates, two or more (where a
    floor per rollout loses the fractions, and differs from one update per rollout)."""
    edges = []
    for inside in (0, 5):
        num_actors, rollout, train_frequency = 3, 8, 3  # 8 / 3 = 2.67 updates a rollout
        arrivals = rng.integers(0, num_actors, 40).tolist()
        edges.append((arrivals, num_actors, rollout, 3 * rollout + inside, train_frequency, int(rng.integers(2, 6)), 60))
    return edges


def _learner_reference(arrivals, num_actors, rollout, learning_starts, train_frequency, broadcast_every,
                       total_updates, *, per_rollout=False, warm_up=True, credit_all=False, staleness_from_broadcast=False,
                       send_current=False, capped=True):
    # labcore.agents.dqn.actor_learner._train's bookkeeping, with one thing changed for each mistake below.
    received, updates, credit, broadcast = 0, 0, 0.0, 0
    asked = [[0, 0] for _ in range(num_actors)]  # each actor's two queued requests: the versions they carry
    out = {"updates": [], "staleness": [], "version_sent": []}
    for rank in arrivals:
        version = asked[rank].pop(0)  # the parameters this rollout acted with
        received += rollout
        if received > learning_starts or not warm_up:
            out["staleness"].append((broadcast if staleness_from_broadcast else updates) - version)
            new = rollout if (credit_all or not warm_up) else min(rollout, received - learning_starts)
            credit += 1.0 if per_rollout else new / train_frequency
        else:
            out["staleness"].append(-1)
        while credit >= 1 and (updates < total_updates or not capped):
            updates += 1
            credit -= 1
            if updates % broadcast_every == 0:
                broadcast = updates
        sent = updates if send_current else broadcast
        asked[rank].append(sent)
        out["updates"].append(updates)
        out["version_sent"].append(sent)
    return {name: np.asarray(values, np.int64) for name, values in out.items()}


def learner_schedule_solution(arrivals, num_actors, rollout, learning_starts, train_frequency, broadcast_every,
                              total_updates):
    queues = {rank: [0, 0] for rank in range(num_actors)}  # two requests in flight per actor, version 0 at first
    received = updates = newest = 0
    owed = 0.0  # updates owed for transitions received past the warm-up
    rows = []
    for rank in arrivals:
        acted_with = queues[rank].pop(0)
        received += rollout
        staleness = -1
        if received > learning_starts:
            staleness = updates - acted_with  # how many updates the learner is ahead of the data
            owed += min(rollout, received - learning_starts) / train_frequency
        while owed >= 1 and updates < total_updates:
            updates, owed = updates + 1, owed - 1
            if updates % broadcast_every == 0:
                newest = updates  # a copy of these parameters goes to the object store
        queues[rank].append(newest)  # the next request carries the newest copy
        rows.append((updates, staleness, newest))
    updates_after, staleness_of, sent = (np.array(column, np.int64) for column in zip(*rows))
    return {"updates": updates_after, "staleness": staleness_of, "version_sent": sent}


def learner_one_update_per_rollout(*args):
    return _learner_reference(*args, per_rollout=True)


def learner_no_warm_up(*args):
    return _learner_reference(*args, warm_up=False)


def learner_warm_up_credited(*args):
    return _learner_reference(*args, credit_all=True)


def learner_staleness_from_broadcast(*args):
    return _learner_reference(*args, staleness_from_broadcast=True)


def learner_sends_unbroadcast_version(*args):
    return _learner_reference(*args, send_current=True)


def learner_uncapped(*args):
    return _learner_reference(*args, capped=False)


def learner_starts_at_the_boundary(arrivals, num_actors, rollout, learning_starts, train_frequency, broadcast_every,
                                   total_updates):
    return _learner_schedule_variant(arrivals, num_actors, rollout, learning_starts, train_frequency, broadcast_every,
                                     total_updates, at_boundary=True)


def learner_floors_each_rollout(arrivals, num_actors, rollout, learning_starts, train_frequency, broadcast_every,
                                total_updates):
    return _learner_schedule_variant(arrivals, num_actors, rollout, learning_starts, train_frequency, broadcast_every,
                                     total_updates, floor=True)


def _learner_schedule_variant(arrivals, num_actors, rollout, learning_starts, train_frequency, broadcast_every,
                              total_updates, *, at_boundary=False, floor=False):
    queues = {rank: [0, 0] for rank in range(num_actors)}
    received = updates = newest = 0
    owed = 0.0
    rows = []
    for rank in arrivals:
        acted_with = queues[rank].pop(0)
        received += rollout
        staleness = -1
        if received >= learning_starts if at_boundary else received > learning_starts:
            staleness = updates - acted_with
            new = min(rollout, received - learning_starts)
            owed += new // train_frequency if floor else new / train_frequency
        while owed >= 1 and updates < total_updates:
            updates, owed = updates + 1, owed - 1
            if updates % broadcast_every == 0:
                newest = updates
        queues[rank].append(newest)
        rows.append((updates, staleness, newest))
    updates_after, staleness_of, sent = (np.array(column, np.int64) for column in zip(*rows))
    return {"updates": updates_after, "staleness": staleness_of, "version_sent": sent}


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
        Exercise(
            name="learner_schedule",
            description="The actor-learner's learner, its bookkeeping: (arrivals, num_actors, rollout, learning_starts, "
            "train_frequency, broadcast_every, total_updates) -> {'updates', 'staleness', 'version_sent'}, each an "
            "int array with one entry per arrival.\n"
            "arrivals lists which actor's rollout came back, in order; each rollout is `rollout` transitions. Every "
            "actor starts with two requests queued, both carrying parameter version 0, and each arrival answers that "
            "actor's OLDEST request (the version it acted with). Per arrival: received += rollout; once received > "
            "learning_starts, the staleness is updates - that version (else -1) and the learner is owed min(rollout, "
            "received - learning_starts) / train_frequency more updates (the warm-up's transitions earn none). Make "
            "the owed whole updates, never past total_updates; whenever updates is a multiple of broadcast_every, "
            "that version becomes the newest copy in the object store. Then queue a new request for that actor "
            "carrying the newest copy's version (not the learner's own count: those parameters were never sent). "
            "Record updates (after), the staleness and the version sent.",
            reference=_learner_reference,
            make_inputs=_learner_inputs,
            edge_inputs=_learner_edge_inputs,
            rtol=0.0,
            atol=0.0,
            solution=learner_schedule_solution,
            mistakes=(
                ("one update per rollout, not one per train_frequency transitions", learner_one_update_per_rollout),
                ("no warm-up: updates (and staleness) from the first rollout, before learning_starts transitions",
                 learner_no_warm_up),
                ("the rollout that ends the warm-up earns updates for all its transitions, the warm-up's too",
                 learner_warm_up_credited),
                ("staleness measured from the newest broadcast copy, not from the learner's update count",
                 learner_staleness_from_broadcast),
                ("the request carries the learner's current count: parameters that were never put in the object store",
                 learner_sends_unbroadcast_version),
                ("no cap: updates run on past total_updates", learner_uncapped),
                ("received >= learning_starts where it is >: the rollout that reaches learning_starts exactly "
                 "counts as past the warm-up", learner_starts_at_the_boundary),
                ("each rollout's owed updates floored to a whole number: the fractions left over are lost",
                 learner_floors_each_rollout),
            ),
        ),
        Exercise(
            name="ape_x_epsilon_greedy",
            description="Ape-X's actors, each exploring at its own rate: (q_values [E, A], actor_index, num_actors, "
            "key) -> actions [E] int.\n"
            "Actor i of N acts epsilon-greedily with epsilon_i = 0.4 ** (1 + 7 * i / (N - 1)) (Horgan et al. 2018, "
            "section 4.1): actor 0 explores at 0.4, the last at 0.4 ** 8, the others between; a lone actor (N = 1) "
            "at 0.4. Every row flips its own coin: with probability epsilon_i a uniformly random action (any of the "
            "A, the greedy one included), else argmax over its Q-values. The checker judges what the actors do: the "
            "first, the last, one between and a lone actor, on every call; each one's share of non-greedy actions "
            "against its rate, a coin per row, and draws that follow the key (any way of splitting it passes).",
            reference=_ape_x_reference,
            make_inputs=_ape_x_inputs,
            judge=judge_ape_x,
            trials=2,
            solution=ape_x_epsilon_greedy_solution,
            mistakes=(
                ("i / N in the exponent where Ape-X has i / (N - 1): the last actor explores too much", ape_x_divides_by_n),
                ("i * alpha in the exponent, not divided by N - 1: every actor but the first almost never explores",
                 ape_x_unnormalised),
                ("one rate, 0.4, for every actor: Ape-X's spread of rates is gone", ape_x_one_rate),
                ("the actors in reverse order: actor 0 the greediest, the last the most exploratory", ape_x_reversed),
                ("a lone actor divides by N - 1 = 0: Ape-X's formula has no value there; it explores at 0.4",
                 ape_x_lone_actor_divides_by_zero),
                ("one coin for the whole batch: all rows explore together or none does", ape_x_one_coin),
            ),
            core=True,
        ),
    ]
