"""Data parallelism: pmap, shard_map and sharded jit give the single-device DQN update."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from labcore.agents.dqn import data_parallel as parallel
from labcore.agents.dqn import core as dqn
from labcore.nets.q_networks import make_q_network

BATCH = 64


def setup():
    config = dqn.DQNConfig(batch_size=BATCH, target_update_frequency=30, train_frequency=10)  # target moves every 3 updates
    network = make_q_network("mlp", num_actions=3, hidden_sizes=(32, 32))
    optimizer = dqn.make_optimizer(config)
    state = dqn.init_train_state(config, network, optimizer, jnp.zeros(5), jax.random.key(0))
    return config, network, optimizer, state


def batches(count):
    out = []
    for i in range(count):
        k1, k2, k3, k4 = jax.random.split(jax.random.key(100 + i), 4)
        out.append(
            dqn.Transition(
                obs=jax.random.normal(k1, (BATCH, 5)),
                action=jax.random.randint(k2, (BATCH,), 0, 3),
                reward=jax.random.normal(k3, (BATCH,)),
                next_obs=jax.random.normal(k4, (BATCH, 5)),
                terminated=jnp.arange(BATCH) % 7 == 0,
            )
        )
    return out


def single_device_run(steps=6):
    config, network, optimizer, state = setup()
    update = jax.jit(dqn.make_update(config, network, optimizer))
    losses = []
    for batch in batches(steps):
        state, metrics = update(state, batch)
        losses.append(float(metrics["loss"]))
    return state, losses


def assert_trees_close(a, b, atol=1e-5):
    for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b), strict=True):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), atol=atol, rtol=1e-5)


def test_eight_simulated_devices_are_present():
    assert jax.device_count() >= 8, "tests/conftest.py sets XLA_FLAGS for 8 CPU devices before jax is imported"


@pytest.mark.parametrize("num_devices", [4, 8])
def test_pmap_update_matches_single_device_and_replicas_stay_identical(num_devices):
    reference, reference_losses = single_device_run()
    config, network, optimizer, state = setup()
    update = parallel.make_pmap_update(config, network, optimizer, num_devices=num_devices)
    replicated = parallel.replicate(state, num_devices)
    for batch, expected_loss in zip(batches(6), reference_losses):
        replicated, metrics = update(replicated, parallel.shard_batch(batch, num_devices))
        np.testing.assert_allclose(np.asarray(metrics["loss"]), expected_loss, rtol=1e-5)
    for leaf in jax.tree_util.tree_leaves(replicated):
        for copy in np.asarray(leaf)[1:]:
            np.testing.assert_array_equal(copy, np.asarray(leaf)[0])
    assert_trees_close(parallel.unreplicate(replicated), reference)
    assert int(parallel.unreplicate(replicated).update_count) == 6


@pytest.mark.parametrize("num_devices", [4, 8])
@pytest.mark.parametrize("form", ["shard_map", "sharded_jit"])
def test_mesh_updates_match_single_device(num_devices, form):
    reference, reference_losses = single_device_run()
    config, network, optimizer, state = setup()
    mesh = parallel.make_mesh(num_devices)
    make = parallel.make_shard_map_update if form == "shard_map" else parallel.make_sharded_jit_update
    update = make(config, network, optimizer, mesh)
    state = parallel.put_replicated(state, mesh)
    for batch, expected_loss in zip(batches(6), reference_losses):
        batch = parallel.put_sharded(batch, mesh)
        assert len(batch.obs.addressable_shards) == num_devices
        assert batch.obs.addressable_shards[0].data.shape == (BATCH // num_devices, 5)
        state, metrics = update(state, batch)
        np.testing.assert_allclose(float(metrics["loss"]), expected_loss, rtol=1e-5)
    params = jax.tree_util.tree_leaves(state.params)[0]
    assert params.sharding.is_fully_replicated
    # every device's copy of the parameters is the same array
    copies = [np.asarray(shard.data) for shard in params.addressable_shards]
    assert len(copies) == num_devices and all(np.array_equal(c, copies[0]) for c in copies)
    assert_trees_close(state, reference)


def test_a_wrong_gradient_reduction_would_be_caught():
    """Without the pmean each replica steps on its own shard's gradient: the comparison above fails."""
    reference, _ = single_device_run(steps=2)
    config, network, optimizer, state = setup()
    update = jax.pmap(dqn.make_update(config, network, optimizer), axis_name=parallel.AXIS, devices=jax.devices()[:4])
    replicated = parallel.replicate(state, 4)
    for batch in batches(2):
        replicated, _ = update(replicated, parallel.shard_batch(batch, 4))
    with pytest.raises(AssertionError):
        assert_trees_close(parallel.unreplicate(replicated), reference)


def test_device_keys_differ_per_replica_and_are_reproducible():
    key = jax.random.key(7)
    draw = jax.pmap(
        lambda k: jax.random.uniform(parallel.device_key(k), (3,)),
        axis_name=parallel.AXIS,
        devices=jax.devices()[:4],
    )
    first = np.asarray(draw(parallel.replicate(key, 4)))
    again = np.asarray(draw(parallel.replicate(key, 4)))
    np.testing.assert_array_equal(first, again)
    assert len({tuple(row) for row in first.round(6)}) == 4
    for i in range(4):
        np.testing.assert_allclose(first[i], np.asarray(jax.random.uniform(jax.random.fold_in(key, i), (3,))), rtol=1e-6)


def test_bad_device_counts_and_batches_fail_clearly():
    with pytest.raises(ValueError, match="num_devices must be in"):
        parallel.make_mesh(jax.device_count() + 1)
    with pytest.raises(ValueError, match="divisible by the number of devices"):
        parallel.shard_batch({"x": jnp.zeros((10, 2))}, 4)
