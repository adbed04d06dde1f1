"""Notebook 07 (masked_ppo): masked policies, GAE, PPO's masked clipped loss and one update epoch.

The last two are PPO's own core (``core=True``): the clipped policy loss at the heart of what
``labcore.agents.ppo.core.make_ppo`` minimises, and the epoch of shuffled minibatch steps it takes per
update. Each exercise carries a
worked solution, written as a learner would (``labcore.course.exercises.solution(name)`` shows it), and the
classic wrong answers that ``check`` recognises.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax

from labcore.course.exercises.checking import Exercise, jnp_f32
from labcore.course.lessons.nb07_masked_ppo.ppo_epoch_checks import epoch_in_order, epoch_judge
from labcore.course.lessons.nb07_masked_ppo.ppo_loss_checks import (
    _clipped_loss_inputs, _legal_logits, _masked_log_probs_float64, _clipped_loss_labcore, _clipped_loss_reference, _loss_and_gradient,
    ppo_clipped_loss_clip_only, ppo_clipped_loss_frozen_ratio, ppo_clipped_loss_frozen_term,
    ppo_clipped_loss_inverted_ratio, ppo_clipped_loss_max, ppo_clipped_loss_normalises_advantages,
    ppo_clipped_loss_objective, ppo_clipped_loss_solution, ppo_clipped_loss_summed, ppo_clipped_loss_unmasked)

# ----------------------------------------------------------------------------------------------
# 1. masked_log_prob_entropy


def _masked_policy_inputs(rng: np.random.Generator) -> tuple:
    batch, actions = int(rng.integers(1, 40)), int(rng.integers(2, 16))
    logits, mask, action = _legal_logits(rng, batch, actions, rng.uniform(0.5, 10.0))
    return logits.astype(np.float32), mask, action


def _masked_log_prob_entropy_labcore(logits, mask, action):
    from labcore import losses

    log_probs = losses.masked_log_probs(logits, mask)
    chosen = jnp.take_along_axis(log_probs, action[:, None], axis=-1)[:, 0]
    return chosen, losses.masked_entropy(logits, mask)


def _with_gradient(fn):
    """An answer's (log pi(action), entropy) and the gradient of their sums with respect to the logits: the
    loss differentiates both, so a form whose value is right and whose gradient is NaN or zero is wrong."""

    def run(logits, mask, action):
        (log_prob, entropy), vjp = jax.vjp(lambda logits: fn(logits, mask, action), logits)
        (grad,) = vjp((jnp.ones_like(log_prob), jnp.ones_like(entropy)))
        return {"log pi(action)": log_prob, "entropy": entropy, "d (log pi + entropy) / d logits": grad}

    return run


def _masked_log_prob_entropy_reference(logits, mask, action):
    return _with_gradient(_masked_log_prob_entropy_labcore)(logits, mask, action)


def masked_log_prob_entropy_solution(logits, mask, action):
    log_probs = jax.nn.log_softmax(jnp.where(mask, logits, -1e9), axis=-1)  # illegal: probability 0
    chosen = log_probs[jnp.arange(logits.shape[0]), action]
    p_log_p = jnp.where(mask, jnp.exp(log_probs) * log_probs, 0.0)  # only legal actions count
    return chosen, -p_log_p.sum(axis=-1)


def masked_log_prob_entropy_unmasked_entropy(logits, mask, action):
    log_probs = jax.nn.log_softmax(jnp.where(mask, logits, -1e9), axis=-1)
    all_actions = jax.nn.log_softmax(logits, axis=-1)
    return log_probs[jnp.arange(logits.shape[0]), action], -jnp.sum(jnp.exp(all_actions) * all_actions, axis=-1)


def masked_log_prob_entropy_minus_inf(logits, mask, action):
    log_probs = jax.nn.log_softmax(jnp.where(mask, logits, -jnp.inf), axis=-1)
    p_log_p = jnp.where(mask, jnp.exp(log_probs) * log_probs, 0.0)  # right values; the gradient through -inf is NaN
    return log_probs[jnp.arange(logits.shape[0]), action], -p_log_p.sum(axis=-1)


def masked_log_prob_entropy_no_entropy_gradient(logits, mask, action):
    chosen, entropy = masked_log_prob_entropy_solution(logits, mask, action)
    return chosen, jax.lax.stop_gradient(entropy)


def masked_log_prob_entropy_unmasked_log_prob(logits, mask, action):
    log_probs = jax.nn.log_softmax(logits, axis=-1)
    p_log_p = jnp.where(mask, jnp.exp(log_probs) * log_probs, 0.0)
    return log_probs[jnp.arange(logits.shape[0]), action], -p_log_p.sum(axis=-1)


# ----------------------------------------------------------------------------------------------
# 2. gae


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


def gae_reference(rewards, values, dones, last_value, gamma, gae_lambda):
    from labcore import losses

    return losses.gae_advantages(rewards, values, dones, last_value, gamma, gae_lambda)[0]


def gae_solution(rewards, values, dones, last_value, gamma, gae_lambda):
    not_done = 1.0 - dones.astype(jnp.float32)
    next_values = jnp.concatenate([values[1:], last_value[None]], axis=0)  # V_{t+1}, with V_T = last_value
    deltas = rewards + gamma * next_values * not_done - values

    def backwards(next_advantage, step):
        delta, keep = step
        advantage = delta + gamma * gae_lambda * keep * next_advantage
        return advantage, advantage

    _, advantages = jax.lax.scan(backwards, jnp.zeros_like(last_value), (deltas, not_done), reverse=True)
    return advantages


def gae_ignoring_dones(rewards, values, dones, last_value, gamma, gae_lambda):
    return gae_solution(rewards, values, jnp.zeros_like(dones), last_value, gamma, gae_lambda)


def gae_done_cuts_only_the_bootstrap(rewards, values, dones, last_value, gamma, gae_lambda):
    not_done = 1.0 - dones.astype(jnp.float32)
    next_values = jnp.concatenate([values[1:], last_value[None]], axis=0)
    deltas = rewards + gamma * next_values * not_done - values

    def backwards(next_advantage, delta):
        advantage = delta + gamma * gae_lambda * next_advantage  # the next episode's advantage leaks in
        return advantage, advantage

    return jax.lax.scan(backwards, jnp.zeros_like(last_value), deltas, reverse=True)[1]


def gae_cleanrl_next_done(rewards, values, dones, last_value, gamma, gae_lambda):
    # CleanRL's loop: nextnonterminal = 1 - dones[t + 1], its dones marking the first step of an episode
    not_next_done = 1.0 - jnp.concatenate([dones[1:], jnp.zeros_like(dones[:1])], axis=0).astype(jnp.float32)
    next_values = jnp.concatenate([values[1:], last_value[None]], axis=0)
    deltas = rewards + gamma * next_values * not_next_done - values

    def backwards(next_advantage, step):
        delta, keep = step
        advantage = delta + gamma * gae_lambda * keep * next_advantage
        return advantage, advantage

    return jax.lax.scan(backwards, jnp.zeros_like(last_value), (deltas, not_next_done), reverse=True)[1]


def gae_returns(rewards, values, dones, last_value, gamma, gae_lambda):
    return gae_solution(rewards, values, dones, last_value, gamma, gae_lambda) + values


# ----------------------------------------------------------------------------------------------
# 4. ppo_update_epoch: one epoch of shuffled minibatch steps (core)

EPOCH_CLIP_EPS = 0.2


def linear_actor_critic_loss(params, minibatch):
    """The loss the ``ppo_update_epoch`` exercise optimises: PPO's loss for a linear actor-critic.

    params: {"policy": [D, A], "value": [D]}; minibatch: {"obs": [S, D], "mask": [S, A] bool,
    "action": [S] int32, "log_prob": [S] (log pi_old(action), stored when acting), "advantage": [S],
    "returns": [S]}. Returns policy_loss + 0.5 * value_loss - 0.01 * entropy, a scalar: the masked
    clipped loss (clip_eps 0.2), value_loss = 0.5 * mean((V - returns)^2) and the masked entropy's
    mean, weighted as in ``PPOConfig.cartpole()`` (vf_coef 0.5, ent_coef 0.01).
    """
    from labcore import losses

    # HIGHEST: float32 products on every backend (TPUs default to bfloat16 passes, recent GPUs to TF32)
    logits = jnp.dot(minibatch["obs"], params["policy"], precision=jax.lax.Precision.HIGHEST)
    values = jnp.dot(minibatch["obs"], params["value"], precision=jax.lax.Precision.HIGHEST)
    policy_loss = _clipped_loss_labcore(
        logits, minibatch["mask"], minibatch["action"], minibatch["log_prob"], minibatch["advantage"], EPOCH_CLIP_EPS
    )
    value_loss = 0.5 * jnp.mean((values - minibatch["returns"]) ** 2)
    entropy = jnp.mean(losses.masked_entropy(logits, minibatch["mask"]))
    return policy_loss + 0.5 * value_loss - 0.01 * entropy


@functools.cache
def epoch_optimizer() -> optax.GradientTransformation:
    """The optimizer the ``ppo_update_epoch`` exercise steps with: clipping then Adam, as in PPO."""
    return optax.chain(optax.clip_by_global_norm(0.5), optax.adam(3e-2, eps=1e-5))


def _update_epoch_inputs(rng: np.random.Generator) -> tuple:
    num_minibatches, minibatch_size = int(rng.integers(2, 6)), int(rng.integers(2, 12))
    batch_size = num_minibatches * minibatch_size
    features, actions = int(rng.integers(2, 6)), int(rng.integers(2, 6))
    policy = rng.normal(scale=0.5, size=(features, actions)).astype(np.float32)
    value = rng.normal(scale=0.5, size=(features,)).astype(np.float32)
    obs = rng.normal(size=(batch_size, features)).astype(np.float32)
    _, mask, action = _legal_logits(rng, batch_size, actions, 1.0)
    log_probs = _masked_log_probs_float64(obs.astype(np.float64) @ policy.astype(np.float64), mask)
    batch = {
        "obs": jnp_f32(obs),
        "mask": jnp.asarray(mask),
        "action": jnp.asarray(action),
        # the policy that acted was a little different from the current one: ratios around 1
        "log_prob": jnp_f32(log_probs[np.arange(batch_size), action] - rng.uniform(-0.3, 0.3, batch_size)),
        "advantage": jnp_f32(rng.normal(size=batch_size)),
        "returns": jnp_f32(rng.normal(size=batch_size)),
    }
    params = {"policy": jnp_f32(policy), "value": jnp_f32(value)}
    # Adam's moments and step count from an earlier step, so that an answer must carry them on
    warm_grads = {"policy": jnp_f32(rng.normal(size=policy.shape)), "value": jnp_f32(rng.normal(size=value.shape))}
    opt_state = _warmed_up_state(params, warm_grads)
    key = jax.random.key(int(rng.integers(0, 2**31)))
    return params, opt_state, batch, key, linear_actor_critic_loss, epoch_optimizer(), num_minibatches


@jax.jit
def _warmed_up_state(params, grads):
    """The optimizer state after one step on ``grads`` (one compiled call, not a dozen eager ones)."""
    optimizer = epoch_optimizer()
    return optimizer.update(grads, optimizer.init(params), params)[1]


def _update_epoch_reference(params, opt_state, batch, key, loss_fn, optimizer, num_minibatches):
    # One right answer: the judge accepts any shuffle drawn from key, and compares values with
    # epoch_in_order over the learner's own minibatches.
    order = jax.random.permutation(key, jax.tree_util.tree_leaves(batch)[0].shape[0])
    return epoch_in_order(params, opt_state, batch, order, loss_fn, optimizer, num_minibatches)


# The learner's answer, its solution and the mistakes run under jax.jit with the loss, the optimizer
# and the number of minibatches static, as the epoch runs inside PPO's one compiled program.
_EPOCH_STATIC = (4, 5, 6)


def _run_epoch_jitted(fn):
    return jax.jit(fn, static_argnums=_EPOCH_STATIC)


def ppo_update_epoch_solution(params, opt_state, batch, key, loss_fn, optimizer, num_minibatches):
    batch_size = batch["obs"].shape[0]
    shuffled = jax.random.permutation(key, batch_size)
    # one row of indices per minibatch: [num_minibatches, minibatch_size]
    index_rows = shuffled.reshape(num_minibatches, batch_size // num_minibatches)

    def one_step(state, indices):
        params, opt_state = state
        minibatch = {name: values[indices] for name, values in batch.items()}
        grads = jax.grad(loss_fn)(params, minibatch)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        params = optax.apply_updates(params, updates)
        return (params, opt_state), None

    (params, opt_state), _ = jax.lax.scan(one_step, (params, opt_state), index_rows)
    return params, opt_state


def _epoch_over_index_rows(params, opt_state, batch, loss_fn, optimizer, index_rows):
    """Steps in turn on the minibatches batch[index_rows[i]] (what the mistakes below share)."""
    for indices in index_rows:
        minibatch = {name: values[indices] for name, values in batch.items()}
        updates, opt_state = optimizer.update(jax.grad(loss_fn)(params, minibatch), opt_state, params)
        params = optax.apply_updates(params, updates)
    return params, opt_state


def ppo_update_epoch_unshuffled(params, opt_state, batch, key, loss_fn, optimizer, num_minibatches):
    batch_size = batch["obs"].shape[0]
    index_rows = jnp.arange(batch_size).reshape(num_minibatches, -1)  # the rows in their stored order
    return _epoch_over_index_rows(params, opt_state, batch, loss_fn, optimizer, index_rows)


def ppo_update_epoch_permutation_per_minibatch(params, opt_state, batch, key, loss_fn, optimizer, num_minibatches):
    batch_size = batch["obs"].shape[0]
    size = batch_size // num_minibatches
    index_rows = [jax.random.permutation(k, batch_size)[:size] for k in jax.random.split(key, num_minibatches)]
    return _epoch_over_index_rows(params, opt_state, batch, loss_fn, optimizer, index_rows)


def ppo_update_epoch_whole_batch_gradient(params, opt_state, batch, key, loss_fn, optimizer, num_minibatches):
    for _ in range(num_minibatches):
        updates, opt_state = optimizer.update(jax.grad(loss_fn)(params, batch), opt_state, params)
        params = optax.apply_updates(params, updates)
    return params, opt_state


def ppo_update_epoch_state_not_carried(params, opt_state, batch, key, loss_fn, optimizer, num_minibatches):
    from labcore.course.lessons.nb07_masked_ppo.ppo_epoch_checks import epoch_in_order_state_not_carried

    order = jax.random.permutation(key, jax.tree_util.tree_leaves(batch)[0].shape[0])
    return epoch_in_order_state_not_carried(params, opt_state, batch, order, loss_fn, optimizer, num_minibatches)


def ppo_update_epoch_averaged_step(params, opt_state, batch, key, loss_fn, optimizer, num_minibatches):
    batch_size = batch["obs"].shape[0]
    index_rows = jax.random.permutation(key, batch_size).reshape(num_minibatches, -1)
    grads = [jax.grad(loss_fn)(params, {name: values[rows] for name, values in batch.items()}) for rows in index_rows]
    mean_grads = jax.tree_util.tree_map(lambda *g: sum(g) / len(g), *grads)
    updates, opt_state = optimizer.update(mean_grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state


# ----------------------------------------------------------------------------------------------


def catalogue() -> list[Exercise]:
    """This notebook's exercises, in the order the notebook checks them."""
    return [
        Exercise(
            name="masked_log_prob_entropy",
            description="(log pi(action), entropy) of the policy softmax(logits) restricted to the legal actions: "
            "logits [B, A], mask [B, A] bool, action [B] (always legal) -> ([B], [B]).\n"
            "Push illegal logits to a large negative number (jnp.where(mask, logits, -1e9)) rather than -inf, so "
            "no inf - inf NaN appears; take log_softmax of that; the entropy sums -p log p over LEGAL actions only "
            "(jnp.where(mask, p * log_p, 0.0)), so its maximum is log(number of legal actions). Checked on the "
            "values and on their gradient with respect to the logits (the loss trains through both).",
            reference=_masked_log_prob_entropy_reference,
            make_inputs=_masked_policy_inputs,
            run_with=_with_gradient,
            jit=True,
            # Ten times the default: the entropy written as log Z - sum(p * logits), an equally right
            # formula, cancels in float32 for logits this large (scale up to 10) and differed from
            # the reference by 3.8 times the default tolerance on 40 inputs
            rtol=1e-4,
            atol=1e-5,
            solution=masked_log_prob_entropy_solution,
            mistakes=(
                ("the entropy is taken over all actions, illegal ones included", masked_log_prob_entropy_unmasked_entropy),
                ("log pi(action) is taken over all actions: the mask is ignored", masked_log_prob_entropy_unmasked_log_prob),
                ("-inf for the illegal logits: the values are right, but the gradient through exp(-inf) * -inf is NaN",
                 masked_log_prob_entropy_minus_inf),
                ("the entropy under stop_gradient: its bonus would not move the policy", masked_log_prob_entropy_no_entropy_gradient),
            ),
        ),
        Exercise(
            name="gae",
            description="Generalised advantage estimates: rewards, values, dones [T, E], last_value [E], gamma, lambda "
            "-> advantages [T, E].\n"
            "Go backwards in time: delta_t = r_t + gamma * V_{t+1} * (1 - done_t) - V_t and "
            "A_t = delta_t + gamma * lambda * (1 - done_t) * A_{t+1}, with V_T = last_value and A_T = 0. "
            "dones[t] means the episode ended AT step t, so step t does not look past it. "
            "jax.lax.scan(..., reverse=True) does the backward loop in one compiled op.",
            reference=gae_reference,
            make_inputs=_gae_inputs,
            # Ten times the default: a Python loop over the steps rounds differently from the
            # reference's reverse scan, up to 0.7 of the default tolerance on 40 inputs
            rtol=1e-4,
            atol=1e-5,
            solution=gae_solution,
            mistakes=(
                ("dones are ignored: advantages run across episode ends", gae_ignoring_dones),
                ("a done stops the bootstrap but not the recursion: (1 - done_t) must also multiply A_{t+1}",
                 gae_done_cuts_only_the_bootstrap),
                ("CleanRL's convention, 1 - dones[t + 1]: its dones mark an episode's first step, labcore's dones[t] "
                 "mark that the episode ended AT step t", gae_cleanrl_next_done),
                ("the returns A + V, where the advantages A were asked for", gae_returns),
            ),
        ),
        Exercise(
            name="ppo_clipped_loss",
            description="PPO's clipped surrogate under an action mask, as a loss to minimise: logits [B, A], mask [B, A] "
            "bool, actions [B] (legal), old_log_probs [B] (log pi_old(action), stored when acting), advantages [B], "
            "clip_eps -> [].\n"
            "log pi_new(action) comes from log_softmax(jnp.where(mask, logits, -1e9)), the same masked policy that "
            "acted; ratio = exp(log pi_new - old_log_probs); loss = -mean(min(ratio * A, clip(ratio, 1 - eps, 1 + eps) "
            "* A)). The min makes the objective pessimistic: a ratio moving in the advantage's direction stops "
            "earning past the clip, one moving against it is never clipped. Use the advantages as given (PPO "
            "normalises them per minibatch before this loss, not inside it). Checked on the value and on its "
            "gradient with respect to the logits.",
            reference=_clipped_loss_reference,
            make_inputs=_clipped_loss_inputs,
            run_with=_loss_and_gradient,
            jit=True,
            solution=ppo_clipped_loss_solution,
            mistakes=(
                ("log pi_new(action) ignores the mask, so illegal actions keep probability", ppo_clipped_loss_unmasked),
                ("max instead of min: the optimistic bound, which lets the ratio earn past the clip", ppo_clipped_loss_max),
                ("the clipped term alone, without the min against the unclipped one", ppo_clipped_loss_clip_only),
                ("the advantages are normalised inside the loss; PPO does that per minibatch before it",
                 ppo_clipped_loss_normalises_advantages),
                ("log pi_new under stop_gradient: the ratio's value is right, but its gradient is zero and nothing "
                 "trains", ppo_clipped_loss_frozen_ratio),
                ("stop_gradient on the unclipped term of the min: where it is the smaller, the loss has no gradient",
                 ppo_clipped_loss_frozen_term),
                ("the objective itself, not its negative: minimising it makes the policy worse", ppo_clipped_loss_objective),
                ("the ratio inverted, pi_old / pi_new", ppo_clipped_loss_inverted_ratio),
                ("a sum over the batch, not the mean: the step grows with the batch", ppo_clipped_loss_summed),
            ),
            core=True,
        ),
        Exercise(
            name="ppo_update_epoch",
            description="One PPO update epoch: params, opt_state, batch (a dict of arrays with leading axis N), key, "
            "loss_fn, optimizer, num_minibatches -> (params, opt_state) after num_minibatches optimizer steps.\n"
            "Draw one shuffle of the N rows from key, order = jax.random.permutation(key, N) for instance: any "
            "shuffle drawn from key passes (key itself, a key split or folded from it, an argsort of uniform "
            "draws). Reorder every array of the batch by it and cut the result into num_minibatches consecutive "
            "minibatches of N // num_minibatches rows, so that every row is used once per epoch. For each "
            "minibatch in turn: grads = jax.grad(loss_fn)(params, minibatch); updates, opt_state = "
            "optimizer.update(grads, opt_state, params); params = optax.apply_updates(params, updates). "
            "jax.lax.scan over the stacked minibatches [num_minibatches, N // num_minibatches, ...] does the loop "
            "in one compiled op. The checker reads which rows each of your steps used (it runs your function "
            "with a probe loss and plain SGD), asks for a real shuffle (not the stored order; the same key, the "
            "same minibatches; another key, others), then compares your params and opt_state with the "
            "reference epoch over YOUR minibatches. Checked under jax.jit with loss_fn, optimizer and "
            "num_minibatches static.",
            reference=_update_epoch_reference,
            make_inputs=_update_epoch_inputs,
            judge=epoch_judge(_update_epoch_inputs),
            run_with=_run_epoch_jitted,
            # Each trial draws new shapes and compiles three epochs for them (the answer on the probe and on
            # the exercise's inputs, the reference), under a second each on a CPU, besides the probe of the
            # shuffle, compiled once per check: two trials keep a check at 4 to 7 seconds on a 2-core CPU.
            trials=2,
            solution=ppo_update_epoch_solution,
            mistakes=(
                ("no shuffling: the minibatches are the batch's rows in their stored order", ppo_update_epoch_unshuffled),
                ("a new permutation for every minibatch, so some rows are used twice and others never",
                 ppo_update_epoch_permutation_per_minibatch),
                ("every step takes the gradient of the whole batch, not of its minibatch",
                 ppo_update_epoch_whole_batch_gradient),
                ("one step on the minibatches' averaged gradients, where PPO steps on each minibatch in turn",
                 ppo_update_epoch_averaged_step),
                ("the optimizer state is not carried from step to step: every step starts from the one given",
                 ppo_update_epoch_state_not_carried),
            ),
            core=True,
        ),
    ]
