"""Notebook 12 (pqn): PQN's Q(lambda) targets, its TD loss and its update, PQN's own core (``core=True``).

Each exercise carries a worked solution, written as a learner would (``labcore.course.exercises.solution(name)``
shows it), and the classic wrong answers that ``check`` recognises.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax

from labcore.course.exercises.checking import Exercise

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
                   swap=False, next_step_bootstrap=False):
    """The solution with one thing changed, for the mistakes below."""
    if truncation_is_terminal:
        terminated = terminated | truncated
    if next_step_bootstrap:  # each step bootstraps from the next step's next_max_q: max Q two steps on
        next_max_q = jnp.concatenate([next_max_q[1:], next_max_q[-1:]])
    ended = (terminated | truncated) if cut_at_ends else jnp.zeros_like(terminated)
    continues = (1.0 - ended.astype(jnp.float32)).at[-1].set(0.0)
    not_terminal = 1.0 - terminated.astype(jnp.float32)

    def backwards(next_return, step):
        reward, keep, go_on, bootstrap = step
        mix = (1.0 - lam if swap else lam) * go_on
        target = reward + gamma * keep * ((1.0 - mix) * bootstrap + mix * next_return)
        return target, target

    _, targets = jax.lax.scan(backwards, jnp.zeros_like(rewards[0]), (rewards, not_terminal, continues, next_max_q),
                              reverse=True)
    return targets


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
    """(loss, d loss / d q_values), as ``_value_and_gradient`` runs the learner's function."""
    return jax.value_and_grad(_td_loss)(q_values, actions, targets)


def _value_and_gradient(fn):
    """The loss and its gradient with respect to q_values, under jax.jit."""
    return jax.jit(lambda q_values, actions, targets: jax.value_and_grad(fn)(q_values, actions, targets))


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


# ----------------------------------------------------------------------------------------------
# 4. pqn_update: the epochs of minibatch steps on one rollout's fixed targets


def layer_norm_q(params, obs):
    """The Q-network the ``pqn_update`` exercise trains: obs [N, D] -> Q-values [N, A]; one hidden layer
    with PQN's LayerNorm before its ReLU (params {"hidden": {"w": [D, H], "b": [H]}, "out": {"w": [H, A],
    "b": [A]}}), float32 products on every backend."""
    highest = jax.lax.Precision.HIGHEST
    hidden = jnp.dot(obs, params["hidden"]["w"], precision=highest) + params["hidden"]["b"]
    mean = jnp.mean(hidden, axis=-1, keepdims=True)
    normed = (hidden - mean) / jnp.sqrt(jnp.var(hidden, axis=-1, keepdims=True) + 1e-5)
    return jnp.dot(jax.nn.relu(normed), params["out"]["w"], precision=highest) + params["out"]["b"]


@functools.cache
def update_optimizer() -> optax.GradientTransformation:
    """The optimizer the ``pqn_update`` exercise steps with: PQN's, the gradient's norm clipped, then RAdam."""
    return optax.chain(optax.clip_by_global_norm(10.0), optax.radam(1e-2))


def _update_inputs(rng: np.random.Generator) -> tuple:
    update_epochs, num_minibatches, minibatch_size = int(rng.integers(2, 4)), int(rng.integers(2, 5)), int(rng.integers(2, 9))
    rows, features, hidden, actions = num_minibatches * minibatch_size, int(rng.integers(2, 6)), 8, int(rng.integers(2, 5))
    f32 = lambda shape, scale=1.0: jnp.asarray(rng.normal(scale=scale, size=shape), jnp.float32)  # noqa: E731
    params = {"hidden": {"w": f32((features, hidden), 0.5), "b": f32((hidden,), 0.1)},
              "out": {"w": f32((hidden, actions), 0.5), "b": f32((actions,), 0.1)}}
    # RAdam's moments and step count from an earlier update, so that an answer must carry them on
    opt_state = _warmed_up(params, jax.tree_util.tree_map(lambda leaf: jnp.ones_like(leaf) * 0.1, params))
    obs = f32((rows, features))
    chosen = jnp.asarray(rng.integers(0, actions, rows), jnp.int32)
    targets = f32((rows,), 2.0)
    key = jax.random.key(int(rng.integers(0, 2**31)))
    return params, opt_state, obs, chosen, targets, key, layer_norm_q, update_optimizer(), update_epochs, num_minibatches


@jax.jit
def _warmed_up(params, grads):
    optimizer = update_optimizer()
    return optimizer.update(grads, optimizer.init(params), params)[1]


def _update_reference(params, opt_state, obs, actions, targets, key, q_apply, optimizer, update_epochs, num_minibatches):
    # labcore.agents.pqn.core's update, on the flattened rollout: an epoch key each, a permutation each.
    rows = obs.shape[0]
    minibatch_size = rows // num_minibatches

    def loss(params, obs, actions, targets):
        q_taken = jnp.take_along_axis(q_apply(params, obs), actions[:, None], axis=-1)[:, 0]
        return 0.5 * jnp.mean((q_taken - targets) ** 2)

    def minibatch_step(carry, minibatch):
        params, opt_state = carry
        updates, opt_state = optimizer.update(jax.grad(loss)(params, *minibatch), opt_state, params)
        return (optax.apply_updates(params, updates), opt_state), None

    def epoch(carry, epoch_key):
        order = jax.random.permutation(epoch_key, rows)
        cut = lambda leaf: leaf[order].reshape(num_minibatches, minibatch_size, *leaf.shape[1:])  # noqa: E731
        return jax.lax.scan(minibatch_step, carry, (cut(obs), cut(actions), cut(targets)))[0], None

    return jax.lax.scan(epoch, (params, opt_state), jax.random.split(key, update_epochs))[0]


def pqn_update_solution(params, opt_state, obs, actions, targets, key, q_apply, optimizer, update_epochs, num_minibatches):
    def td_loss(params, rows):
        q_values = q_apply(params, obs[rows])
        chosen = q_values[jnp.arange(rows.shape[0]), actions[rows]]
        return 0.5 * jnp.mean((chosen - targets[rows]) ** 2)

    size = obs.shape[0] // num_minibatches
    for epoch_key in jax.random.split(key, update_epochs):  # a new shuffle every epoch
        shuffled = jax.random.permutation(epoch_key, obs.shape[0])
        for i in range(num_minibatches):
            rows = shuffled[i * size:(i + 1) * size]
            grads = jax.grad(td_loss)(params, rows)
            updates, opt_state = optimizer.update(grads, opt_state, params)
            params = optax.apply_updates(params, updates)
    return params, opt_state


def _with(params, opt_state, obs, actions, targets, key, q_apply, optimizer, update_epochs, num_minibatches, *,
          epochs=None, shuffle=True, same_order=False, minibatches=None, greedy=False, fresh_optimizer=False):
    """The solution with one thing changed, for the mistakes below."""
    epochs = update_epochs if epochs is None else epochs
    minibatches = num_minibatches if minibatches is None else minibatches
    size = obs.shape[0] // minibatches

    def td_loss(params, rows):
        q_values = q_apply(params, obs[rows])
        chosen = q_values.max(axis=-1) if greedy else q_values[jnp.arange(rows.shape[0]), actions[rows]]
        return 0.5 * jnp.mean((chosen - targets[rows]) ** 2)

    for epoch_key in jax.random.split(key, update_epochs)[:epochs]:
        order = jax.random.permutation(key if same_order else epoch_key, obs.shape[0]) if shuffle else jnp.arange(obs.shape[0])
        for i in range(minibatches):
            state = optimizer.init(params) if fresh_optimizer else opt_state
            updates, opt_state = optimizer.update(jax.grad(td_loss)(params, order[i * size:(i + 1) * size]), state, params)
            params = optax.apply_updates(params, updates)
    return params, opt_state


def pqn_update_one_epoch(*args):
    return _with(*args, epochs=1)


def pqn_update_in_stored_order(*args):
    return _with(*args, shuffle=False)


def pqn_update_same_shuffle_every_epoch(*args):
    return _with(*args, same_order=True)


def pqn_update_whole_batch(*args):
    return _with(*args, minibatches=1)


def pqn_update_greedy_action(*args):
    return _with(*args, greedy=True)


def pqn_update_optimizer_restarted(*args):
    return _with(*args, fresh_optimizer=True)


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
                ("episode ends are ignored: the lambda-return runs on into the next episode", q_lambda_ignores_episode_ends),
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
            ),
            core=True,
        ),
        Exercise(
            name="pqn_update",
            description="PQN's update on one rollout, its targets fixed: params, opt_state, obs [N, D], actions [N], "
            "targets [N] (Q(lambda), computed once), key, q_apply, optimizer, update_epochs, num_minibatches -> "
            "(params, opt_state).\n"
            "As labcore.agents.pqn.core does it: epoch_keys = jax.random.split(key, update_epochs); in epoch e, shuffle "
            "the N rows with jax.random.permutation(epoch_keys[e], N), cut them in order into num_minibatches "
            "minibatches of N // num_minibatches rows, and on each take one optimizer step on the TD loss 0.5 * "
            "mean((Q(s, a) - target)^2), Q(s, a) = q_apply(params, obs)[row, action], carrying params and opt_state "
            "from step to step (grads = jax.grad(loss)(params, ...); updates, opt_state = optimizer.update(grads, "
            "opt_state, params); params = optax.apply_updates(params, updates)). No target network: the targets "
            "stay as given for the whole update. Python loops or lax.scan both do.",
            reference=_update_reference,
            make_inputs=_update_inputs,
            trials=3,
            rtol=1e-4,
            atol=1e-5,
            solution=pqn_update_solution,
            mistakes=(
                ("one epoch: update_epochs passes over the rollout were asked for", pqn_update_one_epoch),
                ("no shuffle: the minibatches are the rollout's stored rows in order, each one correlated steps",
                 pqn_update_in_stored_order),
                ("the same shuffle every epoch (the key itself, not an epoch key): each epoch repeats the minibatches",
                 pqn_update_same_shuffle_every_epoch),
                ("one step on the whole rollout per epoch instead of num_minibatches minibatch steps", pqn_update_whole_batch),
                ("the loss fits max_a Q(s, a), not the Q-value of the action taken", pqn_update_greedy_action),
                ("the optimizer state is started again at every step: RAdam's moments and step count are lost",
                 pqn_update_optimizer_restarted),
            ),
            core=True,
        ),
    ]
