"""Notebook 07's core exercise ``ppo_clipped_loss``: PPO's masked clipped surrogate, checked on its value and on
its gradient with respect to the logits (so a ``stop_gradient`` in the wrong place is named), with the worked
solution and the classic mistakes.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from labcore.course.exercises.checking import AnswerProblem


# ----------------------------------------------------------------------------------------------
# Inputs shared by the masked-policy exercises (notebook 07's 1 and 3).


def _legal_logits(rng: np.random.Generator, batch: int, actions: int, scale: float) -> tuple:
    """logits [B, A] float64, mask [B, A] bool with at least one legal action per row, and one legal
    action per row [B] int32."""
    logits = rng.normal(scale=scale, size=(batch, actions))
    mask = rng.random((batch, actions)) < rng.uniform(0.2, 0.9)
    legal_choice = rng.integers(0, actions, batch)
    mask[np.arange(batch), legal_choice] = True  # every row has a legal action...
    return logits, mask, legal_choice.astype(np.int32)  # ...and this is one of them


def _masked_log_probs_float64(logits: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """log pi(a) over the legal actions, in float64 (-inf for illegal ones)."""
    masked = np.where(mask, logits, -np.inf)
    top = masked.max(axis=-1, keepdims=True)
    return masked - top - np.log(np.sum(np.exp(masked - top), axis=-1, keepdims=True))



# ----------------------------------------------------------------------------------------------
# 3. ppo_clipped_loss: the masked clipped surrogate (core)


def _clipped_loss_inputs(rng: np.random.Generator) -> tuple:
    batch, actions = int(rng.integers(1, 100)), int(rng.integers(2, 10))
    logits, mask, action = _legal_logits(rng, batch, actions, rng.uniform(0.5, 5.0))
    log_probs = _masked_log_probs_float64(logits.astype(np.float32).astype(np.float64), mask)
    # old log-probabilities near the current ones: ratios from 0.5 to 2, so that many are clipped
    # on either side of 1 +- clip_eps
    old_log_probs = log_probs[np.arange(batch), action] - rng.uniform(-0.7, 0.7, size=batch)
    return (
        logits.astype(np.float32),
        mask,
        action,
        old_log_probs.astype(np.float32),
        rng.normal(size=batch).astype(np.float32),
        float(rng.uniform(0.05, 0.3)),
    )


def _clipped_loss_labcore(logits, mask, actions, old_log_probs, advantages, clip_eps):
    from labcore import losses

    log_probs = losses.masked_log_probs(logits, mask)
    new_log_probs = jnp.take_along_axis(log_probs, actions[:, None], axis=-1)[:, 0]
    return losses.ppo_clipped_objective(new_log_probs - old_log_probs, advantages, clip_eps)


def _loss_and_gradient(fn):
    """The answer's loss and its gradient with respect to the logits: a loss checker compares both (a
    ratio whose gradient is zero, or a stop_gradient on one term of the min, gives the right values)."""

    def run(logits, mask, actions, old_log_probs, advantages, clip_eps):
        shape = jax.eval_shape(lambda logits: fn(logits, mask, actions, old_log_probs, advantages, clip_eps), logits).shape
        if shape != ():
            raise AnswerProblem(f"your loss has shape {shape}; a loss is one number, shape (): the mean over the batch")
        loss, grad = jax.value_and_grad(fn)(logits, mask, actions, old_log_probs, advantages, clip_eps)
        return {"your loss": loss, "d loss / d logits": grad}

    return run


def _clipped_loss_reference(logits, mask, actions, old_log_probs, advantages, clip_eps):
    return _loss_and_gradient(_clipped_loss_labcore)(logits, mask, actions, old_log_probs, advantages, clip_eps)


def ppo_clipped_loss_solution(logits, mask, actions, old_log_probs, advantages, clip_eps):
    masked = jnp.where(mask, logits, -1e9)  # illegal actions: probability exactly 0
    log_probs = masked - jax.scipy.special.logsumexp(masked, axis=-1, keepdims=True)
    new_log_probs = log_probs[jnp.arange(actions.shape[0]), actions]
    ratio = jnp.exp(new_log_probs - old_log_probs)  # pi_new(a) / pi_old(a)
    surrogate = ratio * advantages
    clipped_surrogate = jnp.clip(ratio, 1 - clip_eps, 1 + clip_eps) * advantages
    objective = jnp.minimum(surrogate, clipped_surrogate).mean()  # the pessimistic bound
    return -objective  # a loss to minimise


def ppo_clipped_loss_unmasked(logits, mask, actions, old_log_probs, advantages, clip_eps):
    log_probs = jax.nn.log_softmax(logits, axis=-1)  # over all actions, illegal ones included
    ratio = jnp.exp(log_probs[jnp.arange(actions.shape[0]), actions] - old_log_probs)
    return -jnp.minimum(ratio * advantages, jnp.clip(ratio, 1 - clip_eps, 1 + clip_eps) * advantages).mean()


def ppo_clipped_loss_max(logits, mask, actions, old_log_probs, advantages, clip_eps):
    log_probs = jax.nn.log_softmax(jnp.where(mask, logits, -1e9), axis=-1)
    ratio = jnp.exp(log_probs[jnp.arange(actions.shape[0]), actions] - old_log_probs)
    return -jnp.maximum(ratio * advantages, jnp.clip(ratio, 1 - clip_eps, 1 + clip_eps) * advantages).mean()


def ppo_clipped_loss_clip_only(logits, mask, actions, old_log_probs, advantages, clip_eps):
    log_probs = jax.nn.log_softmax(jnp.where(mask, logits, -1e9), axis=-1)
    ratio = jnp.exp(log_probs[jnp.arange(actions.shape[0]), actions] - old_log_probs)
    return -(jnp.clip(ratio, 1 - clip_eps, 1 + clip_eps) * advantages).mean()


def _clipped_with(logits, mask, actions, old_log_probs, advantages, clip_eps, *, frozen_ratio=False, frozen_term=False,
                  sign=-1.0, inverted=False, summed=False):
    log_probs = jax.nn.log_softmax(jnp.where(mask, logits, -1e9), axis=-1)
    new = log_probs[jnp.arange(actions.shape[0]), actions]
    if frozen_ratio:
        new = jax.lax.stop_gradient(new)
    ratio = jnp.exp(old_log_probs - new) if inverted else jnp.exp(new - old_log_probs)
    unclipped = ratio * advantages
    if frozen_term:
        unclipped = jax.lax.stop_gradient(unclipped)
    objective = jnp.minimum(unclipped, jnp.clip(ratio, 1 - clip_eps, 1 + clip_eps) * advantages)
    return sign * (objective.sum() if summed else objective.mean())


def ppo_clipped_loss_frozen_ratio(*args):
    return _clipped_with(*args, frozen_ratio=True)


def ppo_clipped_loss_frozen_term(*args):
    return _clipped_with(*args, frozen_term=True)


def ppo_clipped_loss_objective(*args):
    return _clipped_with(*args, sign=1.0)


def ppo_clipped_loss_inverted_ratio(*args):
    return _clipped_with(*args, inverted=True)


def ppo_clipped_loss_summed(*args):
    return _clipped_with(*args, summed=True)


def ppo_clipped_loss_normalises_advantages(logits, mask, actions, old_log_probs, advantages, clip_eps):
    advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
    return ppo_clipped_loss_solution(logits, mask, actions, old_log_probs, advantages, clip_eps)
