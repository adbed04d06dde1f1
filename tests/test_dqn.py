"""DQN pieces: config validation, epsilon schedule, acting, the update and target updates."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
import rlax

from labcore.agents.dqn import core as dqn
from labcore.nets.q_networks import make_q_network


@pytest.mark.parametrize(
    "field,value",
    [
        ("learning_rate", -1e-3),
        ("learning_rate", float("nan")),
        ("batch_size", 0),
        ("gamma", 1.5),
        ("network", "transformer"),
        ("optimizer", "sgd"),
        ("target_update_rate", 0.0),
        ("epsilon_end", -0.1),
        ("exploration_fraction", 0.0),
        ("max_grad_norm", 0.0),
        ("hidden_sizes", ()),
        ("env_id", ""),
        ("td_loss", "l1"),
        ("num_envs", 0),
        ("replay_storage", "disk"),
        ("repeat_action_probability", 1.0),
        ("eval_episodes", 0),
        ("eval_epsilon", 2.0),
    ],
)
def test_bad_config_names_the_field(field, value):
    with pytest.raises(ValueError, match=f"DQNConfig.{field} must be"):
        dqn.DQNConfig(**{field: value})


def test_batch_larger_than_buffer_is_refused():
    with pytest.raises(ValueError, match=r"DQNConfig.batch_size must be <= buffer_size \(100\)"):
        dqn.DQNConfig(buffer_size=100, batch_size=128)


def test_frame_storage_needs_frames_and_one_env():
    with pytest.raises(ValueError, match="DQNConfig.replay_storage must be 'transitions' unless"):
        dqn.DQNConfig(replay_storage="frames")
    with pytest.raises(ValueError, match="DQNConfig.num_envs must be 1 with replay_storage='frames'"):
        dqn.DQNConfig.nature_atari(num_envs=4)


def test_short_atari_schedule_fits_its_budget():
    config = dqn.DQNConfig.atari_short(total_steps=250_000)
    assert config.buffer_size == 250_000 and config.exploration_fraction * config.total_steps == 100_000
    assert (config.network, config.td_loss, config.replay_storage) == ("nature_cnn", "huber", "frames")


def test_nature_atari_settings():
    config = dqn.DQNConfig.nature_atari()
    assert (config.network, config.buffer_size, config.batch_size) == ("nature_cnn", 1_000_000, 32)
    assert (config.learning_starts, config.train_frequency, config.target_update_frequency) == (50_000, 4, 10_000)
    assert dqn.DQNConfig.nature_atari(total_steps=250_000).total_steps == 250_000


def test_linear_epsilon_schedule():
    config = dqn.DQNConfig(total_steps=1000, exploration_fraction=0.5, epsilon_start=1.0, epsilon_end=0.1)
    values = [float(dqn.linear_epsilon(s, config)) for s in (0, 250, 500, 900)]
    np.testing.assert_allclose(values, [1.0, 0.55, 0.1, 0.1], rtol=1e-6)
    assert float(jax.jit(dqn.linear_epsilon, static_argnums=1)(250, config)) == pytest.approx(0.55)


def setup(config=None, obs_dim=4, actions=3, seed=0):
    config = config or dqn.DQNConfig(batch_size=32, buffer_size=1000)
    network = make_q_network("mlp", actions, (32, 32))
    optimizer = dqn.make_optimizer(config)
    state = dqn.init_train_state(config, network, optimizer, jnp.zeros(obs_dim), jax.random.key(seed))
    return config, network, optimizer, state


def random_batch(key, batch=32, obs_dim=4, actions=3):
    k = jax.random.split(key, 5)
    return dqn.Transition(
        obs=jax.random.normal(k[0], (batch, obs_dim)),
        action=jax.random.randint(k[1], (batch,), 0, actions),
        reward=jax.random.normal(k[2], (batch,)),
        next_obs=jax.random.normal(k[3], (batch, obs_dim)),
        terminated=jax.random.bernoulli(k[4], 0.2, (batch,)),
    )


def test_greedy_and_random_acting():
    _, network, _, state = setup()
    obs = jax.random.normal(jax.random.key(1), (2000, 4))
    greedy = dqn.select_action(network, state.params, obs, 0.0, jax.random.key(2))
    np.testing.assert_array_equal(greedy, jnp.argmax(network.apply(state.params, None, obs), -1))
    random = dqn.select_action(network, state.params, obs, 1.0, jax.random.key(3))
    counts = np.bincount(np.asarray(random), minlength=3)
    assert counts.min() > 550  # ~667 each when uniform
    assert random.dtype == jnp.int32
    # epsilon 0.3: a random action differs from the greedy one 2/3 of the time -> 20% differ.
    mixed = dqn.select_action(network, state.params, obs, 0.3, jax.random.key(4))
    assert 0.17 < float(jnp.mean(mixed != greedy)) < 0.23


@pytest.mark.parametrize("td_loss", ["huber", "mse"])
def test_loss_matches_rlax_reference(td_loss):
    config, network, _, state = setup(dqn.DQNConfig(batch_size=32, buffer_size=1000, td_loss=td_loss))
    batch = random_batch(jax.random.key(4))
    loss, _ = dqn.make_loss(config, network)(state.params, state.target_params, batch)
    q = network.apply(state.params, None, batch.obs)
    next_q = network.apply(state.target_params, None, batch.next_obs)
    discount = config.gamma * (1 - batch.terminated)
    td = jax.vmap(rlax.q_learning)(q, batch.action, batch.reward, discount, next_q)
    expected = rlax.huber_loss(td, 1.0) if td_loss == "huber" else rlax.l2_loss(td)
    assert float(loss) == pytest.approx(float(jnp.mean(expected)), rel=1e-6)


def test_double_dqn_loss_matches_rlax_reference():
    config, network, _, state = setup(dqn.DQNConfig(batch_size=32, buffer_size=1000, double_dqn=True, td_loss="huber"))
    # Make online and target differ, as they do during training.
    target = jax.tree_util.tree_map(lambda p: p * 0.5, state.params)
    batch = random_batch(jax.random.key(5))
    loss, _ = dqn.make_loss(config, network)(state.params, target, batch)
    q = network.apply(state.params, None, batch.obs)
    td = jax.vmap(rlax.double_q_learning)(
        q, batch.action, batch.reward, config.gamma * (1 - batch.terminated),
        network.apply(target, None, batch.next_obs), network.apply(state.params, None, batch.next_obs),
    )
    assert float(loss) == pytest.approx(float(jnp.mean(rlax.huber_loss(td, 1.0))), rel=1e-6)


def test_update_takes_one_optimizer_step_on_the_loss_gradient():
    config, network, optimizer, state = setup()
    batch = random_batch(jax.random.key(6))
    new_state, metrics = jax.jit(dqn.make_update(config, network, optimizer))(state, batch)
    grads = jax.grad(lambda p: dqn.make_loss(config, network)(p, state.target_params, batch)[0])(state.params)
    updates, _ = optimizer.update(grads, optimizer.init(state.params), state.params)
    expected = optax.apply_updates(state.params, updates)
    for a, b in zip(jax.tree_util.tree_leaves(new_state.params), jax.tree_util.tree_leaves(expected)):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
    assert int(new_state.update_count) == 1 and float(metrics["loss"]) > 0


def test_repeated_updates_fit_a_fixed_batch():
    config, network, optimizer, state = setup(dqn.DQNConfig(batch_size=32, buffer_size=1000, learning_rate=1e-2))
    batch = random_batch(jax.random.key(7))._replace(terminated=jnp.ones(32, bool))  # targets = rewards
    update = jax.jit(dqn.make_update(config, network, optimizer))
    first = None
    for _ in range(300):
        state, metrics = update(state, batch)
        first = first if first is not None else float(metrics["loss"])
    assert float(metrics["loss"]) < first / 5


@pytest.mark.parametrize("rate", [1.0, 0.1])
def test_target_moves_every_target_update_frequency_agent_steps(rate):
    config = dqn.DQNConfig(batch_size=32, buffer_size=1000, train_frequency=4, target_update_frequency=12, target_update_rate=rate)
    _, network, optimizer, state = setup(config)
    update = jax.jit(dqn.make_update(config, network, optimizer))
    batch = random_batch(jax.random.key(8))
    leaf = lambda tree: jax.tree_util.tree_leaves(tree)[0]  # noqa: E731
    for count in range(1, 7):  # 12 agent steps / 4 = every 3rd update
        old_target = state.target_params
        state, _ = update(state, batch)
        if count % 3:
            np.testing.assert_array_equal(leaf(state.target_params), leaf(old_target))
        else:
            expected = rate * leaf(state.params) + (1 - rate) * leaf(old_target)
            np.testing.assert_allclose(leaf(state.target_params), expected, rtol=1e-6)


def test_act_store_and_update_run_inside_one_lax_scan():
    """The pieces are pure: a whole act -> store -> sample -> update loop compiles as one scan,
    and gives what the same steps give one Python call at a time."""
    from labcore import replay

    config, network, optimizer, state = setup()
    update = dqn.make_update(config, network, optimizer)
    example = jax.tree_util.tree_map(lambda leaf: leaf[0], random_batch(jax.random.key(0)))
    buffer = replay.init(example, capacity=64)

    def one_step(carry, key):
        state, buffer = carry
        act_key, data_key, sample_key = jax.random.split(key, 3)
        fresh = random_batch(data_key, batch=4)
        actions = dqn.select_action(network, state.params, fresh.obs, 0.1, act_key)
        buffer = replay.add_batch(buffer, fresh._replace(action=actions))
        state, metrics = update(state, replay.sample(buffer, sample_key, config.batch_size))
        return (state, buffer), metrics["loss"]

    keys = jax.random.split(jax.random.key(1), 20)
    (scanned, _), scan_losses = jax.jit(lambda c, k: jax.lax.scan(one_step, c, k))((state, buffer), keys)
    carry, loop_losses = (state, buffer), []
    for key in keys:
        carry, loss = jax.jit(one_step)(carry, key)
        loop_losses.append(loss)
    np.testing.assert_allclose(scan_losses, np.array(loop_losses), rtol=1e-4, atol=1e-6)
    assert int(scanned.update_count) == 20 and int(carry[1].size) == 64
