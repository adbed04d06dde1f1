"""Losses, temporal-difference targets and policy-gradient pieces, as small pure functions.

In the style of rlax: each function states its shapes. The TD functions work on ONE
transition (batch them with ``jax.vmap``); the masked-policy functions work on one
row of logits and broadcast over leading axes; ``gae_advantages`` and ``q_lambda_targets``
scan a whole [T, ...] rollout. Discounts carry episode ends: pass ``discount = gamma * (1 -
terminated)``, so a terminal transition does not bootstrap while a time-limit
truncation still does.
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


# ----------------------------------------------------------------------------------------------
# Policy-gradient pieces: masked categorical policies, GAE, the PPO losses.

MASKED_LOGIT = -1e9  # stands in for -inf: exp underflows to exactly 0, and no inf - inf NaNs


def masked_logits(logits: jax.Array, mask: jax.Array) -> jax.Array:
    """Logits with illegal actions pushed to -1e9. logits, mask: [..., A] -> [..., A]."""
    return jnp.where(mask, logits, MASKED_LOGIT)


def masked_log_probs(logits: jax.Array, mask: jax.Array) -> jax.Array:
    """log pi(a) over the legal actions (illegal ones get about -1e9). [..., A] -> [..., A]."""
    return jax.nn.log_softmax(masked_logits(logits, mask), axis=-1)


def masked_entropy(logits: jax.Array, mask: jax.Array) -> jax.Array:
    """Entropy of the policy restricted to legal actions. [..., A] -> [...].

    Illegal actions have probability 0 and contribute nothing; with k legal actions the
    maximum is log k, not log A, so an entropy bonus cannot reward spreading mass on
    actions that can never be taken.
    """
    log_probs = masked_log_probs(logits, mask)
    return -jnp.sum(jnp.where(mask, jnp.exp(log_probs) * log_probs, 0.0), axis=-1)


def gae_advantages(
    rewards: jax.Array, values: jax.Array, dones: jax.Array, last_value: jax.Array, gamma: float, gae_lambda: float
) -> tuple[jax.Array, jax.Array]:
    """Generalised advantage estimation over a rollout, time-major.

    rewards, values, dones: [T, ...] (dones[t]: the episode ended at step t, so step t does not
    bootstrap from step t + 1); last_value: [...] the value of the observation after the last step.
    Returns (advantages, returns = advantages + values), each [T, ...].
    """

    def backwards(carry, step):
        next_advantage, next_value = carry
        reward, value, done = step
        not_done = 1.0 - done.astype(jnp.float32)
        delta = reward + gamma * next_value * not_done - value
        advantage = delta + gamma * gae_lambda * not_done * next_advantage
        return (advantage, value), advantage

    start = (jnp.zeros_like(last_value), last_value)
    _, advantages = jax.lax.scan(backwards, start, (rewards, values, dones), reverse=True)
    return advantages, advantages + values


def ppo_clipped_objective(log_ratio: jax.Array, advantages: jax.Array, clip_eps: float) -> jax.Array:
    """The clipped surrogate as a loss to minimise: -mean(min(r A, clip(r, 1 -+ eps) A))."""
    ratio = jnp.exp(log_ratio)
    unclipped = ratio * advantages
    clipped = jnp.clip(ratio, 1.0 - clip_eps, 1.0 + clip_eps) * advantages
    return -jnp.mean(jnp.minimum(unclipped, clipped))


def ppo_value_loss(values: jax.Array, old_values: jax.Array, returns: jax.Array, clip_eps: float) -> jax.Array:
    """Clipped value loss: 0.5 * mean(max((v - R)^2, (v_old + clip(v - v_old, -+eps) - R)^2))."""
    clipped = old_values + jnp.clip(values - old_values, -clip_eps, clip_eps)
    return 0.5 * jnp.mean(jnp.maximum((values - returns) ** 2, (clipped - returns) ** 2))


def q_lambda_targets(
    rewards: jax.Array,
    terminated: jax.Array,
    truncated: jax.Array,
    next_max_q: jax.Array,
    gamma: float,
    q_lambda: float,
) -> jax.Array:
    """Peng's Q(lambda) targets over a rollout, time-major (PQN's targets).

    rewards, terminated, truncated: [T, ...] (step t ended its episode by a terminal state, or by a
    time limit); next_max_q: [T, ...] ``max_a Q(s'_t, a)`` of the true next observation of step t
    (the episode's last observation when step t ended it). Returns targets [T, ...]:

        G_t = r_t + gamma * (1 - terminated_t) * ((1 - lambda c_t) next_max_q_t + lambda c_t G_{t+1})

    where c_t = 1 unless step t ended its episode, and c_{T-1} = 0 (the rollout ends). lambda = 0 is
    the one-step Q-learning target; lambda = 1 sums rewards up to the episode or rollout end and
    bootstraps there. A truncated episode bootstraps from its last observation; a terminated one
    does not.
    """
    if not (rewards.shape == terminated.shape == truncated.shape == next_max_q.shape) or rewards.ndim < 1:
        raise ValueError(
            "q_lambda_targets needs rewards, terminated, truncated and next_max_q of one shape [T, ...], got "
            f"{rewards.shape}, {terminated.shape}, {truncated.shape}, {next_max_q.shape}"
        )

    def backwards(next_return, step):
        reward, ended_terminal, ended_by_limit, bootstrap = step
        not_terminal = 1.0 - ended_terminal.astype(jnp.float32)
        carry_on = q_lambda * (1.0 - (ended_terminal | ended_by_limit).astype(jnp.float32))
        target = reward + gamma * not_terminal * ((1.0 - carry_on) * bootstrap + carry_on * next_return)
        return target, target

    # Past the last step there is no G_{t+1}: starting the recursion from next_max_q[-1] makes the
    # last target r + gamma * max Q(s'), whatever lambda is.
    _, targets = jax.lax.scan(backwards, next_max_q[-1], (rewards, terminated, truncated, next_max_q), reverse=True)
    return targets
