"""Losses and temporal-difference targets, as small pure functions.

In the style of rlax: each function works on ONE transition and states its
shapes; batch it with ``jax.vmap``. Discounts carry episode ends: pass
``discount = gamma * (1 - terminated)``, so a terminal transition does not
bootstrap while a time-limit truncation still does.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


def huber_loss(x: jax.Array, delta: float = 1.0) -> jax.Array:
    """Huber loss: quadratic for ``|x| <= delta``, linear beyond.

    With ``delta = 1`` its gradient is the TD error clipped to [-1, 1], the
    Nature DQN's error clipping. x: any shape -> same shape.
    """
    abs_x = jnp.abs(x)
    quadratic = jnp.minimum(abs_x, delta)
    linear = abs_x - quadratic
    return 0.5 * quadratic**2 + delta * linear


def q_learning_target(reward: jax.Array, discount: jax.Array, next_q_target: jax.Array) -> jax.Array:
    """The DQN target ``r + discount * max_a' Q_target(s', a')``.

    reward: [], discount: [], next_q_target: [A] -> [].
    """
    return reward + discount * jnp.max(next_q_target)


def double_q_learning_target(
    reward: jax.Array, discount: jax.Array, next_q_target: jax.Array, next_q_online: jax.Array
) -> jax.Array:
    """Double DQN target: the online network picks ``a'``, the target network values it.

    reward: [], discount: [], next_q_target: [A], next_q_online: [A] -> [].
    """
    best_action = jnp.argmax(next_q_online)
    return reward + discount * next_q_target[best_action]


def td_error(q: jax.Array, action: jax.Array, target: jax.Array) -> jax.Array:
    """``target - Q(s, a)``, with the target treated as a constant (no gradient flows into it).

    q: [A], action: [] int, target: [] -> [].
    """
    return jax.lax.stop_gradient(target) - q[action]
