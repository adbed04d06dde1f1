"""The checking side of notebook 10's find-the-bug exercises (labcore.course.lessons.nb10_debugging.exercises).

For each exercise: the input maker (random shapes and values), the reference the learner's fix is
compared with, a worked fix written as a learner would write it (``solution(name)`` shows it), and
the other classic wrong answers ``check`` recognises. The broken functions handed out, and the
exercise records, are in nb10_debugging; this module holds what they are checked with.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from labcore.course.exercises import behaviour
from labcore.course.exercises.checking import jnp_f32
from labcore.course.lessons.nb07_masked_ppo.exercises import gae_reference  # notebook 07's GAE exercise checks the same function

def epsilon_greedy_inputs(rng: np.random.Generator) -> tuple:
    # T >= 2 and B >= 2: a key reused across steps, or one coin for the batch, shows only then. Shapes
    # from a few sizes: the check runs each answer op by op too, which compiles every op per new shape.
    steps, envs, num_actions = int(rng.choice([2, 5, 9])), int(rng.choice([2, 3, 8])), int(rng.choice([2, 3, 6]))
    q_values = rng.normal(size=(steps, envs, num_actions)).astype(np.float32)
    return jax.random.key(int(rng.integers(1 << 30))), q_values, float(rng.uniform(0.3, 0.9))


def epsilon_greedy_reference(key, q_values, epsilon):
    return epsilon_greedy_variant(key, q_values, epsilon)


def epsilon_greedy_variant(key, q_values, epsilon, *, carry_new_key=True, action_key_is_coin_key=False,
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


def epsilon_greedy_action_from_coin_key(key, q_values, epsilon):
    return epsilon_greedy_variant(key, q_values, epsilon, action_key_is_coin_key=True)


def epsilon_greedy_one_coin(key, q_values, epsilon):
    return epsilon_greedy_variant(key, q_values, epsilon, one_coin=True)


def epsilon_greedy_explore_above(key, q_values, epsilon):
    return epsilon_greedy_variant(key, q_values, epsilon, explore_above=True)


def judge_epsilon_greedy_rollout(rollout, rng: np.random.Generator) -> str | None:
    """Any epsilon-greedy rollout passes, however it splits or folds its keys: no key consumed twice,
    the greedy action when epsilon = 0, uniform random actions that are fresh at every step and for
    every env when epsilon = 1, each env exploring on its own coin with probability epsilon, and the
    draws a function of the key."""
    # Run jitted, epsilon traced: one compile per shape for all the probes below (a rollout must work
    # under jit; run op by op, each epsilon would compile the scan again).
    rollout = jax.jit(rollout)
    # 1. Small shapes, with JAX's key-reuse checker on: a key carried unchanged through the scan, or
    # one key for the coin and the action, is found whatever the values drawn.
    key, q_small, epsilon = epsilon_greedy_inputs(rng)
    problem, actions = behaviour.key_reuse_problem(rollout, key, q_small, jnp.float32(epsilon))
    if problem:
        return problem
    problem = behaviour.shape_problem(actions, q_small.shape[:2], "iu", "the actions")
    if problem:
        return problem
    # 2. Large batches for the statistics: T steps of B envs, A actions.
    steps, envs, num_actions = 40, 64, int(rng.choice([3, 4, 6]))
    q_values = jnp_f32(rng.normal(size=(steps, envs, num_actions)))
    greedy = np.asarray(q_values.argmax(axis=-1))
    key = jax.random.key(int(rng.integers(1 << 30)))

    def run(epsilon, key=key):
        return np.asarray(rollout(behaviour.copy_key(key), q_values, jnp.float32(epsilon)))

    if not np.array_equal(run(0.0), greedy):
        return "with epsilon = 0 the actions are not all argmax(q): exploring must happen with probability epsilon"
    uniform = run(1.0)
    if uniform.min() < 0 or uniform.max() >= num_actions:
        return f"with epsilon = 1 an action {int(uniform.min() if uniform.min() < 0 else uniform.max())} is drawn, " \
               f"outside 0 .. {num_actions - 1}"
    repeats = int(np.sum(uniform[1:] == uniform[:-1]))
    problem = behaviour.frequency_problem(repeats, uniform[1:].size, 1 / num_actions,
                                          "with epsilon = 1, the fraction of envs repeating their last action")
    if problem:
        return problem + ": the steps' draws are not fresh"
    same_step = int(np.sum(uniform[:, 1:] == uniform[:, :-1]))
    problem = behaviour.frequency_problem(same_step, uniform[:, 1:].size, 1 / num_actions,
                                          "with epsilon = 1, the fraction of envs taking their neighbour's action")
    if problem:
        return problem + ": the envs share their random actions"
    for action in range(num_actions):
        problem = behaviour.frequency_problem(int(np.sum(uniform == action)), uniform.size, 1 / num_actions,
                                              f"with epsilon = 1, the frequency of action {action}")
        if problem:
            return problem + " (random actions are uniform over all A actions; randint's maxval is exclusive)"
    # 3. Exploring with probability epsilon, each env on its own coin. epsilon stays away from 0.5,
    # where exploring with probability 1 - epsilon would look the same.
    epsilon = float(rng.choice([0.2, 0.3, 0.7, 0.8]))
    mixed = run(epsilon)
    problem = behaviour.dispersion_problem(np.sum(mixed == greedy, axis=1), envs, 1 - epsilon + epsilon / num_actions,
                                           f"with epsilon = {epsilon}, the number of envs acting greedily at a step")
    if problem:
        return problem + ": the envs share one coin, where each needs its own"
    problem = behaviour.frequency_problem(int(np.sum(mixed == greedy)), mixed.size,
                                          1 - epsilon + epsilon / num_actions,
                                          f"with epsilon = {epsilon}, the fraction of greedy actions")
    if problem:
        return problem + " (explore when the coin is below epsilon, that is with probability epsilon)"
    # 4. The draws are a function of the key.
    if not np.array_equal(run(1.0), uniform):
        return "the same key gave two different rollouts: the draws must come from `key` alone"
    if np.array_equal(run(1.0, jax.random.fold_in(key, 1)), uniform):
        return "two different keys gave the same random actions: the draws are not made from `key`"
    return None


def td_loss_inputs(rng: np.random.Generator) -> tuple:
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


def loss_and_gradient(loss_fn):
    """Run ``loss_fn`` as (its value, its gradient with respect to its first argument, the params):
    a missing stop_gradient leaves the value as it is and changes only the gradient."""

    def run(params, *rest):
        return loss_fn(params, *rest), jax.grad(loss_fn)(params, *rest)

    return run


def td_loss_reference_value(params, obs, actions, rewards, next_obs, terminated, gamma):
    from labcore import losses

    q = jnp.dot(obs, params["w"]) + params["b"]
    next_q = jnp.dot(next_obs, params["w"]) + params["b"]
    targets = jax.vmap(losses.q_learning_target)(rewards, gamma * (1.0 - terminated), next_q)
    errors = jax.vmap(losses.td_error)(q, actions, targets)  # td_error stops the target's gradient
    return jnp.mean(0.5 * errors**2)


td_loss_reference = loss_and_gradient(td_loss_reference_value)


def fix_target_stop_gradient_solution(params, obs, actions, rewards, next_obs, terminated, gamma):
    q = obs @ params["w"] + params["b"]
    q_taken = jnp.take_along_axis(q, actions[:, None], axis=1)[:, 0]
    next_q = next_obs @ params["w"] + params["b"]
    target = rewards + gamma * (1.0 - terminated) * next_q.max(axis=1)
    target = jax.lax.stop_gradient(target)  # a fixed regression target: the semi-gradient
    return jnp.mean(0.5 * (q_taken - target) ** 2)


def td_loss_stops_the_prediction(params, obs, actions, rewards, next_obs, terminated, gamma):
    q = jax.lax.stop_gradient(obs @ params["w"] + params["b"])
    q_taken = jnp.take_along_axis(q, actions[:, None], axis=1)[:, 0]
    next_q = next_obs @ params["w"] + params["b"]
    target = rewards + gamma * (1.0 - terminated) * next_q.max(axis=1)
    return jnp.mean(0.5 * (q_taken - target) ** 2)


def td_loss_stops_everything(params, obs, actions, rewards, next_obs, terminated, gamma):
    q = obs @ params["w"] + params["b"]
    q_taken = jnp.take_along_axis(q, actions[:, None], axis=1)[:, 0]
    next_q = next_obs @ params["w"] + params["b"]
    target = rewards + gamma * (1.0 - terminated) * next_q.max(axis=1)
    return jnp.mean(0.5 * jax.lax.stop_gradient(q_taken - target) ** 2)


def gather_inputs(rng: np.random.Generator) -> tuple:
    # B > A, never square: a gather on the wrong axis gives the wrong shape or the wrong rows
    num_actions = int(rng.integers(2, 9))
    batch = int(rng.integers(num_actions + 1, 41))
    q_values = rng.normal(size=(batch, num_actions)).astype(np.float32)
    return q_values, rng.integers(0, num_actions, size=batch).astype(np.int32)


def gather_reference(q_values, actions):
    return jax.vmap(lambda q, a: q[a])(q_values, actions)


def fix_gather_axis_solution(q_values, actions):
    # one index per row, along the action axis; [:, 0] drops the length-1 axis the indices needed
    return jnp.take_along_axis(q_values, actions[:, None], axis=1)[:, 0]


def gather_every_pair(q_values, actions):
    return q_values[:, actions]


def gather_rows(q_values, actions):
    return q_values[actions]


def gae_inputs(rng: np.random.Generator) -> tuple:
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


def gae_variant(rewards, values, dones, last_value, gamma, lam, *, cut_trace=True, done_late=False,
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


def gae_trace_not_cut(rewards, values, dones, last_value, gamma, lam):
    return gae_variant(rewards, values, dones, last_value, gamma, lam, cut_trace=False)


def gae_done_one_step_late(rewards, values, dones, last_value, gamma, lam):
    return gae_variant(rewards, values, dones, last_value, gamma, lam, done_late=True)


def gae_ignoring_dones(rewards, values, dones, last_value, gamma, lam):
    return gae_variant(rewards, values, dones, last_value, gamma, lam, use_dones=False)


def gae_ignoring_last_value(rewards, values, dones, last_value, gamma, lam):
    return gae_variant(rewards, values, dones, last_value, gamma, lam, use_last_value=False)


def masked_inputs(rng: np.random.Generator) -> tuple:
    batch, num_actions = int(rng.choice([2, 9, 33])), int(rng.choice([2, 5, 11]))
    logits = rng.normal(scale=rng.uniform(0.5, 5.0), size=(batch, num_actions)).astype(np.float32)
    mask = rng.random((batch, num_actions)) < rng.uniform(0.3, 0.9)
    mask[np.arange(batch), rng.integers(0, num_actions, batch)] = True  # at least one legal action per row
    mask[0, :] = True  # a row with every action legal, where masking changes nothing,
    mask[1, :] = np.arange(num_actions) < num_actions - 1  # and one whose last action alone is illegal
    return logits, mask


def legal_and_illegal(log_probs_fn):
    """Run ``log_probs_fn`` and keep what a right answer pins down: the legal actions' log-probabilities
    and the illegal actions' probabilities (which must be 0). The illegal log-probabilities themselves
    differ between right answers (-1e9, the float32 minimum, -inf)."""

    def run(logits, mask):
        log_probs = log_probs_fn(logits, mask)
        return {"legal_log_probs": jnp.where(mask, log_probs, 0.0),
                "illegal_probs": jnp.where(mask, 0.0, jnp.exp(log_probs))}

    return run


def masked_log_probs_reference_full(logits, mask):
    from labcore import losses

    return losses.masked_log_probs(logits, mask)


masked_log_probs_reference = legal_and_illegal(masked_log_probs_reference_full)


def fix_mask_after_softmax_solution(logits, mask):
    # Mask BEFORE normalising: a huge negative logit has probability exactly 0 after the softmax,
    # and the legal actions share all the mass. (-inf works here too, but an entropy's p * log p of an
    # illegal action is then 0 * -inf = NaN.)
    masked = jnp.where(mask, logits, -1e9)
    return masked - jax.scipy.special.logsumexp(masked, axis=-1, keepdims=True)


def masked_log_probs_zero_logits(logits, mask):
    return jax.nn.log_softmax(logits * mask, axis=-1)


def masked_log_probs_inverted(logits, mask):
    return jax.nn.log_softmax(jnp.where(mask, -1e9, logits), axis=-1)


def td_target_inputs(rng: np.random.Generator) -> tuple:
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


def td_target_reference(rewards, next_q, terminated, truncated, gamma):
    from labcore import losses

    return jax.vmap(losses.q_learning_target)(rewards, gamma * (1.0 - terminated.astype(jnp.float32)), next_q)


def fix_done_bootstrap_solution(rewards, next_q, terminated, truncated, gamma):
    # Only a terminal state is worth 0 from then on. A time limit (truncated) cut the episode short,
    # but the state after it still has a value: bootstrap from it.
    bootstrap = jnp.where(terminated, 0.0, gamma * next_q.max(axis=-1))
    return rewards + bootstrap


def td_target_cut_on_both(rewards, next_q, terminated, truncated, gamma):
    done = jnp.logical_or(terminated, truncated)
    return rewards + gamma * (1.0 - done) * jnp.max(next_q, axis=-1)


def td_target_cut_on_truncation(rewards, next_q, terminated, truncated, gamma):
    return rewards + gamma * (1.0 - truncated) * jnp.max(next_q, axis=-1)


def td_target_cuts_the_reward(rewards, next_q, terminated, truncated, gamma):
    return (1.0 - terminated) * (rewards + gamma * jnp.max(next_q, axis=-1))


def log_prob_inputs(rng: np.random.Generator) -> tuple:
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


def log_prob_reference(logits, actions):
    return jax.vmap(lambda row, a: jax.nn.log_softmax(row)[a])(logits, actions)


def fix_nan_log_prob_solution(logits, actions):
    # log softmax = logits - logsumexp(logits): no probability is formed, so none can underflow to 0
    log_probs = logits - jax.scipy.special.logsumexp(logits, axis=-1, keepdims=True)
    return log_probs[jnp.arange(actions.shape[0]), actions]


def log_prob_with_epsilon(logits, actions):
    log_probs = jnp.log(jax.nn.softmax(logits, axis=-1) + 1e-8)
    return jnp.take_along_axis(log_probs, actions[:, None], axis=-1)[:, 0]


def log_prob_over_the_batch(logits, actions):
    log_probs = jax.nn.log_softmax(logits, axis=0)
    return jnp.take_along_axis(log_probs, actions[:, None], axis=-1)[:, 0]
