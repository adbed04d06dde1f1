"""Haiku Q-networks: shapes, parameter counts, uint8 scaling, purity."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from labcore.nets.q_networks import make_q_network


def count(params):
    return sum(leaf.size for leaf in jax.tree_util.tree_leaves(params))


def test_nature_cnn_shapes_and_parameter_count():
    network = make_q_network("nature_cnn", num_actions=4)
    obs = jnp.zeros((2, 4, 84, 84), jnp.uint8)
    params = network.init(jax.random.key(0), obs)
    assert network.apply(params, None, obs).shape == (2, 4)
    # conv1 8*8*4*32+32, conv2 4*4*32*64+64, conv3 3*3*64*64+64, dense 3136*512+512, head 512*4+4
    expected = (8 * 8 * 4 * 32 + 32) + (4 * 4 * 32 * 64 + 64) + (3 * 3 * 64 * 64 + 64) + (3136 * 512 + 512) + (512 * 4 + 4)
    assert count(params) == expected == 1_686_180


def test_nature_cnn_scales_uint8_frames_inside():
    network = make_q_network("nature_cnn", num_actions=3)
    frames = jax.random.randint(jax.random.key(1), (2, 4, 84, 84), 0, 256).astype(jnp.uint8)
    params = network.init(jax.random.key(0), frames)
    q = network.apply(params, None, frames)
    # The storage dtype does not matter: the same pixel values as float32 give the same Q-values.
    np.testing.assert_allclose(q, network.apply(params, None, frames.astype(jnp.float32)), rtol=1e-5)
    # Biases start at zero, so the ReLU network is positively homogeneous: inputs 255x larger give
    # Q-values 255x larger. Scaled to [0, 1] inside, fresh Q-values stay small; unscaled pixel
    # values would give |Q| in the tens.
    np.testing.assert_allclose(network.apply(params, None, frames.astype(jnp.float32) * 255) / 255, q, rtol=1e-4, atol=1e-6)
    assert float(jnp.abs(q).max()) < 1.0


def test_mlp_shapes_and_determinism():
    network = make_q_network("mlp", num_actions=2, hidden_sizes=(64, 64))
    obs = jnp.ones((5, 4))
    params_a = network.init(jax.random.key(3), obs)
    params_b = network.init(jax.random.key(3), obs)
    assert count(params_a) == 4 * 64 + 64 + 64 * 64 + 64 + 64 * 2 + 2
    np.testing.assert_array_equal(network.apply(params_a, None, obs), network.apply(params_b, None, obs))
    assert network.apply(params_a, None, obs).shape == (5, 2)


@pytest.mark.parametrize("kind,actions,match", [("resnet", 2, "network kind"), ("mlp", 0, "num_actions")])
def test_bad_arguments_fail_clearly(kind, actions, match):
    with pytest.raises(ValueError, match=match):
        make_q_network(kind, actions)
