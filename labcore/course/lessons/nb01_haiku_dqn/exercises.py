"""Notebook 01 (haiku_dqn): replay sampling, the epsilon schedule, the Huber loss, and the DQN update.

``dqn_update`` is the algorithm's core: the learner writes one jitted DQN step (the TD loss against
a target network, its ``jax.value_and_grad``, the optax step and the periodic target copy), and the
checker compares it with ``labcore.agents.dqn.core.make_update`` on the parameters after the step.

The ``*_solution`` functions are the worked answers that ``labcore.course.exercises.solution(name)`` shows,
written as a learner would write them in the notebook; the ``_dqn_update_*`` functions below them
are the classic wrong answers the checker recognises.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax

from labcore.course.exercises import behaviour
from labcore.course.exercises.checking import Exercise


def _replay_inputs(rng: np.random.Generator) -> tuple:
    from labcore import replay

    capacity = int(rng.integers(8, 64))
    example = {"obs": np.zeros((3,), np.float32), "action": np.int32(0)}
    state = replay.init(example, capacity)
    count = int(rng.integers(1, capacity))  # partly full: sampling an empty slot shows
    state = replay.add_batch(
        state,
        {"obs": rng.normal(size=(count, 3)).astype(np.float32), "action": rng.integers(1, 4, size=(count,)).astype(np.int32)},
    )
    return state, jax.random.key(int(rng.integers(1 << 30))), int(rng.integers(1, 16))


def judge_replay_sample(sample, rng: np.random.Generator) -> str | None:
    """Any uniform sampler passes, however it draws from the key: each row of the batch is one filled
    slot with all its leaves, the slots drawn uniformly among the filled ones, the draws a function of
    the key."""
    from labcore import replay

    capacity = int(rng.integers(8, 64))
    filled = int(rng.integers(2, capacity))  # partly full: sampling an empty slot shows
    slots = np.arange(filled)
    # Every leaf tells which slot it came from: obs = [slot, 2 slot, 3 slot], action = slot + 1.
    state = replay.add_batch(
        replay.init({"obs": np.zeros((3,), np.float32), "action": np.int32(0)}, capacity),
        {"obs": (slots[:, None] * np.arange(1, 4)).astype(np.float32), "action": (slots + 1).astype(np.int32)},
    )
    key = jax.random.key(int(rng.integers(1 << 30)))
    batch_size = 4096  # about 64 draws or more per filled slot, for the frequencies
    problem, batch = behaviour.key_reuse_problem(sample, state, behaviour.copy_key(key), batch_size)
    if problem:
        return problem
    if not isinstance(batch, dict) or set(batch) != {"obs", "action"}:
        return "the batch is not the storage's pytree (a dict with the same keys, each leaf gathered)"
    for leaf, shape in (("obs", (batch_size, 3)), ("action", (batch_size,))):
        problem = behaviour.shape_problem(batch[leaf], shape, "fiu", f"batch[{leaf!r}]")
        if problem:
            return problem
    obs, action = np.asarray(batch["obs"]), np.asarray(batch["action"])
    drawn = obs[:, 0].astype(np.int64)
    if np.any(action == 0) or np.any(drawn >= filled):
        return f"the batch holds empty slots: only the first state.size = {filled} of {capacity} slots are filled"
    if not (np.array_equal(obs, drawn[:, None] * np.arange(1, 4)) and np.array_equal(action, drawn + 1)):
        return "a row's leaves come from different slots: gather every leaf with the same indices"
    for slot in range(filled):
        problem = behaviour.frequency_problem(int(np.sum(drawn == slot)), batch_size, 1 / filled,
                                              f"the frequency of slot {slot} of {filled} filled")
        if problem:
            return problem + ": draw the slots uniformly among the filled ones"
    if not np.array_equal(np.asarray(sample(state, behaviour.copy_key(key), batch_size)["action"]), action):
        return "the same key gave two different batches: the draws must come from `key` alone"
    if np.array_equal(np.asarray(sample(state, jax.random.fold_in(key, 1), batch_size)["action"]), action):
        return "two different keys gave the same batch: the draws are not made from `key`"
    return None


def _epsilon_inputs(rng: np.random.Generator) -> tuple:
    duration = int(rng.integers(100, 10_000))
    steps = rng.integers(0, 2 * duration, size=(16,)).astype(np.int32)
    return steps, float(rng.uniform(0.5, 1.0)), float(rng.uniform(0.0, 0.2)), duration


def _epsilon_reference(step, start: float, end: float, duration: int):
    fraction = jnp.clip(jnp.asarray(step, jnp.float32) / duration, 0.0, 1.0)
    return start + fraction * (end - start)


def _huber_inputs(rng: np.random.Generator) -> tuple:
    return (rng.normal(scale=3.0, size=(int(rng.integers(5, 40)),)).astype(np.float32), float(rng.uniform(0.5, 2.0)))


# ----------------------------------------------------------------------------------------------
# The DQN update. The checker's network and optimiser are fixed (a Haiku MLP with 3 actions, Adam);
# the observation size, batch size, parameters, Adam's moments, gamma, the target period and the
# update count are drawn afresh for every input.

NUM_ACTIONS = 3
GAMMAS = (0.9, 0.97, 0.99)
LEARNING_RATE = 1e-2  # Adam moves each parameter by about this: a target copied from before the step is far off


@functools.cache
def _network():
    from labcore.nets.q_networks import make_q_network

    return make_q_network("mlp", num_actions=NUM_ACTIONS, hidden_sizes=(32,))


@functools.cache
def _optimizer():
    return optax.adam(LEARNING_RATE)


@functools.cache
def _jitted_adam_update():
    return jax.jit(_optimizer().update)


def _dqn_update_inputs(rng: np.random.Generator) -> tuple:
    from labcore.agents.dqn import core as dqn

    network, optimizer = _network(), _optimizer()
    # A few shapes and constants, each drawn at random: the checker runs the answer op by op as
    # well as jitted, and op by op JAX compiles every operation once per shape it meets.
    obs_size, batch_size = int(rng.choice([3, 4])), int(rng.choice([8, 16, 32]))

    def normal(*shape):
        return jnp.asarray(rng.normal(size=shape), jnp.float32)

    # The network's parameter shapes for this observation size (traced, not computed), filled with
    # random values: quicker than running the initialisers eagerly for every new shape.
    shapes = jax.eval_shape(network.init, jax.random.key(0), jnp.zeros((1, obs_size)))
    params = jax.tree_util.tree_map(lambda p: 0.3 * normal(*p.shape), shapes)
    # A target that lags behind the online network, as it does between copies.
    target_params = jax.tree_util.tree_map(lambda p: p + 0.1 * normal(*p.shape), params)
    # Adam after a few earlier steps: its moments then weigh this step's gradient by its size, so
    # a loss that is wrong only in scale (a sum for a mean) changes the step too.
    opt_state = optimizer.init(params)
    for _ in range(int(rng.integers(1, 4))):
        _, opt_state = _jitted_adam_update()(jax.tree_util.tree_map(lambda p: 0.3 * normal(*p.shape), params), opt_state, params)
    # Where this update falls in the target period: half the inputs reach a copy (count + 1 a
    # multiple of the period), a quarter come just after one (count a multiple), a quarter in
    # between. A wrong copy rule passes all 6 inputs of a check with probability at most 0.5**6 < 2%.
    period, when = int(rng.integers(2, 6)), rng.random()
    if when < 0.5:
        offset = -1  # this update copies
    elif when < 0.75:
        offset = 0  # the previous update copied
    else:
        period = max(period, 3)
        offset = int(rng.integers(1, period - 1))  # strictly between two copies
    count = int(rng.integers(1, 50)) * period + offset
    state = dqn.TrainState(params, target_params, opt_state, jnp.int32(count))
    terminated = rng.random(batch_size) < 0.3
    terminated[:2] = [True, False]  # every batch holds both kinds of transition
    batch = dqn.Transition(
        obs=normal(batch_size, obs_size),
        action=jnp.asarray(rng.integers(0, NUM_ACTIONS, size=batch_size), jnp.int32),
        reward=normal(batch_size),
        next_obs=normal(batch_size, obs_size),
        terminated=jnp.asarray(terminated),
    )
    return state, batch, float(rng.choice(GAMMAS)), period


def _dqn_update_reference(state, batch, gamma: float, target_period: int):
    """labcore's own update (``dqn.make_update``) with the checker's network and optimiser: the squared
    TD loss, one optimiser step, a hard target copy every ``target_period`` updates."""
    new_state, metrics = _jitted_update(gamma, target_period)(state, batch)
    return new_state, metrics["loss"]


@functools.cache
def _jitted_update(gamma: float, target_period: int):
    from labcore.agents.dqn import core as dqn

    config = dqn.DQNConfig(gamma=gamma, td_loss="mse", train_frequency=1, target_update_frequency=target_period)
    return jax.jit(dqn.make_update(config, _network(), _optimizer()))


def _with_the_checkers_network(update_fn):
    """Run ``update_fn(network, optimizer, state, batch, gamma, target_period)`` on the checker's
    network and optimiser (``check`` runs it, like the reference, with full float32 matmuls)."""

    def run(state, batch, gamma, target_period):
        return update_fn(_network(), _optimizer(), state, batch, gamma, target_period)

    return run


# ----------------------------------------------------------------------------------------------
# Worked solutions, in the order the notebook sets the exercises.


def replay_sample_solution(state, key, batch_size):
    indices = jax.random.randint(key, (batch_size,), 0, state.size)  # filled slots only
    return jax.tree_util.tree_map(lambda leaf: leaf[indices], state.storage)


def replay_sample_among_all_slots(state, key, batch_size):
    indices = jax.random.randint(key, (batch_size,), 0, state.capacity)
    return jax.tree_util.tree_map(lambda leaf: leaf[indices], state.storage)


def replay_sample_two_index_draws(state, key, batch_size):
    obs_key, action_key = jax.random.split(key)
    return {
        "obs": state.storage["obs"][jax.random.randint(obs_key, (batch_size,), 0, state.size)],
        "action": state.storage["action"][jax.random.randint(action_key, (batch_size,), 0, state.size)],
    }


def epsilon_schedule_solution(step, start, end, duration):
    fraction = jnp.clip(step / duration, 0.0, 1.0)  # 0 at step 0, 1 from step `duration` on
    return start + fraction * (end - start)


def huber_loss_solution(x, delta):
    small = jnp.abs(x) <= delta
    return jnp.where(small, 0.5 * x**2, delta * (jnp.abs(x) - 0.5 * delta))


def dqn_update_solution(network, optimizer, state, batch, gamma, target_period):
    def td_loss(params):
        q = network.apply(params, None, batch.obs)  # [B, A]
        q_taken = jnp.take_along_axis(q, batch.action[:, None], axis=1)[:, 0]  # Q(s, a): [B]
        # The target network: a separate argument, so no gradient reaches it.
        next_q = network.apply(state.target_params, None, batch.next_obs)  # [B, A]
        not_done = 1.0 - batch.terminated.astype(jnp.float32)  # no bootstrap past a terminal state
        target = batch.reward + gamma * not_done * next_q.max(axis=1)
        return jnp.mean(0.5 * (q_taken - target) ** 2)

    loss, grads = jax.value_and_grad(td_loss)(state.params)
    updates, opt_state = optimizer.update(grads, state.opt_state, state.params)
    params = optax.apply_updates(state.params, updates)
    count = state.update_count + 1
    copy_now = count % target_period == 0  # a traced bool: jnp.where, not a Python if
    target_params = jax.tree_util.tree_map(lambda new, old: jnp.where(copy_now, new, old), params, state.target_params)
    new_state = state.replace(params=params, target_params=target_params, opt_state=opt_state, update_count=count)
    return new_state, loss


# ----------------------------------------------------------------------------------------------
# Classic wrong answers to dqn_update: each one is the solution with one thing done the usual wrong way.


def _dqn_update_variant(network, optimizer, state, batch, gamma, target_period, *,
                        mask_terminal=True, bootstrap_from="target", copy_from="new", copy_every=True):
    def td_loss(params):
        q = network.apply(params, None, batch.obs)
        q_taken = jnp.take_along_axis(q, batch.action[:, None], axis=1)[:, 0]
        if bootstrap_from == "target":
            next_q = network.apply(state.target_params, None, batch.next_obs)
        elif bootstrap_from == "online, no gradient":
            next_q = jax.lax.stop_gradient(network.apply(params, None, batch.next_obs))
        else:  # "online": the gradient also flows through the target
            next_q = network.apply(params, None, batch.next_obs)
        not_done = 1.0 - batch.terminated.astype(jnp.float32) if mask_terminal else 1.0
        target = batch.reward + gamma * not_done * next_q.max(axis=1)
        return jnp.mean(0.5 * (q_taken - target) ** 2)

    loss, grads = jax.value_and_grad(td_loss)(state.params)
    updates, opt_state = optimizer.update(grads, state.opt_state, state.params)
    params = optax.apply_updates(state.params, updates)
    count = state.update_count + 1
    copy_now = (count % target_period == 0) if copy_every else (state.update_count % target_period == 0)
    source = params if copy_from == "new" else state.params
    target_params = jax.tree_util.tree_map(lambda new, old: jnp.where(copy_now, new, old), source, state.target_params)
    return state.replace(params=params, target_params=target_params, opt_state=opt_state, update_count=count), loss


def _dqn_update_bootstraps_terminals(network, optimizer, state, batch, gamma, target_period):
    return _dqn_update_variant(network, optimizer, state, batch, gamma, target_period, mask_terminal=False)


def _dqn_update_online_target(network, optimizer, state, batch, gamma, target_period):
    return _dqn_update_variant(network, optimizer, state, batch, gamma, target_period, bootstrap_from="online, no gradient")


def _dqn_update_gradient_through_target(network, optimizer, state, batch, gamma, target_period):
    return _dqn_update_variant(network, optimizer, state, batch, gamma, target_period, bootstrap_from="online")


def _dqn_update_copies_old_params(network, optimizer, state, batch, gamma, target_period):
    return _dqn_update_variant(network, optimizer, state, batch, gamma, target_period, copy_from="old")


def _dqn_update_period_on_old_count(network, optimizer, state, batch, gamma, target_period):
    return _dqn_update_variant(network, optimizer, state, batch, gamma, target_period, copy_every=False)


def catalogue() -> list[Exercise]:
    """This notebook's exercises, in the order the notebook checks them."""
    from labcore import losses, replay

    return [
        Exercise(
            name="replay_sample",
            description="Sample a uniform batch from a replay.ReplayState: every leaf of state.storage, gathered.\n"
            "Draw batch_size slot indices uniformly, with replacement, among the filled slots 0 .. state.size - 1 "
            "(for example jax.random.randint(key, (batch_size,), 0, state.size)), then gather every leaf with "
            "them: jax.tree_util.tree_map(lambda leaf: leaf[indices], state.storage). Any way of drawing the "
            "indices from key passes; the checker looks at what the batch holds and how often each slot comes.",
            reference=replay.sample,
            make_inputs=_replay_inputs,
            judge=judge_replay_sample,
            mistakes=(
                ("samples among all capacity slots, the empty ones too", replay_sample_among_all_slots),
                ("the observations and the actions are gathered with different indices",
                 replay_sample_two_index_draws),
            ),
            solution=replay_sample_solution,
        ),
        Exercise(
            name="epsilon_schedule",
            description="Linear epsilon: start at step 0, end at step `duration`, then flat; steps is an int array.\n"
            "fraction = clip(step / duration, 0, 1) with jnp.clip (Python min/max fail on traced arrays), "
            "then start + fraction * (end - start).",
            reference=_epsilon_reference,
            make_inputs=_epsilon_inputs,
            jit=True,
            solution=epsilon_schedule_solution,
        ),
        Exercise(
            name="huber_loss",
            description="Huber loss of x (elementwise): 0.5 * x**2 where |x| <= delta, delta * (|x| - 0.5 * delta) beyond.\n"
            "Use jnp.where (or split |x| into a clipped part and the rest); no Python if on array values, "
            "so it works under jit.",
            reference=losses.huber_loss,
            make_inputs=_huber_inputs,
            jit=True,
            solution=huber_loss_solution,
        ),
        Exercise(
            name="dqn_update",
            description="One DQN update: dqn_update(network, optimizer, state, batch, gamma, target_period) -> (new_state, loss).\n"
            "The checker passes its own Haiku MLP and Adam as network and optimizer, then a dqn.TrainState, a "
            "dqn.Transition batch, gamma and target_period. Loss: mean of 0.5 * (Q(s, a) - target)**2 with "
            "target = r + gamma * (1 - terminated) * max_a' Q(s', a') from state.target_params. Then "
            "loss, grads = jax.value_and_grad(loss_fn)(state.params); updates, opt_state = "
            "optimizer.update(grads, state.opt_state, state.params); optax.apply_updates. The count goes up "
            "by one, and the target becomes the new params when the new count is a multiple of target_period "
            "(jnp.where or optax.periodic_update: no Python if, it must jit). Return "
            "(state.replace(params=..., target_params=..., opt_state=..., update_count=...), loss).",
            reference=_dqn_update_reference,
            make_inputs=_dqn_update_inputs,
            jit=True,
            run_with=_with_the_checkers_network,
            trials=6,
            # Both sides take float32 matmuls, so a right answer differs from labcore's only in the
            # order of float32 sums: the worked solution's largest difference over 32 inputs, op by op
            # and jitted, was 2.4e-7 (absolute, values of order 0.1 to 1). The default rtol 1e-5 /
            # atol 1e-6 leave a margin of 4x or more, while each classic mistake, on an input where it
            # differs at all, moved some output by 4e-3 or more.
            solution=dqn_update_solution,
            mistakes=(
                ("bootstraps through terminal transitions (no 1 - terminated in the target)", _dqn_update_bootstraps_terminals),
                ("takes the target from the online parameters, not state.target_params", _dqn_update_online_target),
                ("differentiates through the target: Q(s', .) from the online parameters, without stop_gradient",
                 _dqn_update_gradient_through_target),
                ("copies the parameters from before the optimiser step into the target", _dqn_update_copies_old_params),
                ("tests the period on the count before this update (the target is copied one update early)",
                 _dqn_update_period_on_old_count),
            ),
            core=True,
        ),
    ]
