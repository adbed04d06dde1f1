"""Notebook 12 (pqn): PQN's Q(lambda) targets, its TD loss and its update, PQN's own core (``core=True``).

Each exercise carries a worked solution, written as a learner would (``labcore.course.exercises.solution(name)``
shows it), and the classic wrong answers that ``check`` recognises.
"""

from __future__ import annotations


import jax
import jax.numpy as jnp
import numpy as np

from labcore.course.exercises.checking import AnswerProblem, Exercise
from labcore.course.lessons.nb12_pqn.pqn_update_checks import (
    _update_inputs, _update_reference, judge_pqn_update, pqn_update_greedy_action, pqn_update_in_stored_order,
    pqn_update_incoming_state_every_step, pqn_update_one_epoch, pqn_update_optimizer_restarted,
    pqn_update_same_shuffle_every_epoch, pqn_update_solution, pqn_update_whole_batch)

# ----------------------------------------------------------------------------------------------
# 1. q_lambda_targets


def _q_lambda_inputs(rng: np.random.Generator) -> tuple:
    steps, envs = int(rng.integers(2, 40)), int(rng.integers(1, 6))
    terminated = rng.random((steps, envs)) < 0.1
    truncated = (rng.random((steps, envs)) < 0.1) & ~terminated
    truncated[0, 0], terminated[-1, -1] = True, False  # at least one time-limit end inside the rollout
    return (
        jnp.asarray(rng.normal(size=(steps, envs)), jnp.float32),
        jnp.asarray(terminated),
        jnp.asarray(truncated),
        jnp.asarray(3 * rng.normal(size=(steps, envs)), jnp.float32),
        float(rng.uniform(0.9, 0.999)),
        float(rng.uniform(0.3, 0.95)),
    )


def _q_lambda_reference(rewards, terminated, truncated, next_max_q, gamma, lam):
    from labcore import losses

    return losses.q_lambda_targets(rewards, terminated, truncated, next_max_q, gamma, lam)


def q_lambda_targets_solution(rewards, terminated, truncated, next_max_q, gamma, lam):
    steps = rewards.shape[0]
    not_terminal = 1.0 - terminated.astype(jnp.float32)
    # lambda only where the episode goes on into step t + 1 of this rollout
    continues = 1.0 - (terminated | truncated).astype(jnp.float32)
    continues = continues.at[steps - 1].set(0.0)  # nothing after the rollout's last step

    def backwards(next_return, step):
        reward, keep, go_on, bootstrap = step
        mix = lam * go_on
        target = reward + gamma * keep * ((1.0 - mix) * bootstrap + mix * next_return)
        return target, target

    _, targets = jax.lax.scan(
        backwards, jnp.zeros_like(rewards[0]), (rewards, not_terminal, continues, next_max_q), reverse=True
    )
    return targets


def q_lambda_ignores_episode_ends(rewards, terminated, truncated, next_max_q, gamma, lam):
    return _q_lambda_with(rewards, terminated, truncated, next_max_q, gamma, lam, cut_at_ends=False)


def _q_lambda_with(rewards, terminated, truncated, next_max_q, gamma, lam, cut_at_ends=True, truncation_is_terminal=False,
                   swap=False, next_step_bootstrap=False, lambda_at_last_step=False):
    """The solution with one thing changed, for the mistakes below."""
    if truncation_is_terminal:
        terminated = terminated | truncated
    if next_step_bootstrap:  # each step bootstraps from the next step's next_max_q: max Q two steps on
        next_max_q = jnp.concatenate([next_max_q[1:], next_max_q[-1:]])
    ended = (terminated | truncated) if cut_at_ends else jnp.zeros_like(terminated)
    continues = 1.0 - ended.astype(jnp.float32)
    if not lambda_at_last_step:
        continues = continues.at[-1].set(0.0)
    not_terminal = 1.0 - terminated.astype(jnp.float32)

    def backwards(next_return, step):
        reward, keep, go_on, bootstrap = step
        mix = (1.0 - lam if swap else lam) * go_on
        target = reward + gamma * keep * ((1.0 - mix) * bootstrap + mix * next_return)
        return target, target

    _, targets = jax.lax.scan(backwards, jnp.zeros_like(rewards[0]), (rewards, not_terminal, continues, next_max_q),
                              reverse=True)
    return targets


def q_lambda_lambda_at_the_last_step(rewards, terminated, truncated, next_max_q, gamma, lam):
    return _q_lambda_with(rewards, terminated, truncated, next_max_q, gamma, lam, lambda_at_last_step=True)


def q_lambda_truncation_as_terminal(rewards, terminated, truncated, next_max_q, gamma, lam):
    return _q_lambda_with(rewards, terminated, truncated, next_max_q, gamma, lam, truncation_is_terminal=True)


def q_lambda_swapped_weights(rewards, terminated, truncated, next_max_q, gamma, lam):
    return _q_lambda_with(rewards, terminated, truncated, next_max_q, gamma, lam, swap=True)


def q_lambda_off_by_one(rewards, terminated, truncated, next_max_q, gamma, lam):
    return _q_lambda_with(rewards, terminated, truncated, next_max_q, gamma, lam, next_step_bootstrap=True)


def q_lambda_forwards(rewards, terminated, truncated, next_max_q, gamma, lam):
    flipped = _q_lambda_with(rewards[::-1], terminated[::-1], truncated[::-1], next_max_q[::-1], gamma, lam)
    return flipped[::-1]


# ----------------------------------------------------------------------------------------------
# 2. lambda_return_weights


def _weights_inputs(rng: np.random.Generator) -> tuple:
    return float(rng.uniform(0.05, 0.95)), int(rng.integers(1, 30))


def _weights_reference(lam, n):
    k = np.arange(n, dtype=np.float64)
    weights = (1.0 - lam) * lam**k
    weights[-1] = lam ** (n - 1)  # the longest return takes the rest of the mass
    return weights


def lambda_return_weights_solution(lam, n):
    weights = [(1 - lam) * lam**i for i in range(n - 1)]  # the 1-, 2-, ..., (n-1)-step returns
    weights.append(lam ** (n - 1))  # the n-step return, bootstrapped where the rollout or episode ends
    return np.array(weights)


def _as_weight_array(fn):
    """The answer's weights as a float64 array: a list or a tuple of numbers does as well as an array."""

    def weights(lam, n):
        out = np.asarray(fn(lam, n), np.float64)
        if out.shape != (n,):
            raise AnswerProblem(f"your weights have shape {out.shape}; there are n = {n} returns, one weight each: shape ({n},)")
        return out

    return weights


def lambda_weights_no_remainder(lam, n):
    return (1 - lam) * lam ** np.arange(n)


def lambda_weights_no_one_minus(lam, n):
    return lam ** np.arange(n, dtype=np.float64)


def lambda_weights_reversed(lam, n):
    return _weights_reference(lam, n)[::-1]


# ----------------------------------------------------------------------------------------------
# 3. pqn_td_loss: checked on its value and on its gradient with respect to the Q-values


def _td_loss_inputs(rng: np.random.Generator) -> tuple:
    batch, actions = int(rng.integers(2, 64)), int(rng.integers(2, 8))
    q_values = jnp.asarray(rng.normal(size=(batch, actions)), jnp.float32)
    return q_values, jnp.asarray(rng.integers(0, actions, batch), jnp.int32), jnp.asarray(rng.normal(size=batch), jnp.float32)


def _td_loss(q_values, actions, targets):
    q_taken = jnp.take_along_axis(q_values, actions[:, None], axis=-1)[:, 0]
    return 0.5 * jnp.mean((q_taken - jax.lax.stop_gradient(targets)) ** 2)


def _td_loss_reference(q_values, actions, targets):
    """{"your loss", "d loss / d q_values"}, as ``_value_and_gradient`` runs the learner's function."""
    loss, grad = jax.value_and_grad(_td_loss)(q_values, actions, targets)
    return {"your loss": loss, "d loss / d q_values": grad}


def _value_and_gradient(fn):
    """The loss and its gradient with respect to q_values, under jax.jit; a loss that is not a scalar is
    refused in words (jax.grad's own error would quote this checker)."""

    def run(q_values, actions, targets):
        shape = jax.eval_shape(fn, q_values, actions, targets).shape
        if shape != ():
            raise AnswerProblem(f"your loss has shape {shape}; a loss is one number, shape (): average over the "
                                "minibatch (and over nothing else)")
        loss, grad = jax.jit(jax.value_and_grad(fn))(q_values, actions, targets)
        return {"your loss": loss, "d loss / d q_values": grad}

    return run


def pqn_td_loss_solution(q_values, actions, targets):
    chosen = q_values[jnp.arange(q_values.shape[0]), actions]  # Q(s, a) of the action taken
    errors = chosen - targets
    return 0.5 * jnp.mean(errors**2)


def pqn_td_loss_greedy_action(q_values, actions, targets):
    return 0.5 * jnp.mean((q_values.max(axis=-1) - targets) ** 2)


def pqn_td_loss_every_action(q_values, actions, targets):
    return 0.5 * jnp.mean((q_values - targets[:, None]) ** 2)


def pqn_td_loss_summed(q_values, actions, targets):
    return 0.5 * jnp.sum((q_values[jnp.arange(q_values.shape[0]), actions] - targets) ** 2)


def pqn_td_loss_no_half(q_values, actions, targets):
    return jnp.mean((q_values[jnp.arange(q_values.shape[0]), actions] - targets) ** 2)


def pqn_td_loss_column(q_values, actions, targets):
    q_taken = jnp.take_along_axis(q_values, actions[:, None], axis=-1)  # [B, 1], minus [B] broadcasts to [B, B]
    return 0.5 * jnp.mean((q_taken - targets) ** 2)


def catalogue() -> list[Exercise]:
    return [
        Exercise(
            name="q_lambda_targets",
            description="PQN's Q(lambda) targets: rewards, terminated, truncated, next_max_q [T, E], gamma, lam -> "
            "targets [T, E].\n"
            "next_max_q[t] is max_a Q(s'_t, a) of step t's true next observation (the episode's last one where step "
            "t ended it). Go backwards: G_t = r_t + gamma * (1 - terminated_t) * ((1 - m_t) * next_max_q[t] + m_t * "
            "G_{t+1}) with m_t = lam where the episode goes on into step t + 1, and m_t = 0 where step t ended it "
            "(terminated or truncated) and at the rollout's last step. A time limit (truncated) still bootstraps; "
            "a terminal state does not. jax.lax.scan(..., reverse=True) does the backward loop.",
            reference=_q_lambda_reference,
            make_inputs=_q_lambda_inputs,
            rtol=1e-4,
            atol=1e-5,
            jit=True,
            solution=q_lambda_targets_solution,
            mistakes=(
                ("a time limit does not cut the lambda-return: at a truncated step G_t mixes in G_{t+1} of the next "
                 "episode (a terminal step's (1 - terminated) stops it already; a truncated step's mix must be cut too)",
                 q_lambda_ignores_episode_ends),
                ("at the rollout's last step there is no G_T to mix in: the bootstrap must take all the weight there "
                 "(the scan starts from zeros, so lambda of it is lost)", q_lambda_lambda_at_the_last_step),
                ("a time limit is treated as a terminal state: no bootstrap where the episode was only cut off",
                 q_lambda_truncation_as_terminal),
                ("lambda and 1 - lambda swapped: lambda weighs the one-step bootstrap", q_lambda_swapped_weights),
                ("off by one: step t bootstraps from next_max_q[t + 1], the max Q two steps on", q_lambda_off_by_one),
                ("the recursion runs forwards in time; G_t needs G_{t+1}, so it must run backwards", q_lambda_forwards),
            ),
            core=True,
        ),
        Exercise(
            name="lambda_return_weights",
            description="The weights a lambda-return gives its n-step returns when at most n steps are left: lam, n -> "
            "weights [n] (the 1-step return's first).\n"
            "The lambda-return mixes the 1-step, 2-step, ... returns with weights (1 - lam) * lam**(k - 1) for the "
            "k-step return. When the episode or rollout ends after n steps there is no longer return, so the n-step "
            "return takes all the weight left: lam**(n - 1). The weights sum to 1; lam = 0 gives the one-step target, "
            "lam = 1 the n-step (Monte Carlo to the end) return.",
            reference=_weights_reference,
            make_inputs=_weights_inputs,
            run_with=_as_weight_array,
            solution=lambda_return_weights_solution,
            mistakes=(
                ("the n-step return gets (1 - lam) * lam**(n - 1), so the weights sum to less than 1",
                 lambda_weights_no_remainder),
                ("lam**(k - 1) without the (1 - lam) factor: the weights sum to more than 1", lambda_weights_no_one_minus),
                ("reversed: the longest return gets the largest weight", lambda_weights_reversed),
            ),
        ),
        Exercise(
            name="pqn_td_loss",
            description="PQN's TD loss on a minibatch: q_values [B, A] (the online network's, with gradient), actions "
            "[B], targets [B] (fixed Q(lambda) targets) -> [].\n"
            "Take Q(s, a) of each row's action (jnp.take_along_axis or q_values[jnp.arange(B), actions]) and return "
            "0.5 * mean((Q(s, a) - target)^2). Checked on the value and on its gradient with respect to q_values: only "
            "the action taken gets a gradient, (Q(s, a) - target) / B.",
            reference=_td_loss_reference,
            make_inputs=_td_loss_inputs,
            run_with=_value_and_gradient,
            solution=pqn_td_loss_solution,
            mistakes=(
                ("max over actions instead of the action taken: that is the target's max, not the prediction",
                 pqn_td_loss_greedy_action),
                ("every action pulled towards the target, not only the one taken", pqn_td_loss_every_action),
                ("a sum over the minibatch: the step grows with the minibatch size", pqn_td_loss_summed),
                ("no 1/2: the mean squared error is twice PQN's loss, and so is every gradient", pqn_td_loss_no_half),
                ("Q(s, a) kept as a column [B, 1]: minus the targets [B] it broadcasts to a [B, B] matrix of "
                 "every row against every target (take_along_axis(...)[:, 0] keeps one per row)", pqn_td_loss_column),
            ),
            core=True,
        ),
        Exercise(
            name="pqn_update",
            description="PQN's update on one rollout, its targets fixed: params, opt_state, obs [N, D], actions [N], "
            "targets [N] (Q(lambda), computed once), key, q_apply, optimizer, update_epochs, num_minibatches -> "
            "(params, opt_state).\n"
            "update_epochs epochs; each epoch shuffles the N rows with a key of its own drawn from `key` (any way "
            "passes: jax.random.split(key, update_epochs), or key, sub = jax.random.split(key) each epoch, or "
            "fold_in), cuts the shuffled rows in order into num_minibatches minibatches of N // num_minibatches "
            "rows, and on each takes one optimizer step on the TD loss 0.5 * mean((Q(s, a) - target)^2), "
            "Q(s, a) = q_apply(params, obs[rows])[row, action], calling q_apply on the minibatch's rows and "
            "carrying params and opt_state from step to step (grads = jax.grad(loss)(params, ...); updates, "
            "opt_state = optimizer.update(grads, opt_state, params); params = optax.apply_updates(params, "
            "updates)). No target network: the targets stay as given for the whole update. Python loops or "
            "lax.scan both do. The checker watches which rows each step trains on (its q_apply sees them), then "
            "holds your parameters and optimizer state to PQN's steps on those same minibatches.",
            reference=_update_reference,
            make_inputs=_update_inputs,
            judge=judge_pqn_update,
            trials=3,
            solution=pqn_update_solution,
            mistakes=(
                ("one epoch: update_epochs passes over the rollout were asked for", pqn_update_one_epoch),
                ("no shuffle: the minibatches are the rollout's stored rows in order, each one correlated steps",
                 pqn_update_in_stored_order),
                ("every epoch repeats one shuffle: one key for every epoch (the key itself, or epoch_keys[0] again)",
                 pqn_update_same_shuffle_every_epoch),
                ("one step on the whole rollout per epoch instead of num_minibatches minibatch steps", pqn_update_whole_batch),
                ("the loss fits max_a Q(s, a), not the Q-value of the action taken", pqn_update_greedy_action),
                ("the optimizer state is started again at every step: RAdam's moments and step count are lost",
                 pqn_update_optimizer_restarted),
                ("every step starts from the incoming optimizer state: the state a step returns is not carried on",
                 pqn_update_incoming_state_every_step),
            ),
            core=True,
        ),
    ]
