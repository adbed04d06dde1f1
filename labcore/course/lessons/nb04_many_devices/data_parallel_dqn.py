"""What notebook 04's core exercise, ``data_parallel_dqn_update``, runs: the DQN gradient step on every device.

The learner writes the step one device runs under ``jax.shard_map``: the DQN loss on this device's
shard of the batch, its gradient averaged over the devices with ``lax.pmean``, then the optimiser
step. The checker runs it on a mesh of 2 to 8 CPU devices with the parameters replicated and the
batch split, and compares every replica's parameters, optimiser state and loss with one device's
step on the whole batch: what ``labcore.agents.dqn.core.make_update(..., axis_name=...)`` computes.
The network is labcore's Haiku MLP and the optimiser Adam with a large epsilon (0.1), so that a sum
of the devices' gradients (n times the mean) moves the parameters differently from the mean, as
it would with plain SGD, while averaging parameters after each device's own Adam step still differs
from Adam on the averaged gradient.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax

from labcore.course.lessons.nb04_many_devices.meshes import PMEAN_AXIS, draw_mesh, refuse_small

OBS_SIZE, NUM_ACTIONS = 4, 3


@functools.cache
def parts():
    """(network, loss_fn, optimizer) of the check: loss_fn(params, target_params, batch) -> scalar."""
    from labcore.agents.dqn import core as dqn
    from labcore.nets.q_networks import make_q_network

    config = dqn.DQNConfig(hidden_sizes=(16,), gamma=0.97)
    network = make_q_network("mlp", NUM_ACTIONS, config.hidden_sizes)
    dqn_loss = dqn.make_loss(config, network)  # (params, target_params, batch) -> (loss, aux)

    def loss_fn(params, target_params, batch):
        return dqn_loss(params, target_params, batch)[0]

    return network, loss_fn, optax.adam(1e-2, eps=0.1)


def inputs(rng: np.random.Generator) -> tuple:
    from labcore.agents.dqn.core import Transition

    mesh = draw_mesh(rng)
    network, _, optimizer = parts()
    keys = jax.random.split(jax.random.key(int(rng.integers(1 << 30))), 2)
    params = network.init(keys[0], jnp.zeros((1, OBS_SIZE)))
    target_params = network.init(keys[1], jnp.zeros((1, OBS_SIZE)))
    # Adam's moments as after some steps, so a step's effect depends on them
    opt_state = optimizer.init(params)
    for _ in range(2):
        noise = jax.tree_util.tree_map(lambda p: jnp.asarray(rng.normal(size=p.shape), jnp.float32), params)
        _, opt_state = optimizer.update(noise, opt_state, params)
    batch_size = mesh.size * int(rng.integers(2, 7))
    batch = Transition(
        obs=rng.normal(size=(batch_size, OBS_SIZE)).astype(np.float32),
        action=rng.integers(0, NUM_ACTIONS, size=batch_size).astype(np.int32),
        reward=rng.normal(size=batch_size).astype(np.float32),
        next_obs=rng.normal(size=(batch_size, OBS_SIZE)).astype(np.float32),
        terminated=rng.random(batch_size) < 0.2,
    )
    return params, target_params, opt_state, batch, mesh


def reference(params, target_params, opt_state, batch, mesh):
    """One device's step on the whole batch, as every replica must end: leaves [devices, ...]."""
    _, loss_fn, optimizer = parts()
    loss, grads = jax.value_and_grad(loss_fn)(params, target_params, batch)
    updates, opt_state = optimizer.update(grads, opt_state, params)
    result = (optax.apply_updates(params, updates), opt_state, loss)
    return jax.tree_util.tree_map(lambda leaf: jnp.broadcast_to(leaf, (mesh.size, *jnp.shape(leaf))), result)


def run_on_every_device(step):
    """Run ``step(params, target_params, opt_state, batch_shard, loss_fn, optimizer)`` as the
    per-device program of jax.shard_map: everything replicated but the batch, split along
    PMEAN_AXIS; every replica's result, stacked on a leading device axis."""
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    def run(params, target_params, opt_state, batch, mesh):
        refuse_small(mesh)
        _, loss_fn, optimizer = parts()

        def per_device(params, target_params, opt_state, batch):
            result = step(params, target_params, opt_state, batch, loss_fn, optimizer)
            return jax.tree_util.tree_map(lambda leaf: jnp.asarray(leaf)[None], result)

        # check_vma=False as in labcore.agents.dqn.data_parallel: the learner's collective is the reduction
        sharded = jax.jit(jax.shard_map(per_device, mesh=mesh, in_specs=(P(), P(), P(), P(PMEAN_AXIS)),
                                        out_specs=P(PMEAN_AXIS), check_vma=False))
        put = lambda value, spec: jax.device_put(value, NamedSharding(mesh, spec))  # noqa: E731
        return sharded(put(params, P()), put(target_params, P()), put(opt_state, P()), put(batch, P(PMEAN_AXIS)))

    return run


def solution(params, target_params, opt_state, batch, loss_fn, optimizer):
    # This device's shard of the batch: its loss and gradient are a mean over the shard's rows.
    loss, grads = jax.value_and_grad(loss_fn)(params, target_params, batch)
    # The mean over the devices of the shards' means is the mean over the whole batch (equal
    # shards): every replica then holds the gradient one device would compute on all of it.
    grads = jax.lax.pmean(grads, axis_name="devices")
    loss = jax.lax.pmean(loss, axis_name="devices")
    # The same gradient and the same state on every replica: the same step, replicas stay equal.
    updates, opt_state = optimizer.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, loss


def without_pmean(params, target_params, opt_state, batch, loss_fn, optimizer):
    loss, grads = jax.value_and_grad(loss_fn)(params, target_params, batch)
    updates, opt_state = optimizer.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, jax.lax.pmean(loss, PMEAN_AXIS)


def with_psum(params, target_params, opt_state, batch, loss_fn, optimizer):
    loss, grads = jax.value_and_grad(loss_fn)(params, target_params, batch)
    grads = jax.lax.psum(grads, PMEAN_AXIS)  # n times the mean gradient
    updates, opt_state = optimizer.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, jax.lax.pmean(loss, PMEAN_AXIS)


def averaging_parameters_after_the_step(params, target_params, opt_state, batch, loss_fn, optimizer):
    loss, grads = jax.value_and_grad(loss_fn)(params, target_params, batch)
    updates, opt_state = optimizer.update(grads, opt_state, params)  # each device's own Adam step
    params, opt_state = jax.lax.pmean((optax.apply_updates(params, updates), opt_state), PMEAN_AXIS)
    return params, opt_state, jax.lax.pmean(loss, PMEAN_AXIS)


def loss_not_averaged(params, target_params, opt_state, batch, loss_fn, optimizer):
    loss, grads = jax.value_and_grad(loss_fn)(params, target_params, batch)
    updates, opt_state = optimizer.update(jax.lax.pmean(grads, PMEAN_AXIS), opt_state, params)
    return optax.apply_updates(params, updates), opt_state, loss  # this shard's loss, not the batch's


MISTAKES = (
    ("no pmean: each replica steps on its own shard's gradient, and the replicas drift apart", without_pmean),
    ("psum instead of pmean: the sum of the devices' mean gradients, n times the step's gradient", with_psum),
    ("each device steps on its own gradient and the parameters are averaged afterwards: with Adam that "
     "is not the step on the averaged gradient", averaging_parameters_after_the_step),
    ("the reported loss is this shard's, not averaged over the devices", loss_not_averaged),
)
