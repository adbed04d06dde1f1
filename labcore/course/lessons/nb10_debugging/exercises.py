"""Notebook 10 (debugging): find the bug in seven small, broken pieces of JAX RL.

Each exercise hands the learner a function that runs, jits and returns the right shapes, yet is wrong:
a PRNG key reused, a gradient that flows through the TD target, a gather on the wrong axis, GAE off
by one step, a mask applied after the softmax, a bootstrap that a terminal state does not stop, and a
log of a probability that underflows to 0. ``BROKEN`` maps each exercise to that function, written
exactly as the notebook hands it out; each is the first of its exercise's classic mistakes, so an
unchanged copy fails its check and is named. They are drills, not the algorithms' own cores, so none
is ``core=True``.

Each exercise carries a worked solution, written as a learner would fix the broken function
(``labcore.course.exercises.solution(name)`` shows it), and the other classic wrong answers that ``check``
recognises; those, the references and the input makers live in ``debugging_drills``, this module
holds what the notebook hands out and the exercise records.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from labcore.course.lessons.nb10_debugging import debugging_drills as drills
from labcore.course.exercises.checking import Exercise

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


# ----------------------------------------------------------------------------------------------
# 3. fix_gather_axis: Q(s_i, a_i) for each row


def chosen_q_values(q_values, actions):
    """Q(s_i, a_i) for each row i: q_values [B, A] float32, actions [B] int32 -> [B]."""
    return jnp.take(q_values, actions)  # the Q-value of each transition's action


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


# ----------------------------------------------------------------------------------------------
# 5. fix_mask_after_softmax


def masked_log_probs(logits, mask):
    """log pi(a | s) of the policy restricted to the legal actions.

    logits: [B, A] float32; mask: [B, A] bool, True where the action is legal -> [B, A].
    """
    probs = jax.nn.softmax(logits, axis=-1)
    probs = probs * mask  # illegal actions: probability 0
    return jnp.log(probs)


# ----------------------------------------------------------------------------------------------
# 6. fix_done_bootstrap: cut the bootstrap on termination, not on truncation


def td_target(rewards, next_q, terminated, truncated, gamma):
    """One-step Q-learning targets: rewards [B] float32, next_q [B, A] float32 (the target network's
    Q(s', .)), terminated [B] bool, truncated [B] bool, gamma: float -> [B]."""
    done = jnp.logical_or(terminated, truncated)  # the episode is over
    return rewards + gamma * jnp.max(next_q, axis=-1)


# ----------------------------------------------------------------------------------------------
# 7. fix_nan_log_prob: log of a probability that underflows


def action_log_probs(logits, actions):
    """log pi(a_i | s_i) for each row i: logits [B, A] float32, actions [B] int32 -> [B]."""
    probs = jax.nn.softmax(logits, axis=-1)
    log_probs = jnp.log(probs)
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
            "int32, epsilon-greedy at every step of a jax.lax.scan; the version handed out reuses a PRNG key.\n"
            "A key that is never replaced gives the same numbers every time it is used: look at what the scan "
            "carries from one step to the next. With epsilon = 1, a right answer repeats an env's action at "
            "the next step about 1/A of the time; the broken one always does. Any way of making fresh keys "
            "passes (split the carried key into three, split twice, fold in a step counter): the checker runs "
            "your rollout with JAX's key-reuse checker on (jax.debug_key_reuse) and looks at what it draws.",
            reference=drills.epsilon_greedy_reference,
            make_inputs=drills.epsilon_greedy_inputs,
            judge=drills.judge_epsilon_greedy_rollout,  # runs the rollout under jax.jit itself
            trials=2,  # each trial runs seven probes, its statistics over 2,560 actions each
            solution=drills.fix_reused_key_solution,
            mistakes=(
                ("reused key: the carried key never changes, so every step draws the same coins and the same "
                 "random actions", epsilon_greedy_rollout),
                ("reused key within a step: the random actions are drawn with coin_key, the coin's own key",
                 drills.epsilon_greedy_action_from_coin_key),
                ("one coin for the whole batch (jax.random.uniform(coin_key) with no shape): every env explores "
                 "at the same steps", drills.epsilon_greedy_one_coin),
                ("explores when the coin is above epsilon, that is with probability 1 - epsilon",
                 drills.epsilon_greedy_explore_above),
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
            reference=drills.td_loss_reference,
            make_inputs=drills.td_loss_inputs,
            run_with=drills.loss_and_gradient,
            jit=True,
            solution=drills.fix_target_stop_gradient_solution,
            mistakes=(
                ("no stop_gradient: the gradient also flows through the target (the loss's value is the same, its "
                 "gradient is not)", td_loss),
                ("stop_gradient around the prediction Q(s, a) instead of the target: the gradient flows only "
                 "through the target", drills.td_loss_stops_the_prediction),
                ("stop_gradient around the whole TD error: the loss is right and its gradient is zero",
                 drills.td_loss_stops_everything),
            ),
        ),
        Exercise(
            name="fix_gather_axis",
            description="Fix chosen_q_values(q_values, actions): q_values [B, A] float32, actions [B] int32 -> [B], "
            "the value of each row's own action, Q(s_i, a_i); the version handed out gathers from the wrong place.\n"
            "Its output has the right shape, so look at the values: compare out[i] with q_values[i, actions[i]] "
            "and with q_values[0, actions[i]]. jnp.take without axis= reads the flattened array; index row i and "
            "column actions[i] together (q_values[jnp.arange(B), actions], or jnp.take_along_axis along axis 1).",
            reference=drills.gather_reference,
            make_inputs=drills.gather_inputs,
            jit=True,
            solution=drills.fix_gather_axis_solution,
            mistakes=(
                ("jnp.take without axis= indexes the flattened array: every action is read from row 0",
                 chosen_q_values),
                ("q_values[:, actions] is a [B, B] table of every row's Q-value for every action taken, not one "
                 "value per row", drills.gather_every_pair),
                ("q_values[actions] picks whole rows (row a_i), not column a_i of row i", drills.gather_rows),
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
            reference=drills.gae_reference,
            make_inputs=drills.gae_inputs,
            jit=True,
            # Ten times the default: the worked solution differed from the reference by up to 1.1e-6
            # (absolute) on 40 inputs, op by op and jitted; each mistake, on an input where it differs
            # at all, moved some advantage by 0.06 or more
            rtol=1e-4,
            atol=1e-5,
            solution=drills.fix_gae_off_by_one_solution,
            mistakes=(
                ("off by one: step t bootstraps from V_t (values[:-1]) where V_{t+1} (values[1:]) belongs",
                 compute_gae),
                ("a done stops the bootstrap but not the trace: (1 - done_t) must also multiply A_{t+1}",
                 drills.gae_trace_not_cut),
                ("the done cuts one step late: step t reads done_{t+1} where done_t belongs", drills.gae_done_one_step_late),
                ("dones ignored: the advantages run across episode ends", drills.gae_ignoring_dones),
                ("last_value ignored: the last step bootstraps from 0, as if every rollout ended an episode",
                 drills.gae_ignoring_last_value),
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
            reference=drills.masked_log_probs_reference,
            make_inputs=drills.masked_inputs,
            run_with=drills.legal_and_illegal,
            jit=True,
            solution=drills.fix_mask_after_softmax_solution,
            mistakes=(
                ("masked after the softmax: the illegal probabilities are zeroed, but the legal ones no longer sum "
                 "to 1", masked_log_probs),
                ("illegal logits set to 0 (logits * mask): a logit of 0 is not small, so illegal actions keep "
                 "probability", drills.masked_log_probs_zero_logits),
                ("the mask is inverted: the LEGAL actions get -1e9", drills.masked_log_probs_inverted),
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
            reference=drills.td_target_reference,
            make_inputs=drills.td_target_inputs,
            jit=True,
            solution=drills.fix_done_bootstrap_solution,
            mistakes=(
                ("no cut: a terminal transition still bootstraps from the next state (the next episode's start)",
                 td_target),
                ("cut on truncation too: a time limit is not a terminal state, so a truncated transition still "
                 "bootstraps", drills.td_target_cut_on_both),
                ("cut on truncation instead of termination", drills.td_target_cut_on_truncation),
                ("(1 - terminated) multiplies the reward too: a terminal transition's own reward is lost",
                 drills.td_target_cuts_the_reward),
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
            reference=drills.log_prob_reference,
            make_inputs=drills.log_prob_inputs,
            jit=True,
            solution=drills.fix_nan_log_prob_solution,
            mistakes=(
                ("log(softmax(logits)): an unlikely action's probability underflows to 0 and its log to -inf",
                 action_log_probs),
                ("log(softmax + 1e-8): finite, but every log-probability is floored near -18.4", drills.log_prob_with_epsilon),
                ("log_softmax over the batch axis (axis=0) instead of the actions", drills.log_prob_over_the_batch),
            ),
        ),
    ]
