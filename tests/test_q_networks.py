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


@pytest.mark.parametrize("size,kernel,stride", [(84, 8, 4), (20, 4, 2), (9, 3, 1), (23, 4, 3), (10, 3, 2)])
def test_conv2d_gradient_equals_jax_own(size, kernel, stride):
    """labcore.nets.conv.conv2d's hand-written gradient against lax's, including inputs with rows and
    columns no window reaches ((23 - 4) % 3 and (10 - 3) % 2 leave one), in float32 at full precision."""
    from jax import lax

    from labcore.nets.conv import CANONICAL, conv2d

    keys = jax.random.split(jax.random.key(size), 3)
    x = jax.random.normal(keys[0], (3, size, size, 5))
    w = jax.random.normal(keys[1], (kernel, kernel, 5, 6))
    probe = jax.random.normal(keys[2], conv2d(x, w, stride).shape)  # a random cotangent
    ours = jax.grad(lambda x, w: jnp.sum(conv2d(x, w, stride) * probe), argnums=(0, 1))
    theirs = jax.grad(lambda x, w: jnp.sum(lax.conv_general_dilated(x, w, (stride, stride), "VALID",
                                                                      dimension_numbers=CANONICAL) * probe), argnums=(0, 1))
    with jax.default_matmul_precision("highest"):
        for mine, reference in zip(ours(x, w), theirs(x, w)):
            np.testing.assert_allclose(mine, reference, rtol=1e-5, atol=1e-4)
            assert mine.shape == reference.shape


def test_nature_cnn_gradient_inside_a_loop_is_canonical_convolutions():
    """XLA's CPU backend runs a convolution through Eigen only in canonical form (NHWC input, HWIO
    kernel: dim_labels b01f_01io->b01f) and rewrites the others into it at the top level only. The
    Nature network's gradient inside a scan (PQN's minibatch steps) holds canonical convolutions
    alone; JAX's own gradient of the same convolutions does not (the weight gradient contracts
    over the batch), which is what this guards against."""
    import re

    from jax import lax

    network = make_q_network("nature_cnn", num_actions=4, layer_norm=True)
    obs = jnp.zeros((2, 4, 84, 84), jnp.uint8)
    params = network.init(jax.random.key(0), obs)
    grad = jax.grad(lambda p, o: network.apply(p, None, o).sum())

    def labels(fn, *args):
        text = jax.jit(fn).lower(*args).compile().as_text()
        return re.findall(r"convolution\([^\n]*dim_labels=([^,\s]+)", text)

    looped = labels(lambda p, os: lax.scan(lambda c, o: (jax.tree.map(jnp.add, c, grad(p, o)), None), p, os)[0],
                    params, jnp.stack([obs, obs]))
    assert len(looped) >= 7  # 3 forward, 3 weight gradients, 2 input gradients (not the frames')
    assert set(looped) == {"b01f_01io->b01f"}, looped

    plain = lambda x, w: lax.conv_general_dilated(x, w, (4, 4), "VALID", dimension_numbers=("NHWC", "HWIO", "NHWC"))  # noqa: E731
    jax_own = labels(lambda w, xs: lax.scan(lambda c, x: (c + jax.grad(lambda w: plain(x, w).sum())(w), None), w, xs)[0],
                     jnp.zeros((8, 8, 4, 32)), jnp.zeros((2, 2, 84, 84, 4)))
    assert set(jax_own) != {"b01f_01io->b01f"}, "JAX's own weight gradient became canonical: labcore.nets.conv may go"


def test_nature_cnn_with_layer_norm_is_purejaxql_network():
    """PQN's Atari network: a LayerNorm (over the units) after each convolution and the dense layer,
    He-normal weights there; the same parameter shapes as the Nature network plus the norms."""
    plain = make_q_network("nature_cnn", num_actions=4)
    normed = make_q_network("nature_cnn", num_actions=4, layer_norm=True)
    obs = jax.random.randint(jax.random.key(2), (3, 4, 84, 84), 0, 256).astype(jnp.uint8)
    plain_params, params = plain.init(jax.random.key(0), obs), normed.init(jax.random.key(0), obs)
    norms = sorted(name for name in params if "layer_norm" in name)
    assert len(norms) == 4 and all(params[name]["scale"].shape in {(32,), (64,), (512,)} for name in norms)
    assert count(params) == count(plain_params) + 2 * (32 + 64 + 64 + 512)
    first = np.asarray(params["nature_cnn/conv2_d"]["w"])  # He-normal: variance about 2 / fan_in
    assert abs(first.var() * (8 * 8 * 4) / 2 - 1) < 0.1
    assert normed.apply(params, None, obs).shape == (3, 4)
