"""Notebook 05 (masked_ppo): masked policies, GAE and PPO's clipped loss."""

from __future__ import annotations

import numpy as np

from labcore.exercises.checking import Exercise


def _masked_policy_inputs(rng: np.random.Generator) -> tuple:
    batch, actions = int(rng.integers(1, 40)), int(rng.integers(2, 16))
    logits = rng.normal(scale=rng.uniform(0.5, 10.0), size=(batch, actions)).astype(np.float32)
    mask = rng.random((batch, actions)) < rng.uniform(0.2, 0.9)
    legal_choice = rng.integers(0, actions, batch)
    mask[np.arange(batch), legal_choice] = True  # every row has a legal action...
    return logits, mask, legal_choice.astype(np.int32)  # ...and this is one of them


def _masked_log_prob_entropy_reference(logits, mask, action):
    import jax.numpy as jnp

    from labcore import losses

    log_probs = losses.masked_log_probs(logits, mask)
    chosen = jnp.take_along_axis(log_probs, action[:, None], axis=-1)[:, 0]
    return chosen, losses.masked_entropy(logits, mask)


def _gae_inputs(rng: np.random.Generator) -> tuple:
    steps, envs = int(rng.integers(1, 40)), int(rng.integers(1, 6))
    return (
        rng.normal(size=(steps, envs)).astype(np.float32),
        rng.normal(size=(steps, envs)).astype(np.float32),
        rng.random((steps, envs)) < 0.15,
        rng.normal(size=(envs,)).astype(np.float32),
        float(rng.uniform(0.9, 0.999)),
        float(rng.uniform(0.8, 1.0)),
    )


def _gae_reference(rewards, values, dones, last_value, gamma, gae_lambda):
    from labcore import losses

    return losses.gae_advantages(rewards, values, dones, last_value, gamma, gae_lambda)[0]


def _clipped_objective_inputs(rng: np.random.Generator) -> tuple:
    batch = int(rng.integers(1, 200))
    # ratios from 0.5 to 2, so that many are clipped on either side
    log_ratio = rng.uniform(-0.7, 0.7, size=(batch,)).astype(np.float32)
    return log_ratio, rng.normal(size=(batch,)).astype(np.float32), float(rng.uniform(0.05, 0.3))


def _clipped_objective_reference(log_ratio, advantages, clip_eps):
    from labcore import losses

    return losses.ppo_clipped_objective(log_ratio, advantages, clip_eps)


def catalogue() -> list[Exercise]:
    """This notebook's exercises, in the order the notebook checks them."""
    return [
        Exercise(
            name="masked_log_prob_entropy",
            description="(log pi(action), entropy) of the policy softmax(logits) restricted to the legal actions: "
            "logits [B, A], mask [B, A] bool, action [B] (always legal) -> ([B], [B]).\n"
            "Push illegal logits to a large negative number (jnp.where(mask, logits, -1e9)) rather than -inf, so "
            "no inf - inf NaN appears; take log_softmax of that; the entropy sums -p log p over LEGAL actions only "
            "(jnp.where(mask, p * log_p, 0.0)), so its maximum is log(number of legal actions).",
            reference=_masked_log_prob_entropy_reference,
            make_inputs=_masked_policy_inputs,
            jit=True,
            rtol=1e-4,
            atol=1e-5,
        ),
        Exercise(
            name="gae",
            description="Generalised advantage estimates: rewards, values, dones [T, E], last_value [E], gamma, lambda "
            "-> advantages [T, E].\n"
            "Go backwards in time: delta_t = r_t + gamma * V_{t+1} * (1 - done_t) - V_t and "
            "A_t = delta_t + gamma * lambda * (1 - done_t) * A_{t+1}, with V_T = last_value and A_T = 0. "
            "dones[t] means the episode ended AT step t, so step t does not look past it. "
            "jax.lax.scan(..., reverse=True) does the backward loop in one compiled op.",
            reference=_gae_reference,
            make_inputs=_gae_inputs,
            rtol=1e-4,
            atol=1e-5,
        ),
        Exercise(
            name="ppo_clipped_loss",
            description="PPO's clipped surrogate as a loss to minimise: log_ratio [B] (log pi_new - log pi_old), "
            "advantages [B], clip_eps -> [].\n"
            "ratio = exp(log_ratio); loss = -mean(min(ratio * A, clip(ratio, 1 - eps, 1 + eps) * A)). The min makes "
            "the objective pessimistic: a ratio moving in the advantage's direction stops earning past the clip, "
            "one moving against it is never clipped.",
            reference=_clipped_objective_reference,
            make_inputs=_clipped_objective_inputs,
            jit=True,
        ),
    ]
