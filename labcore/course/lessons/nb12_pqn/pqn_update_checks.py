"""Notebook 12's ``pqn_update`` exercise: its Q-network and optimizer, labcore's update as the reference, the
worked solution, the classic mistakes, and the judge that holds an answer to PQN's steps on the minibatches
the answer itself chose (its ``q_apply`` records them), so that any way of drawing the epochs' keys passes.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax

from labcore.course.exercises import behaviour


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
    # at least 10 rows: two right shuffles of 10 rows coincide once in 10! = 3.6 million, so the judge's refusal
    # of an epoch that repeats an earlier one's shuffle all but never meets a right answer (4 rows: once in 24)
    update_epochs, num_minibatches, minibatch_size = int(rng.integers(2, 4)), int(rng.integers(2, 5)), int(rng.integers(5, 9))
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


def pqn_update_incoming_state_every_step(params, opt_state, obs, actions, targets, key, q_apply, optimizer,
                                         update_epochs, num_minibatches):
    size = obs.shape[0] // num_minibatches
    incoming = opt_state

    def td_loss(params, rows):
        q_values = q_apply(params, obs[rows])
        return 0.5 * jnp.mean((q_values[jnp.arange(rows.shape[0]), actions[rows]] - targets[rows]) ** 2)

    for epoch_key in jax.random.split(key, update_epochs):
        order = jax.random.permutation(epoch_key, obs.shape[0])
        for i in range(num_minibatches):
            updates, opt_state = optimizer.update(jax.grad(td_loss)(params, order[i * size:(i + 1) * size]), incoming, params)
            params = optax.apply_updates(params, updates)
    return params, opt_state


def pqn_update_split_each_epoch(params, opt_state, obs, actions, targets, key, q_apply, optimizer, update_epochs,
                                num_minibatches):
    """A right answer with another key discipline: one split per epoch, as lesson 07's update does."""
    size = obs.shape[0] // num_minibatches

    def td_loss(params, rows):
        q_values = q_apply(params, obs[rows])
        return 0.5 * jnp.mean((jnp.take_along_axis(q_values, actions[rows][:, None], axis=-1)[:, 0] - targets[rows]) ** 2)

    for _ in range(update_epochs):
        key, epoch_key = jax.random.split(key)
        order = jax.random.permutation(epoch_key, obs.shape[0])
        for i in range(num_minibatches):
            updates, opt_state = optimizer.update(jax.grad(td_loss)(params, order[i * size:(i + 1) * size]), opt_state, params)
            params = optax.apply_updates(params, updates)
    return params, opt_state


# The judge: which rows each minibatch step trained on, seen through the Q-network the checker hands over
# (the first feature of every row of obs is the row's index), then the answer's parameters against those
# same steps taken as they should be.


def _recording(q_apply, seen: list):
    def q_apply_seen(params, obs):
        jax.debug.callback(lambda rows: seen.append(np.rint(np.asarray(rows)).astype(int)), obs[:, 0], ordered=True)
        return q_apply(params, obs)

    return q_apply_seen


def _steps_on(batches, params, opt_state, obs, actions, targets, q_apply, optimizer, *, greedy=False, fresh=False,
              incoming=False):
    """The parameters and optimizer state after one step on each of ``batches`` (row index arrays), in order."""
    start = opt_state

    def loss(params, rows):
        q_values = q_apply(params, obs[rows])
        chosen = q_values.max(axis=-1) if greedy else q_values[jnp.arange(rows.shape[0]), actions[rows]]
        return 0.5 * jnp.mean((chosen - targets[rows]) ** 2)

    for rows in batches:
        state = optimizer.init(params) if fresh else start if incoming else opt_state
        updates, opt_state = optimizer.update(jax.grad(loss)(params, jnp.asarray(rows)), state, params)
        params = optax.apply_updates(params, updates)
    return params, opt_state


def judge_pqn_update(pqn_update, rng: np.random.Generator) -> str | None:
    """PQN's update by what it does, whatever its key discipline: update_epochs epochs of num_minibatches
    minibatch steps, each epoch a shuffle of every row into minibatches of N // num_minibatches, a new
    shuffle each epoch, the draws following the key; then the answer's parameters and optimizer state
    against the same minibatches stepped with PQN's loss, the optimizer state carried step to step."""
    from labcore.course.exercises.checking import first_mismatch

    params, opt_state, obs, actions, targets, key, q_apply, optimizer, epochs, minibatches = _update_inputs(rng)
    rows = obs.shape[0]
    size = rows // minibatches
    obs = obs.at[:, 0].set(jnp.arange(rows, dtype=jnp.float32))  # each row carries its index
    seen: list = []
    problem, out = behaviour.key_reuse_problem(pqn_update, params, opt_state, obs, actions, targets, behaviour.copy_key(key),
                                               _recording(q_apply, seen), optimizer, epochs, minibatches)
    jax.effects_barrier()
    if problem:
        return problem
    if not (isinstance(out, tuple | list) and len(out) == 2):
        return "the update must return (params, opt_state)"
    sizes = [len(batch) for batch in seen]
    if sizes == [rows] * epochs:
        return "one step on the whole rollout per epoch, where num_minibatches minibatch steps were asked for"
    if sizes == [size] * minibatches:
        return "one epoch of minibatch steps: update_epochs passes over the rollout were asked for"
    if sizes != [size] * (epochs * minibatches):
        return (f"q_apply saw minibatches of {sizes} rows, where {epochs} epochs of {minibatches} minibatch steps on "
                f"{size} rows each were asked for (call q_apply on each minibatch's rows, once a step)")
    orders = [np.concatenate(seen[e * minibatches:(e + 1) * minibatches]) for e in range(epochs)]
    for epoch, order in enumerate(orders):
        if sorted(order.tolist()) != list(range(rows)):
            return f"epoch {epoch}'s minibatches do not hold every row of the rollout once"
    if all(np.array_equal(order, np.arange(rows)) for order in orders):
        return "no shuffle: the minibatches are the rollout's stored rows in order, each one correlated steps"
    if any(np.array_equal(orders[a], orders[b]) for a in range(epochs) for b in range(a)):
        return ("every epoch repeats one shuffle: one key used for every epoch (the key itself, or the same epoch "
                "key again), where each epoch needs a draw of its own")
    batches = seen[: epochs * minibatches]
    expected = _steps_on(batches, params, opt_state, obs, actions, targets, q_apply, optimizer)
    if first_mismatch(out, expected, 1e-4, 1e-5) is not None:
        for variant, why in ((dict(greedy=True), "the loss fits max_a Q(s, a), not the Q-value of the action taken"),
                             (dict(fresh=True), "the optimizer state is started again at every step: RAdam's moments "
                                                "and step count are lost"),
                             (dict(incoming=True), "every step starts from the incoming optimizer state: the state a "
                                                   "step returns is not carried to the next")):
            if first_mismatch(out, _steps_on(batches, params, opt_state, obs, actions, targets, q_apply, optimizer,
                                             **variant), 1e-4, 1e-5) is None:
                return why
        return ("on the minibatches it drew, the answer's (params, opt_state) differ from PQN's steps on them: "
                + first_mismatch(out, expected, 1e-4, 1e-5))
    again: list = []
    repeat = pqn_update(params, opt_state, obs, actions, targets, behaviour.copy_key(key), _recording(q_apply, again),
                        optimizer, epochs, minibatches)
    jax.effects_barrier()
    if first_mismatch(repeat, out, 0.0, 0.0) is not None:
        return "the same key gave another update: every shuffle must come from the key"
    other: list = []
    pqn_update(params, opt_state, obs, actions, targets, jax.random.key(int(rng.integers(0, 2**31))),
               _recording(q_apply, other), optimizer, epochs, minibatches)
    jax.effects_barrier()
    if all(np.array_equal(a, b) for a, b in zip(other, seen)):
        return "another key gave the same minibatches: the shuffles ignore the key"
    return None
