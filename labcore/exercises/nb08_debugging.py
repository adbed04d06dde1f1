"""Notebook 08 (debugging): find the bug in seven small, broken pieces of JAX RL.

Each exercise hands the learner a function that runs, jits and returns the right shapes, yet is wrong:
a PRNG key reused, a gradient that flows through the TD target, a gather on the wrong axis, GAE off
by one step, a mask applied after the softmax, a bootstrap that a terminal state does not stop, and a
log of a probability that underflows to 0. ``BROKEN`` maps each exercise to that function, written
exactly as the notebook hands it out; each is the first of its exercise's classic mistakes, so an
unchanged copy fails its check and is named. They are drills, not the algorithms' own cores, so none
is ``core=True``.

Each exercise carries a worked solution, written as a learner would fix the broken function
(``labcore.exercises.solution(name)`` shows it), and the other classic wrong answers that ``check``
recognises.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from labcore.exercises.checking import Exercise, jnp_f32

# ----------------------------------------------------------------------------------------------
# 1. fix_reused_key: epsilon-greedy over a rollout, one fresh pair of keys per step


def epsilon_greedy_rollout(key, q_values, epsilon):
    """Epsilon-greedy actions for T steps of B envs: q_values [T, B, A] float32 -> actions [T, B] int32."""
    num_envs, num_actions = q_values.shape[1:]

    def step(key, q):  # q: [B, A], this step's Q-values
        coin_key, action_key = jax.random.split(key)
        explore = jax.random.uniform(coin_key, (num_envs,)) < epsilon
        random_actions = jax.random.randint(action_key, (num_envs,), 0, num_actions)
        actions = jnp.where(explore, random_actions, jnp.argmax(q, axis=-1))
        return key, actions  # the key for the next step

    _, actions = jax.lax.scan(step, key, q_values)
    return actions


def _epsilon_greedy_inputs(rng: np.random.Generator) -> tuple:
    # T >= 2 and B >= 2: a key reused across steps, or one coin for the batch, shows only then. Shapes
    # from a few sizes: the check runs each answer op by op too, which compiles every op per new shape.
    steps, envs, num_actions = int(rng.choice([2, 5, 9])), int(rng.choice([2, 3, 8])), int(rng.choice([2, 3, 6]))
    q_values = rng.normal(size=(steps, envs, num_actions)).astype(np.float32)
    return jax.random.key(int(rng.integers(1 << 30))), q_values, float(rng.uniform(0.3, 0.9))


def _epsilon_greedy_reference(key, q_values, epsilon):
    return _epsilon_greedy_variant(key, q_values, epsilon)


def _epsilon_greedy_variant(key, q_values, epsilon, *, carry_new_key=True, action_key_is_coin_key=False,
                            one_coin=False, explore_above=False):
    """The convention (key, coin_key, action_key = jax.random.split(key, 3) at every step, key carried
    on), or one of the classic ways to break it."""
    batch_shape, num_actions = q_values.shape[1:2], q_values.shape[2]

    def step(carried, q):
        key, coin_key, action_key = jax.random.split(carried, 3)
        if action_key_is_coin_key:
            action_key = coin_key
        coins = jax.random.uniform(coin_key, () if one_coin else batch_shape)
        explore = coins > epsilon if explore_above else coins < epsilon
        random_actions = jax.random.randint(action_key, batch_shape, 0, num_actions)
        return (key if carry_new_key else carried), jnp.where(explore, random_actions, jnp.argmax(q, axis=-1))

    return jax.lax.scan(step, key, q_values)[1]


def fix_reused_key_solution(key, q_values, epsilon):
    num_envs, num_actions = q_values.shape[1], q_values.shape[2]

    def step(key, q):
        # a fresh triple every step: the next step's key, and one key for each draw of this step
        key, coin_key, action_key = jax.random.split(key, 3)
        explore = jax.random.uniform(coin_key, (num_envs,)) < epsilon
        random_actions = jax.random.randint(action_key, (num_envs,), 0, num_actions)
        greedy = q.argmax(axis=-1)
        return key, jax.lax.select(explore, random_actions, greedy)

    return jax.lax.scan(step, key, q_values)[1]


def _epsilon_greedy_action_from_coin_key(key, q_values, epsilon):
    return _epsilon_greedy_variant(key, q_values, epsilon, action_key_is_coin_key=True)


def _epsilon_greedy_one_coin(key, q_values, epsilon):
    return _epsilon_greedy_variant(key, q_values, epsilon, one_coin=True)


def _epsilon_greedy_explore_above(key, q_values, epsilon):
    return _epsilon_greedy_variant(key, q_values, epsilon, explore_above=True)


# ----------------------------------------------------------------------------------------------
# 2. fix_target_stop_gradient: a semi-gradient TD loss, checked by its gradient


def td_loss(params, obs, actions, rewards, next_obs, terminated, gamma):
    """Q-learning loss of a linear Q-function Q(s) = s @ w + b, the target from the same params.

    params: {"w": [D, A], "b": [A]}; obs, next_obs: [B, D]; actions: [B] int32; rewards: [B];
    terminated: [B] float32 (1.0 at a terminal transition); gamma: float -> a scalar.
    """
    q = obs @ params["w"] + params["b"]  # [B, A]
    q_taken = jnp.take_along_axis(q, actions[:, None], axis=1)[:, 0]  # [B]
    next_q = next_obs @ params["w"] + params["b"]  # [B, A]
    target = rewards + gamma * (1.0 - terminated) * next_q.max(axis=1)
    return jnp.mean(0.5 * (q_taken - target) ** 2)


def _td_loss_inputs(rng: np.random.Generator) -> tuple:
    batch, features, num_actions = int(rng.choice([4, 16, 30])), int(rng.choice([2, 5])), int(rng.choice([2, 3, 5]))
    params = {"w": jnp_f32(rng.normal(scale=0.5, size=(features, num_actions))),
              "b": jnp_f32(rng.normal(scale=0.5, size=num_actions))}
    terminated = rng.random(batch) < 0.3
    terminated[:2] = [True, False]  # every batch bootstraps somewhere, so the target's gradient shows
    return (
        params,
        jnp_f32(rng.normal(size=(batch, features))),
        jnp.asarray(rng.integers(0, num_actions, size=batch), jnp.int32),
        jnp_f32(rng.normal(size=batch)),
        jnp_f32(rng.normal(size=(batch, features))),
        jnp_f32(terminated),
        float(rng.uniform(0.9, 0.999)),
    )


def _loss_and_gradient(loss_fn):
    """Run ``loss_fn`` as (its value, its gradient with respect to its first argument, the params):
    a missing stop_gradient leaves the value as it is and changes only the gradient."""

    def run(params, *rest):
        return loss_fn(params, *rest), jax.grad(loss_fn)(params, *rest)

    return run


def _td_loss_reference_value(params, obs, actions, rewards, next_obs, terminated, gamma):
    from labcore import losses

    q = jnp.dot(obs, params["w"]) + params["b"]
    next_q = jnp.dot(next_obs, params["w"]) + params["b"]
    targets = jax.vmap(losses.q_learning_target)(rewards, gamma * (1.0 - terminated), next_q)
    errors = jax.vmap(losses.td_error)(q, actions, targets)  # td_error stops the target's gradient
    return jnp.mean(0.5 * errors**2)


_td_loss_reference = _loss_and_gradient(_td_loss_reference_value)


def fix_target_stop_gradient_solution(params, obs, actions, rewards, next_obs, terminated, gamma):
    q = obs @ params["w"] + params["b"]
    q_taken = jnp.take_along_axis(q, actions[:, None], axis=1)[:, 0]
    next_q = next_obs @ params["w"] + params["b"]
    target = rewards + gamma * (1.0 - terminated) * next_q.max(axis=1)
    target = jax.lax.stop_gradient(target)  # a fixed regression target: the semi-gradient
    return jnp.mean(0.5 * (q_taken - target) ** 2)


def _td_loss_stops_the_prediction(params, obs, actions, rewards, next_obs, terminated, gamma):
    q = jax.lax.stop_gradient(obs @ params["w"] + params["b"])
    q_taken = jnp.take_along_axis(q, actions[:, None], axis=1)[:, 0]
    next_q = next_obs @ params["w"] + params["b"]
    target = rewards + gamma * (1.0 - terminated) * next_q.max(axis=1)
    return jnp.mean(0.5 * (q_taken - target) ** 2)


def _td_loss_stops_everything(params, obs, actions, rewards, next_obs, terminated, gamma):
    q = obs @ params["w"] + params["b"]
    q_taken = jnp.take_along_axis(q, actions[:, None], axis=1)[:, 0]
    next_q = next_obs @ params["w"] + params["b"]
    target = rewards + gamma * (1.0 - terminated) * next_q.max(axis=1)
    return jnp.mean(0.5 * jax.lax.stop_gradient(q_taken - target) ** 2)


# ----------------------------------------------------------------------------------------------
# 3. fix_gather_axis: Q(s_i, a_i) for each row


def chosen_q_values(q_values, actions):
    """Q(s_i, a_i) for each row i: q_values [B, A] float32, actions [B] int32 -> [B]."""
    return jnp.take(q_values, actions)  # the Q-value of each transition's action


def _gather_inputs(rng: np.random.Generator) -> tuple:
    # B > A, never square: a gather on the wrong axis gives the wrong shape or the wrong rows
    num_actions = int(rng.integers(2, 9))
    batch = int(rng.integers(num_actions + 1, 41))
    q_values = rng.normal(size=(batch, num_actions)).astype(np.float32)
    return q_values, rng.integers(0, num_actions, size=batch).astype(np.int32)


def _gather_reference(q_values, actions):
    return jax.vmap(lambda q, a: q[a])(q_values, actions)


def fix_gather_axis_solution(q_values, actions):
    # one index per row, along the action axis; [:, 0] drops the length-1 axis the indices needed
    return jnp.take_along_axis(q_values, actions[:, None], axis=1)[:, 0]


def _gather_every_pair(q_values, actions):
    return q_values[:, actions]


def _gather_rows(q_values, actions):
    return q_values[actions]


# ----------------------------------------------------------------------------------------------
# 4. fix_gae_off_by_one


def compute_gae(rewards, values, dones, last_value, gamma, lam):
    """Generalised advantage estimates: rewards, values, dones [T, N], last_value [N] -> [T, N]."""
    not_done = 1.0 - dones.astype(jnp.float32)
    next_values = jnp.concatenate([values[:-1], last_value[None]], axis=0)  # V_{t+1}
    deltas = rewards + gamma * next_values * not_done - values

    def backwards(next_advantage, step):
        delta, keep = step
        advantage = delta + gamma * lam * keep * next_advantage
        return advantage, advantage

    _, advantages = jax.lax.scan(backwards, jnp.zeros_like(last_value), (deltas, not_done), reverse=True)
    return advantages


def _gae_inputs(rng: np.random.Generator) -> tuple:
    steps, envs = int(rng.integers(2, 40)), int(rng.integers(1, 6))
    dones = rng.random((steps, envs)) < 0.15
    dones[rng.integers(0, steps - 1), rng.integers(0, envs)] = True  # an episode ends before the last step
    return (
        rng.normal(size=(steps, envs)).astype(np.float32),
        rng.normal(size=(steps, envs)).astype(np.float32),
        dones,
        rng.normal(size=(envs,)).astype(np.float32),
        float(rng.uniform(0.9, 0.999)),
        float(rng.uniform(0.8, 1.0)),
    )


def _gae_reference(rewards, values, dones, last_value, gamma, lam):
    from labcore import losses

    return losses.gae_advantages(rewards, values, dones, last_value, gamma, lam)[0]


def fix_gae_off_by_one_solution(rewards, values, dones, last_value, gamma, lam):
    not_done = 1.0 - dones.astype(jnp.float32)
    # step t bootstraps from the value of the state AFTER it: values[1:], then last_value for step T - 1
    next_values = jnp.concatenate([values[1:], last_value[None]], axis=0)
    deltas = rewards + gamma * next_values * not_done - values

    def backwards(next_advantage, step):
        delta, keep = step
        advantage = delta + gamma * lam * keep * next_advantage
        return advantage, advantage

    _, advantages = jax.lax.scan(backwards, jnp.zeros_like(last_value), (deltas, not_done), reverse=True)
    return advantages


def _gae_variant(rewards, values, dones, last_value, gamma, lam, *, cut_trace=True, done_late=False,
                 use_dones=True, use_last_value=True):
    not_done = 1.0 - dones.astype(jnp.float32)
    if not use_dones:
        not_done = jnp.ones_like(not_done)
    if done_late:  # step t reads done_{t+1}; nothing is known past the rollout, so its last step never cuts
        not_done = jnp.concatenate([not_done[1:], jnp.ones_like(not_done[:1])], axis=0)
    bootstrap = last_value if use_last_value else jnp.zeros_like(last_value)
    next_values = jnp.concatenate([values[1:], bootstrap[None]], axis=0)
    deltas = rewards + gamma * next_values * not_done - values

    def backwards(next_advantage, step):
        delta, keep = step
        advantage = delta + gamma * lam * (keep if cut_trace else 1.0) * next_advantage
        return advantage, advantage

    return jax.lax.scan(backwards, jnp.zeros_like(last_value), (deltas, not_done), reverse=True)[1]


def _gae_trace_not_cut(rewards, values, dones, last_value, gamma, lam):
    return _gae_variant(rewards, values, dones, last_value, gamma, lam, cut_trace=False)


def _gae_done_one_step_late(rewards, values, dones, last_value, gamma, lam):
    return _gae_variant(rewards, values, dones, last_value, gamma, lam, done_late=True)


def _gae_ignoring_dones(rewards, values, dones, last_value, gamma, lam):
    return _gae_variant(rewards, values, dones, last_value, gamma, lam, use_dones=False)


def _gae_ignoring_last_value(rewards, values, dones, last_value, gamma, lam):
    return _gae_variant(rewards, values, dones, last_value, gamma, lam, use_last_value=False)


# ----------------------------------------------------------------------------------------------
# 5. fix_mask_after_softmax


def masked_log_probs(logits, mask):
    """log pi(a | s) of the policy restricted to the legal actions.

    logits: [B, A] float32; mask: [B, A] bool, True where the action is legal -> [B, A].
    """
    probs = jax.nn.softmax(logits, axis=-1)
    probs = probs * mask  # illegal actions: probability 0
    return jnp.log(probs)


def _masked_inputs(rng: np.random.Generator) -> tuple:
    batch, num_actions = int(rng.choice([2, 9, 33])), int(rng.choice([2, 5, 11]))
    logits = rng.normal(scale=rng.uniform(0.5, 5.0), size=(batch, num_actions)).astype(np.float32)
    mask = rng.random((batch, num_actions)) < rng.uniform(0.3, 0.9)
    mask[np.arange(batch), rng.integers(0, num_actions, batch)] = True  # at least one legal action per row
    mask[0, :] = True  # a row with every action legal, where masking changes nothing,
    mask[1, :] = np.arange(num_actions) < num_actions - 1  # and one whose last action alone is illegal
    return logits, mask


def _legal_and_illegal(log_probs_fn):
    """Run ``log_probs_fn`` and keep what a right answer pins down: the legal actions' log-probabilities
    and the illegal actions' probabilities (which must be 0). The illegal log-probabilities themselves
    differ between right answers (-1e9, the float32 minimum, -inf)."""

    def run(logits, mask):
        log_probs = log_probs_fn(logits, mask)
        return {"legal_log_probs": jnp.where(mask, log_probs, 0.0),
                "illegal_probs": jnp.where(mask, 0.0, jnp.exp(log_probs))}

    return run


def _masked_log_probs_reference_full(logits, mask):
    from labcore import losses

    return losses.masked_log_probs(logits, mask)


_masked_log_probs_reference = _legal_and_illegal(_masked_log_probs_reference_full)


def fix_mask_after_softmax_solution(logits, mask):
    # Mask BEFORE normalising: a huge negative logit has probability exactly 0 after the softmax,
    # and the legal actions share all the mass. (-inf works here too, but an entropy's p * log p of an
    # illegal action is then 0 * -inf = NaN.)
    masked = jnp.where(mask, logits, -1e9)
    return masked - jax.scipy.special.logsumexp(masked, axis=-1, keepdims=True)


def _masked_log_probs_zero_logits(logits, mask):
    return jax.nn.log_softmax(logits * mask, axis=-1)


def _masked_log_probs_inverted(logits, mask):
    return jax.nn.log_softmax(jnp.where(mask, -1e9, logits), axis=-1)


# ----------------------------------------------------------------------------------------------
# 6. fix_done_bootstrap: cut the bootstrap on termination, not on truncation


def td_target(rewards, next_q, terminated, truncated, gamma):
    """One-step Q-learning targets: rewards [B] float32, next_q [B, A] float32 (the target network's
    Q(s', .)), terminated [B] bool, truncated [B] bool, gamma: float -> [B]."""
    done = jnp.logical_or(terminated, truncated)  # the episode is over
    return rewards + gamma * jnp.max(next_q, axis=-1)


def _td_target_inputs(rng: np.random.Generator) -> tuple:
    batch, num_actions = int(rng.integers(4, 64)), int(rng.integers(2, 8))
    terminated, truncated = rng.random(batch) < 0.3, rng.random(batch) < 0.3
    # every batch holds a terminal, a truncated and an ongoing transition
    terminated[:3], truncated[:3] = [True, False, False], [False, True, False]
    return (
        jnp_f32(rng.normal(size=batch)),
        jnp_f32(rng.normal(size=(batch, num_actions))),
        jnp.asarray(terminated),
        jnp.asarray(truncated),
        float(rng.uniform(0.9, 0.999)),
    )


def _td_target_reference(rewards, next_q, terminated, truncated, gamma):
    from labcore import losses

    return jax.vmap(losses.q_learning_target)(rewards, gamma * (1.0 - terminated.astype(jnp.float32)), next_q)


def fix_done_bootstrap_solution(rewards, next_q, terminated, truncated, gamma):
    # Only a terminal state is worth 0 from then on. A time limit (truncated) cut the episode short,
    # but the state after it still has a value: bootstrap from it.
    bootstrap = jnp.where(terminated, 0.0, gamma * next_q.max(axis=-1))
    return rewards + bootstrap


def _td_target_cut_on_both(rewards, next_q, terminated, truncated, gamma):
    done = jnp.logical_or(terminated, truncated)
    return rewards + gamma * (1.0 - done) * jnp.max(next_q, axis=-1)


def _td_target_cut_on_truncation(rewards, next_q, terminated, truncated, gamma):
    return rewards + gamma * (1.0 - truncated) * jnp.max(next_q, axis=-1)


def _td_target_cuts_the_reward(rewards, next_q, terminated, truncated, gamma):
    return (1.0 - terminated) * (rewards + gamma * jnp.max(next_q, axis=-1))


# ----------------------------------------------------------------------------------------------
# 7. fix_nan_log_prob: log of a probability that underflows


def action_log_probs(logits, actions):
    """log pi(a_i | s_i) for each row i: logits [B, A] float32, actions [B] int32 -> [B]."""
    probs = jax.nn.softmax(logits, axis=-1)
    log_probs = jnp.log(probs)
    return jnp.take_along_axis(log_probs, actions[:, None], axis=-1)[:, 0]


def _log_prob_inputs(rng: np.random.Generator) -> tuple:
    batch, num_actions = int(rng.choice([3, 10, 37])), int(rng.choice([2, 4, 7]))
    logits = rng.normal(scale=2.0, size=(batch, num_actions))
    favourite = rng.integers(0, num_actions, batch)
    # A confident policy: in about half the rows one action's logit stands 120 to 200 above the rest,
    # whose probabilities then underflow to exactly 0 in float32 (below 1.4e-45, e**-103).
    confident = rng.random(batch) < 0.5
    confident[0] = True
    logits[confident, favourite[confident]] += rng.uniform(120.0, 200.0, confident.sum())
    actions = rng.integers(0, num_actions, batch)
    actions[0] = (favourite[0] + 1) % num_actions  # one action the confident policy all but never takes
    return logits.astype(np.float32), actions.astype(np.int32)


def _log_prob_reference(logits, actions):
    return jax.vmap(lambda row, a: jax.nn.log_softmax(row)[a])(logits, actions)


def fix_nan_log_prob_solution(logits, actions):
    # log softmax = logits - logsumexp(logits): no probability is formed, so none can underflow to 0
    log_probs = logits - jax.scipy.special.logsumexp(logits, axis=-1, keepdims=True)
    return log_probs[jnp.arange(actions.shape[0]), actions]


def _log_prob_with_epsilon(logits, actions):
    log_probs = jnp.log(jax.nn.softmax(logits, axis=-1) + 1e-8)
    return jnp.take_along_axis(log_probs, actions[:, None], axis=-1)[:, 0]


def _log_prob_over_the_batch(logits, actions):
    log_probs = jax.nn.log_softmax(logits, axis=0)
    return jnp.take_along_axis(log_probs, actions[:, None], axis=-1)[:, 0]


# ----------------------------------------------------------------------------------------------

# The broken functions the notebook hands out, exercise by exercise: what the learner fixes.
BROKEN = {
    "fix_reused_key": epsilon_greedy_rollout,
    "fix_target_stop_gradient": td_loss,
    "fix_gather_axis": chosen_q_values,
    "fix_gae_off_by_one": compute_gae,
    "fix_mask_after_softmax": masked_log_probs,
    "fix_done_bootstrap": td_target,
    "fix_nan_log_prob": action_log_probs,
}


def catalogue() -> list[Exercise]:
    """This notebook's exercises, in the order the notebook checks them."""
    return [
        Exercise(
            name="fix_reused_key",
            description="Fix epsilon_greedy_rollout(key, q_values, epsilon): q_values [T, B, A] float32 -> actions [T, B] "
            "int32, epsilon-greedy at every step of a jax.lax.scan; the version handed out reuses a PRNG key. "
            "Convention: at every step, key, coin_key, action_key = jax.random.split(key, 3); explore = "
            "jax.random.uniform(coin_key, (B,)) < epsilon; random actions = jax.random.randint(action_key, (B,), 0, A); "
            "jnp.where(explore, random, argmax); carry key to the next step.\n"
            "A key that is never replaced gives the same numbers every time it is used: look at what the scan "
            "carries from one step to the next. With epsilon = 1, a right answer repeats an env's action at "
            "the next step about 1/A of the time; the broken one always does.",
            reference=_epsilon_greedy_reference,
            make_inputs=_epsilon_greedy_inputs,
            jit=True,
            solution=fix_reused_key_solution,
            mistakes=(
                ("reused key: the carried key never changes, so every step draws the same coins and the same "
                 "random actions", epsilon_greedy_rollout),
                ("reused key within a step: the random actions are drawn with coin_key, the coin's own key",
                 _epsilon_greedy_action_from_coin_key),
                ("one coin for the whole batch (jax.random.uniform(coin_key) with no shape): every env explores "
                 "at the same steps", _epsilon_greedy_one_coin),
                ("explores when the coin is above epsilon, that is with probability 1 - epsilon",
                 _epsilon_greedy_explore_above),
            ),
        ),
        Exercise(
            name="fix_target_stop_gradient",
            description="Fix td_loss(params, obs, actions, rewards, next_obs, terminated, gamma) -> scalar, the squared "
            "TD loss of a linear Q-function (q = obs @ params['w'] + params['b']) whose target comes from the same "
            "params; the version handed out differentiates through the target. The checker compares the loss AND "
            "jax.grad(td_loss) with respect to params (a dict: 'w' [D, A], 'b' [A]).\n"
            "The loss's value is already right: only its gradient is wrong. Q-learning regresses Q(s, a) onto a "
            "target held fixed (the semi-gradient), so wrap the target, or Q(s', .), in jax.lax.stop_gradient; "
            "the prediction Q(s, a) keeps its gradient.",
            reference=_td_loss_reference,
            make_inputs=_td_loss_inputs,
            run_with=_loss_and_gradient,
            jit=True,
            solution=fix_target_stop_gradient_solution,
            mistakes=(
                ("no stop_gradient: the gradient also flows through the target (the loss's value is the same, its "
                 "gradient is not)", td_loss),
                ("stop_gradient around the prediction Q(s, a) instead of the target: the gradient flows only "
                 "through the target", _td_loss_stops_the_prediction),
                ("stop_gradient around the whole TD error: the loss is right and its gradient is zero",
                 _td_loss_stops_everything),
            ),
        ),
        Exercise(
            name="fix_gather_axis",
            description="Fix chosen_q_values(q_values, actions): q_values [B, A] float32, actions [B] int32 -> [B], "
            "the value of each row's own action, Q(s_i, a_i); the version handed out gathers from the wrong place.\n"
            "Its output has the right shape, so look at the values: compare out[i] with q_values[i, actions[i]] "
            "and with q_values[0, actions[i]]. jnp.take without axis= reads the flattened array; index row i and "
            "column actions[i] together (q_values[jnp.arange(B), actions], or jnp.take_along_axis along axis 1).",
            reference=_gather_reference,
            make_inputs=_gather_inputs,
            jit=True,
            solution=fix_gather_axis_solution,
            mistakes=(
                ("jnp.take without axis= indexes the flattened array: every action is read from row 0",
                 chosen_q_values),
                ("q_values[:, actions] is a [B, B] table of every row's Q-value for every action taken, not one "
                 "value per row", _gather_every_pair),
                ("q_values[actions] picks whole rows (row a_i), not column a_i of row i", _gather_rows),
            ),
        ),
        Exercise(
            name="fix_gae_off_by_one",
            description="Fix compute_gae(rewards, values, dones, last_value, gamma, lam): rewards, values, dones [T, N], "
            "last_value [N] -> advantages [T, N]; the version handed out is off by one step.\n"
            "delta_t = r_t + gamma * V_{t+1} * (1 - done_t) - V_t, with V_T = last_value, and A_t = delta_t + "
            "gamma * lam * (1 - done_t) * A_{t+1}. Print next_values beside values for a short rollout: row t "
            "must hold values[t + 1]. A test that finds it: with rewards 0, no dones and V_t = gamma**(T - t) * "
            "last_value (a value function that is exactly right), every advantage is 0.",
            reference=_gae_reference,
            make_inputs=_gae_inputs,
            jit=True,
            # Ten times the default: the worked solution differed from the reference by up to 1.1e-6
            # (absolute) on 40 inputs, op by op and jitted; each mistake, on an input where it differs
            # at all, moved some advantage by 0.06 or more
            rtol=1e-4,
            atol=1e-5,
            solution=fix_gae_off_by_one_solution,
            mistakes=(
                ("off by one: step t bootstraps from V_t (values[:-1]) where V_{t+1} (values[1:]) belongs",
                 compute_gae),
                ("a done stops the bootstrap but not the trace: (1 - done_t) must also multiply A_{t+1}",
                 _gae_trace_not_cut),
                ("the done cuts one step late: step t reads done_{t+1} where done_t belongs", _gae_done_one_step_late),
                ("dones ignored: the advantages run across episode ends", _gae_ignoring_dones),
                ("last_value ignored: the last step bootstraps from 0, as if every rollout ended an episode",
                 _gae_ignoring_last_value),
            ),
        ),
        Exercise(
            name="fix_mask_after_softmax",
            description="Fix masked_log_probs(logits, mask): logits [B, A] float32, mask [B, A] bool (True = legal) -> "
            "log pi [B, A] of the policy softmax(logits) restricted to the legal actions; the version handed out "
            "masks after the softmax. The checker compares the legal actions' log-probabilities and the illegal "
            "actions' probabilities, which must be 0.\n"
            "Sum exp(log_probs) over a row with an illegal action: it should be 1. Mask BEFORE normalising: "
            "jnp.where(mask, logits, -1e9) (or the float32 minimum), then jax.nn.log_softmax. Setting illegal "
            "logits to 0 is not masking: exp(0) is not small.",
            reference=_masked_log_probs_reference,
            make_inputs=_masked_inputs,
            run_with=_legal_and_illegal,
            jit=True,
            solution=fix_mask_after_softmax_solution,
            mistakes=(
                ("masked after the softmax: the illegal probabilities are zeroed, but the legal ones no longer sum "
                 "to 1", masked_log_probs),
                ("illegal logits set to 0 (logits * mask): a logit of 0 is not small, so illegal actions keep "
                 "probability", _masked_log_probs_zero_logits),
                ("the mask is inverted: the LEGAL actions get -1e9", _masked_log_probs_inverted),
            ),
        ),
        Exercise(
            name="fix_done_bootstrap",
            description="Fix td_target(rewards, next_q, terminated, truncated, gamma): rewards [B], next_q [B, A] "
            "float32, terminated and truncated [B] bool -> r + gamma * max_a Q(s', a), cut to r at a terminal "
            "transition; the version handed out never cuts.\n"
            "Convention (gymnasium's): cut the bootstrap on terminated only. A truncated transition (a time "
            "limit) ended the episode early, but the state after it still has a value, so it bootstraps. "
            "target = r + gamma * (1 - terminated) * max(next_q). (A linter flags the handed-out version's done as "
            "never used.)",
            reference=_td_target_reference,
            make_inputs=_td_target_inputs,
            jit=True,
            solution=fix_done_bootstrap_solution,
            mistakes=(
                ("no cut: a terminal transition still bootstraps from the next state (the next episode's start)",
                 td_target),
                ("cut on truncation too: a time limit is not a terminal state, so a truncated transition still "
                 "bootstraps", _td_target_cut_on_both),
                ("cut on truncation instead of termination", _td_target_cut_on_truncation),
                ("(1 - terminated) multiplies the reward too: a terminal transition's own reward is lost",
                 _td_target_cuts_the_reward),
            ),
        ),
        Exercise(
            name="fix_nan_log_prob",
            description="Fix action_log_probs(logits, actions): logits [B, A] float32, actions [B] int32 -> "
            "log pi(a_i | s_i) [B]; the version handed out returns -inf for an unlikely action, and the loss "
            "built on it turns to NaN.\n"
            "softmax underflows to exactly 0 for a logit about 104 or more below its row's largest, and log(0) is "
            "-inf; its gradient is inf * 0 = NaN (jax.config.update('jax_debug_nans', True) stops at it). Adding "
            "1e-8 before the log hides the -inf but floors every log-probability near -18.4: compute the "
            "log-probabilities directly, jax.nn.log_softmax(logits) or logits - logsumexp(logits).",
            reference=_log_prob_reference,
            make_inputs=_log_prob_inputs,
            jit=True,
            solution=fix_nan_log_prob_solution,
            mistakes=(
                ("log(softmax(logits)): an unlikely action's probability underflows to 0 and its log to -inf",
                 action_log_probs),
                ("log(softmax + 1e-8): finite, but every log-probability is floored near -18.4", _log_prob_with_epsilon),
                ("log_softmax over the batch axis (axis=0) instead of the actions", _log_prob_over_the_batch),
            ),
        ),
    ]
