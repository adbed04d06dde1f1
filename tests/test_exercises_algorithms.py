"""The core exercises in which the learner writes the algorithm itself, checked against labcore's.

The catalogue-wide tests (tests/test_exercises.py) run each worked solution and each named mistake;
these check that what the checker compares with is labcore's algorithm, and that an answer written
differently from the worked solution passes.
"""

import jax
import jax.numpy as jnp
import numpy as np

from labcore import replay
from labcore.agents.dqn import core as dqn
from labcore.agents.dqn import scan as dqn_scan
from labcore.course import exercises
from labcore.course.lessons.nb03_jit_scan_vmap import exercises as nb03


def test_the_scan_step_reference_reproduces_labcores_jitted_dqn():
    # scan.make_parts runs warm-up iterations, then iterations that learn; with train_frequency =
    # num_envs an iteration is one env step. Its keys come from the loop key in a fixed order: the
    # exercise's step takes them as inputs, so they are replayed here in that order.
    config, agent, _, _ = nb03._scan_step_agent(2, 32, 6)
    parts = dqn_scan.make_parts(config)
    params_key, reset_key, loop_key = jax.random.split(jax.random.key(3), 3)
    # Jitted, as labcore's driver runs them: one compile each, where eager calls compile every
    # primitive of init separately (a long xdist worker once lost its process to an XLA crash while
    # compiling this test's eager scan).
    start = jax.jit(parts.init)(params_key, reset_key, loop_key)
    steps = parts.warmup_iterations + 7
    iterate = jax.jit(parts.iterate, static_argnums=(1, 2))
    labcore_carry, labcore_metrics = iterate(start, parts.warmup_iterations, False)
    labcore_carry, learn_metrics = iterate(labcore_carry, 7, True)

    act_keys, env_keys, sample_keys, key = [], [], [], loop_key
    for iteration in range(steps):
        key, act_key, env_key = jax.random.split(key, 3)
        sample_key = act_key  # unused during the warm-up
        if iteration >= parts.warmup_iterations:
            key, sample_key = jax.random.split(key)
        act_keys.append(act_key), env_keys.append(env_key), sample_keys.append(sample_key)
    keys = tuple(jnp.stack(k) for k in (act_keys, env_keys, sample_keys))
    carry = (start.train_state, start.buffer, start.env_state, start.obs, start.step)
    (train_state, buffer, _, obs, step), losses = nb03._scanned(nb03.dqn_scan_step_reference)(carry, keys, agent, config)

    assert int(step) == int(labcore_carry.step) == steps * config.num_envs
    for ours, theirs in zip(jax.tree_util.tree_leaves((train_state, buffer, obs)),
                            jax.tree_util.tree_leaves((labcore_carry.train_state, labcore_carry.buffer, labcore_carry.obs))):
        np.testing.assert_array_equal(np.asarray(ours), np.asarray(theirs))
    np.testing.assert_array_equal(np.asarray(losses[parts.warmup_iterations:]), np.asarray(learn_metrics["loss"]))
    assert np.all(np.asarray(losses[: parts.warmup_iterations]) == 0) and np.all(np.asarray(learn_metrics["loss"]) > 0)


def dqn_scan_step_with_where(carry, keys, agent, config):
    # Another right answer: the update always computed, its result kept only past the warm-up.
    train_state, buffer, env_state, obs, step = carry
    act_key, env_key, sample_key = keys
    env_state, next_obs, transitions, _ = agent.collect(
        train_state.params, env_state, obs, dqn.linear_epsilon(step, config), act_key, env_key)
    buffer = replay.add_batch(buffer, transitions)
    step = step + transitions.reward.shape[0]
    updated, metrics = agent.learn(train_state, replay.sample(buffer, sample_key, config.batch_size))
    learning = step > config.learning_starts
    train_state = jax.tree_util.tree_map(lambda new, old: jnp.where(learning, new, old), updated, train_state)
    return (train_state, buffer, env_state, next_obs, step), jnp.where(learning, metrics["loss"], 0.0)


def dqn_scan_step_with_a_python_if(carry, keys, agent, config):
    train_state, buffer, env_state, obs, step = carry
    env_state, next_obs, transitions, _ = agent.collect(
        train_state.params, env_state, obs, dqn.linear_epsilon(step, config), keys[0], keys[1])
    buffer = replay.add_batch(buffer, transitions)
    step = step + config.num_envs
    loss = jnp.float32(0.0)
    if step > config.learning_starts:  # a traced value: raises
        train_state, metrics = agent.learn(train_state, replay.sample(buffer, keys[2], config.batch_size))
        loss = metrics["loss"]
    return (train_state, buffer, env_state, next_obs, step), loss


def test_dqn_scan_step_accepts_another_right_answer_and_explains_a_python_if(capsys):
    assert exercises.check("dqn_scan_step", dqn_scan_step_with_where, seed=0), capsys.readouterr().out
    assert not exercises.check("dqn_scan_step", dqn_scan_step_with_a_python_if, seed=0)
    assert "TracerBoolConversionError" in capsys.readouterr().out


def data_parallel_update_with_psum_over_count(params, target_params, opt_state, batch, loss_fn, optimizer):
    # Another right answer: one flat all-reduce (as labcore's make_update), a psum divided by the count.
    loss, grads = jax.value_and_grad(loss_fn)(params, target_params, batch)
    flat, unflatten = jax.flatten_util.ravel_pytree((loss, grads))
    devices = jax.lax.psum(1, "devices")
    loss, grads = unflatten(jax.lax.psum(flat, "devices") / devices)
    updates, opt_state = optimizer.update(grads, opt_state, params)
    return jax.tree_util.tree_map(lambda p, u: p + u, params, updates), opt_state, loss


def test_data_parallel_dqn_update_accepts_another_right_answer(capsys):
    assert exercises.check("data_parallel_dqn_update", data_parallel_update_with_psum_over_count, seed=0), \
        capsys.readouterr().out


def iqn_train_step_with_take_along_axis(params, target_params, opt_state, batch, key, config):
    # Another right answer: gathers with take_along_axis, the weight built from the sign, optax's Huber.
    import optax

    from labcore.agents.iqn import core as iqn

    network = iqn.make_network(config)
    draws = iqn.loss_randomness(key, batch.states.shape[0], config)

    def at(quantiles, actions):  # [B, N, A], [B] -> [B, N]
        return jnp.take_along_axis(quantiles, actions[:, None, None], axis=2)[:, :, 0]

    def loss_fn(params):
        best = jnp.argmax(jnp.mean(network.apply(params, batch.next_states, draws.taus_next, draws.key_next), 1), -1)
        z_next = at(network.apply(target_params, batch.next_states, draws.taus_target, draws.key_target), best)
        discount = (config.gamma**config.n_step) * (1.0 - batch.dones)
        targets = jax.lax.stop_gradient(batch.rewards + discount * z_next)
        predicted = at(network.apply(params, batch.states, draws.taus_expected, draws.key_expected), batch.actions[:, 0])
        td = jnp.expand_dims(targets, 1) - jnp.expand_dims(predicted, 2)
        weight = jnp.where(td < 0, 1.0 - draws.taus_expected, draws.taus_expected)
        return jnp.mean(weight * optax.huber_loss(td, delta=1.0) * batch.valid[..., None])

    loss, grads = jax.value_and_grad(loss_fn)(params)
    updates, opt_state = iqn.make_optimizer(config).update(grads, opt_state, params)
    params = optax.apply_updates(params, updates)
    target_params = optax.incremental_update(params, target_params, config.target_update_rate)
    return params, target_params, opt_state, loss


def test_iqn_train_step_accepts_another_right_answer(capsys):
    assert exercises.check("iqn_train_step", iqn_train_step_with_take_along_axis, seed=0), capsys.readouterr().out


def test_the_new_core_exercises_are_the_algorithms_and_the_old_ones_warm_ups():
    core = {name for name in exercises.names() if exercises.get(name).core}
    assert {"dqn_scan_step", "data_parallel_dqn_update", "iqn_train_step"} <= core
    assert not {"scan_training_loop", "shard_map_pmean", "noisy_linear"} & core  # stand-ins kept as warm-ups
