"""losses.py against rlax and against hand-computed values."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import rlax

from labcore import losses

RNG = np.random.default_rng(0)


def random_batch(batch=64, actions=5):
    return dict(
        q=jnp.asarray(RNG.normal(size=(batch, actions)), jnp.float32),
        action=jnp.asarray(RNG.integers(0, actions, size=batch), jnp.int32),
        reward=jnp.asarray(RNG.normal(size=batch), jnp.float32),
        discount=jnp.asarray(0.99 * RNG.integers(0, 2, size=batch), jnp.float32),
        next_q_target=jnp.asarray(RNG.normal(size=(batch, actions)), jnp.float32),
        next_q_online=jnp.asarray(RNG.normal(size=(batch, actions)), jnp.float32),
    )


@pytest.mark.parametrize("delta", [0.5, 1.0, 2.0])
def test_huber_matches_rlax(delta):
    x = jnp.asarray(RNG.normal(size=1000) * 3, jnp.float32)
    np.testing.assert_allclose(losses.huber_loss(x, delta), rlax.huber_loss(x, delta), rtol=1e-6, atol=1e-6)


def test_huber_values_and_clipped_gradient():
    x = jnp.array([-3.0, -1.0, -0.5, 0.0, 0.5, 1.0, 3.0])
    np.testing.assert_allclose(losses.huber_loss(x), [2.5, 0.5, 0.125, 0.0, 0.125, 0.5, 2.5])
    grad = jax.vmap(jax.grad(losses.huber_loss))(x)
    np.testing.assert_allclose(grad, jnp.clip(x, -1.0, 1.0))


def test_q_learning_td_error_matches_rlax():
    b = random_batch()
    target = jax.vmap(losses.q_learning_target)(b["reward"], b["discount"], b["next_q_target"])
    ours = jax.vmap(losses.td_error)(b["q"], b["action"], target)
    theirs = jax.vmap(rlax.q_learning)(b["q"], b["action"], b["reward"], b["discount"], b["next_q_target"])
    np.testing.assert_allclose(ours, theirs, rtol=1e-6, atol=1e-6)


def test_double_q_learning_td_error_matches_rlax():
    b = random_batch()
    target = jax.vmap(losses.double_q_learning_target)(
        b["reward"], b["discount"], b["next_q_target"], b["next_q_online"]
    )
    ours = jax.vmap(losses.td_error)(b["q"], b["action"], target)
    theirs = jax.vmap(rlax.double_q_learning)(
        b["q"], b["action"], b["reward"], b["discount"], b["next_q_target"], b["next_q_online"]
    )
    np.testing.assert_allclose(ours, theirs, rtol=1e-6, atol=1e-6)


def test_terminal_transition_does_not_bootstrap():
    assert float(losses.q_learning_target(1.0, 0.0, jnp.array([100.0, 200.0]))) == 1.0
    assert float(losses.q_learning_target(1.0, 0.5, jnp.array([100.0, 200.0]))) == 101.0


def test_double_q_target_uses_online_argmax_and_target_value():
    target = losses.double_q_learning_target(0.0, 1.0, jnp.array([10.0, 20.0]), jnp.array([5.0, 1.0]))
    assert float(target) == 10.0  # online picks action 0; the target net values it at 10


def test_no_gradient_flows_into_the_target():
    def loss(next_q):
        target = losses.q_learning_target(0.0, 1.0, next_q)
        return losses.td_error(jnp.array([0.0, 0.0]), 0, target) ** 2

    np.testing.assert_array_equal(jax.grad(loss)(jnp.array([1.0, 2.0])), [0.0, 0.0])
