"""The JAX iRainbow port on its own: NoisyLinear, IQN, the frame buffer, the loss and update, vmap over agents.

(Parity with the PyTorch reference is tests/test_iqn_parity.py.) One small config serves most
tests so that the jitted steps compile once.
"""

import dataclasses
import functools
import math

import chex
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from labcore import replay
from labcore.agents.iqn import core as iqn
from labcore.agents.iqn import frame_buffer as fb
from labcore.nets.iqn import make_iqn, q_values, sample_taus
from labcore.nets.noisy import SIGMA_INIT, NoisyLinear

CONFIG = iqn.IQNConfig(obs_size=3, n_actions=4, n_frames=3, hidden_size=16, n_quantiles=4, n_tau_act=8,
                       buffer_size=32, batch_size=8, learning_rate=1e-3)
N_AGENTS = 3


_add = jax.jit(fb.buffer_add, static_argnames=("config",))  # compiled once; the tests add many rows


def fill(buf: fb.FrameBuffer, steps: int, config: iqn.IQNConfig = CONFIG, start: int = 0,
         done_at: tuple[int, ...] = ()) -> fb.FrameBuffer:
    """Add `steps` rows: row t holds obs = t + [0, 0.1, 0.2, ...], action t % A, reward t, done at done_at."""
    for t in range(start, start + steps):
        obs = np.float32(t) + 0.1 * np.arange(config.obs_size, dtype=np.float32)
        buf = _add(buf, obs, t % config.n_actions, np.float32(t), np.float32(t in done_at), config=config)
    return buf


@pytest.fixture(scope="module")
def agent() -> iqn.AgentState:
    a = iqn.init_agent(jax.random.key(0), CONFIG)
    return a.replace(buffer=fill(a.buffer, 20))


@pytest.fixture(scope="module")
def batch(agent) -> fb.Batch:
    return fb.gather_batch(agent.buffer, fb.sample_indices(jax.random.key(1), agent.buffer, CONFIG), CONFIG)


# ----------------------------------------------------------------------------------------------
# NoisyLinear


def test_noisy_linear_init_ranges_and_names():
    layer = NoisyLinear(50, 40, rngs=nnx.Rngs(params=0))
    params = nnx.to_pure_dict(nnx.state(layer, nnx.Param))
    assert {k: v.shape for k, v in params.items()} == {
        "kernel": (50, 40), "bias": (40,), "sigma_kernel": (50, 40), "sigma_bias": (40,)}
    bound = math.sqrt(3 / 50)
    for name in ("kernel", "bias"):
        assert float(jnp.max(jnp.abs(params[name]))) <= bound
    # spread over the whole range, not a narrower distribution (2000 uniform draws)
    assert float(jnp.max(params["kernel"])) > 0.95 * bound and float(jnp.min(params["kernel"])) < -0.95 * bound
    assert np.all(np.asarray(params["sigma_kernel"]) == np.float32(SIGMA_INIT))
    assert np.all(np.asarray(params["sigma_bias"]) == np.float32(0.017))
    # every one of them is trained: all four are nnx.Param
    assert sorted(nnx.to_pure_dict(nnx.state(layer, nnx.Param))) == sorted(nnx.to_pure_dict(nnx.state(layer)))


def test_noisy_linear_without_a_key_uses_mean_weights_and_noise_comes_from_the_key():
    layer = NoisyLinear(5, 3, rngs=nnx.Rngs(params=0))
    x = jax.random.normal(jax.random.key(1), (7, 5))
    params = nnx.to_pure_dict(nnx.state(layer, nnx.Param))
    mean = layer(x)
    np.testing.assert_allclose(mean, x @ params["kernel"] + params["bias"], rtol=1e-6)

    noisy = layer(x, jax.random.key(2))
    eps_k, eps_b = layer.noise(jax.random.key(2))
    assert eps_k.shape == (5, 3) and eps_b.shape == (3,)
    # independent noise on every weight: y = x (mu + sigma * eps) + (mu_b + sigma_b * eps_b)
    by_hand = x @ (params["kernel"] + params["sigma_kernel"] * eps_k) + params["bias"] + params["sigma_bias"] * eps_b
    np.testing.assert_allclose(noisy, by_hand, rtol=1e-5, atol=1e-6)
    assert not np.allclose(noisy, mean)
    assert not np.allclose(eps_k[0, :3], eps_b)  # the kernel's and the bias's draws come from split keys
    # The noise is a function of the key alone: same key, same output; another key, another.
    np.testing.assert_array_equal(layer(x, jax.random.key(2)), noisy)
    assert not np.allclose(layer(x, jax.random.key(3)), noisy)


def test_noisy_linear_checks_the_input_width():
    layer = NoisyLinear(5, 3, rngs=nnx.Rngs(params=0))
    with pytest.raises(ValueError, match=r"^NoisyLinear expects .*in_features=5.*\(2, 4\)"):
        layer(jnp.zeros((2, 4)))


# ----------------------------------------------------------------------------------------------
# IQN


def test_iqn_shapes_names_init_dueling_and_checks():
    network = make_iqn(in_features=12, n_actions=4, layer_size=16)
    x = jax.random.normal(jax.random.key(0), (5, 12))
    taus = sample_taus(jax.random.key(1), 5, 7)
    assert taus.shape == (5, 7, 1) and float(taus.min()) >= 0 and float(taus.max()) < 1
    params = jax.jit(network.init)(jax.random.key(2))
    assert sorted(params) == ["advantage", "cos_embedding", "ff_1", "head1", "value"]
    assert params["head1"]["kernel"].shape == (12, 16) and params["cos_embedding"]["kernel"].shape == (64, 16)
    assert set(params["ff_1"]) == {"kernel", "bias", "sigma_kernel", "sigma_bias"}
    # torch.nn.Linear's default distribution for the dense layers: U(+-1/sqrt(in))
    assert float(jnp.max(jnp.abs(params["head1"]["kernel"]))) <= 1 / math.sqrt(12)
    assert float(jnp.max(jnp.abs(params["cos_embedding"]["bias"]))) <= 1 / math.sqrt(64)
    # the same seed, the same parameters, compiled or not
    chex.assert_trees_all_equal(network.init(jax.random.key(2)), params)
    quantiles = jax.jit(network.apply)(params, x, taus)
    assert quantiles.shape == (5, 7, 4)
    # dueling: the mean over actions of the quantiles is the value stream's output
    model = network.bind(params)
    z = jax.nn.relu(model.head1(x))[:, None, :] * jax.nn.relu(
        model.cos_embedding(jnp.cos(taus * jnp.pi * jnp.arange(1, 65))))
    value = model.value(jax.nn.relu(model.ff_1(z.reshape(35, 16))))
    np.testing.assert_allclose(quantiles.mean(axis=-1), value.reshape(5, 7), atol=1e-5)
    q_fn = jax.jit(q_values, static_argnums=(0, 4, 5))
    q = q_fn(network, params, x, jax.random.key(3), 7, True, taus)
    np.testing.assert_allclose(q, quantiles.mean(axis=1), rtol=1e-6)
    noisy = q_fn(network, params, x, jax.random.key(3), 7, False, taus)
    assert noisy.shape == (5, 4) and not np.allclose(noisy, q)
    # the draws noise_draws reports are the ones the noisy forward used
    key = jax.random.key(4)
    draws = network.apply(params, key, method="noise_draws")
    assert sorted(draws) == ["advantage", "ff_1", "value"] and draws["ff_1"]["eps_kernel"].shape == (16, 16)
    replayed = {name: dict(layer) for name, layer in params.items()}
    for name, eps in draws.items():
        replayed[name]["kernel"] = params[name]["kernel"] + params[name]["sigma_kernel"] * eps["eps_kernel"]
        replayed[name]["bias"] = params[name]["bias"] + params[name]["sigma_bias"] * eps["eps_bias"]
    np.testing.assert_allclose(network.apply(params, x, taus, key), network.apply(replayed, x, taus), atol=1e-5)
    with pytest.raises(ValueError, match="in_features=12"):
        network.apply(params, jnp.zeros((5, 13)), taus)
    with pytest.raises(ValueError, match="taus of shape"):
        network.apply(params, x, taus[:, :, 0])


# ----------------------------------------------------------------------------------------------
# The frame buffer


def test_buffer_add_wraps_around():
    buf = fill(fb.buffer_init(CONFIG), 35)  # capacity 32
    assert int(buf.idx) == 3 and int(buf.size) == 32
    np.testing.assert_allclose(buf.states[:3, 0], [32, 33, 34])  # rows 0..2 overwritten by steps 32..34
    np.testing.assert_allclose(buf.states[3:5, 0], [3, 4])
    assert buf.actions.dtype == jnp.int32 and buf.actions[2] == 34 % 4 and buf.rewards[31] == 31
    with pytest.raises(ValueError, match=r"obs must have shape \[obs_size\] = \(3,\)"):
        fb.buffer_add(buf, jnp.zeros(4), 0, 0.0, 0.0, CONFIG)


def test_add_empty_and_current_state_across_the_wrap():
    buf = fill(fb.buffer_init(CONFIG), 30)  # idx 30, rows 0..29
    np.testing.assert_allclose(fb.buffer_current_state(buf, CONFIG)[:, 0], [28, 29])
    buf = fb.buffer_add_empty(buf, CONFIG)  # idx 30 + 2 = 32 -> 0: rows 30, 31 skipped, not cleared
    assert int(buf.idx) == 0 and int(buf.size) == 30
    np.testing.assert_allclose(fb.buffer_current_state(buf, CONFIG), np.zeros((2, 3)))  # never written: zeros
    buf = fill(buf, 1, start=100)  # idx 1: the state wraps, rows 31 then 0
    np.testing.assert_allclose(fb.buffer_current_state(buf, CONFIG)[:, 0], [0, 100])
    buf = fill(buf, 32, start=200)  # full circle; idx back at 1
    buf = fb.buffer_add_empty(buf, CONFIG)  # idx 3: rows 1, 2 keep their old contents (steps 200, 201)
    np.testing.assert_allclose(fb.buffer_current_state(buf, CONFIG)[:, 0], [200, 201])
    obs = jnp.full((3,), 7.0)
    stacked = fb.stacked_state(buf, obs, CONFIG)
    assert stacked.shape == (9,)
    frames = np.concatenate([fb.buffer_current_state(buf, CONFIG), obs[None]])
    np.testing.assert_allclose(stacked.reshape(3, 3), frames)
    with pytest.raises(ValueError, match="obs must have shape"):
        fb.stacked_state(buf, jnp.zeros(9), CONFIG)


def test_sample_indices_range_uniqueness_and_lax_scan():
    buf = fill(fb.buffer_init(CONFIG), 20)  # range(max(1, 20 - 3 - 1)) = range(16)
    assert bool(fb.can_train(buf, CONFIG))  # 16 >= 8
    assert not bool(fb.can_train(fill(fb.buffer_init(CONFIG), 11), CONFIG))  # range(7)

    @jax.jit
    def many(key):
        def body(carry, k):
            return carry, fb.sample_indices(k, buf, CONFIG)
        return jax.lax.scan(body, 0, jax.random.split(key, 400))[1]

    draws = np.asarray(many(jax.random.key(0)))  # [400, 8]
    assert draws.shape == (400, 8) and draws.dtype == np.int32
    assert draws.min() >= 0 and draws.max() <= 15
    assert all(len(set(row)) == 8 for row in draws)  # without replacement
    counts = np.bincount(draws.ravel(), minlength=16)  # uniform: each start in 8/16 of the batches
    assert counts.min() > 150 and counts.max() < 250
    # size grows: the range follows it (a traced size, same compiled program)
    small = fill(fb.buffer_init(CONFIG), 12)  # range(8): exactly the 8 valid starts
    assert sorted(np.asarray(fb.sample_indices(jax.random.key(3), small, CONFIG)).tolist()) == list(range(8))


def test_gather_batch_by_hand():
    buf = fill(fb.buffer_init(CONFIG), 20, done_at=(5,))
    b = fb.gather_batch(buf, jnp.array([0, 4, 5, 10]), CONFIG)
    assert b.states.shape == (4, 9) and b.next_states.shape == (4, 9) and b.actions.shape == (4, 1)
    np.testing.assert_allclose(b.states.reshape(4, 3, 3)[:, :, 0], [[0, 1, 2], [4, 5, 6], [5, 6, 7], [10, 11, 12]])
    np.testing.assert_allclose(b.next_states.reshape(4, 3, 3)[:, :, 0], [[1, 2, 3], [5, 6, 7], [6, 7, 8], [11, 12, 13]])
    np.testing.assert_array_equal(b.actions[:, 0], [2, 6 % 4, 7 % 4, 12 % 4])
    np.testing.assert_allclose(b.rewards[:, 0], [2, 6, 7, 12])
    np.testing.assert_allclose(b.dones[:, 0], [0, 0, 0, 0])
    np.testing.assert_allclose(b.valid[:, 0], [1, 0, 0, 1])  # a done among the first n_frames - 1 rows
    at_done = fb.gather_batch(buf, jnp.array([3]), CONFIG)  # stack rows 3, 4, 5: done on the last row
    assert float(at_done.dones[0, 0]) == 1.0 and float(at_done.valid[0, 0]) == 1.0


def test_the_buffer_behind_replay_buffer_is_its_functions_and_ignores_episode_end():
    buffer = iqn.make_buffer(CONFIG)
    assert isinstance(buffer, replay.Buffer) and iqn.make_buffer(CONFIG) is buffer  # one bundle per config
    with pytest.raises(ValueError, match=r"example.obs must have shape \[obs_size\] = \(3,\)"):
        buffer.init(fb.example_step(dataclasses.replace(CONFIG, obs_size=4)))
    empty = buffer.init(fb.example_step(CONFIG))
    chex.assert_trees_all_equal(empty, fb.buffer_init(CONFIG), strict=True)
    t = np.arange(70)
    steps = fb.Step(obs=np.float32(t)[:, None] + 0.1 * np.arange(3, dtype=np.float32), action=t % 4,
                    reward=np.float32(t), done=t % 7 == 6)  # a bool done, stored as 1.0
    ends = np.zeros(70, bool)
    ends[[4, 20]] = True
    add = jax.jit(buffer.add)

    def part(a: int, b: int) -> fb.Step:
        return jax.tree_util.tree_map(lambda leaf: leaf[a:b], steps)

    # 35 steps in two adds (the second across the wrap at 32), then a whole ring's 32 more and none:
    # the rows fill writes one by one. An episode end does not skip rows (the agent's epoch start
    # does, with buffer_add_empty).
    added = add(add(empty, part(0, 20), ends[:20]), part(20, 35), ends[20:35])
    dones = tuple(range(6, 70, 7))
    chex.assert_trees_all_equal(added, fill(fb.buffer_init(CONFIG), 35, done_at=dones), strict=True)
    lapped = buffer.add(add(added, part(35, 67), ends[35:67]), part(67, 67), ends[67:67])
    chex.assert_trees_all_equal(lapped, fill(fb.buffer_init(CONFIG), 67, done_at=dones), strict=True)
    with pytest.raises(ValueError, match="cannot add 33 transitions at once to a buffer of capacity 32"):
        buffer.add(empty, part(0, 33), ends[:33])
    with pytest.raises(ValueError, match=r"steps.action must have shape \(4,\) \(N = 4 steps\), got \(\)"):
        buffer.add(empty, part(0, 4)._replace(action=np.int32(3)), ends[:4])  # would fill 4 rows with one action
    # sample and can_sample are the original's draw and train condition: 12 rows are the first that train
    assert not bool(buffer.can_sample(fill(fb.buffer_init(CONFIG), 11)))
    assert bool(buffer.can_sample(fill(fb.buffer_init(CONFIG), 12))) and bool(buffer.can_sample(added))
    key = jax.random.key(4)
    chex.assert_trees_all_equal(buffer.sample(added, key),
                                fb.gather_batch(added, fb.sample_indices(key, added, CONFIG), CONFIG), strict=True)


def test_remember_adds_one_step_as_buffer_add_does_across_the_wrap_and_under_vmap(agent):
    obs = jnp.array([7.0, 7.1, 7.2], jnp.float32)
    full = agent.replace(buffer=fill(agent.buffer, 11, start=20))  # idx 31: the next write wraps to row 0
    once = iqn.remember(full, obs, 3, 1.5, True, config=CONFIG)
    twice = iqn.remember(once, obs + 1, 2, -1.0, False, config=CONFIG)
    expected = fb.buffer_add(fb.buffer_add(full.buffer, obs, 3, 1.5, True, CONFIG), obs + 1, 2, -1.0, False, CONFIG)
    chex.assert_trees_all_equal(twice.buffer, expected, strict=True)
    assert int(twice.buffer.idx) == 1 and float(twice.buffer.dones[31]) == 1.0
    with pytest.raises(ValueError, match=r"^obs must have shape \[obs_size\]"):
        iqn.remember(agent, jnp.zeros(4), 0, 0.0, 0.0, config=CONFIG)
    # under vmap: each agent's buffer gets its own step, as buffer_add would write it alone
    agents = jax.tree_util.tree_map(lambda a, b: jnp.stack([a, b]), agent, full)
    stacked = jax.vmap(functools.partial(iqn.remember, config=CONFIG))(
        agents, jnp.stack([obs, obs + 1]), jnp.array([1, 2]), jnp.array([0.5, 0.25]), jnp.array([False, True]))
    for i, (alone, o, a, r, d) in enumerate([(agent, obs, 1, 0.5, False), (full, obs + 1, 2, 0.25, True)]):
        expected = fb.buffer_add(alone.buffer, o, a, r, d, CONFIG)
        chex.assert_trees_all_equal(iqn.unstack_agent(stacked, i).buffer, expected, strict=True)

# ----------------------------------------------------------------------------------------------
# Acting, learning, target updates, epsilon


def test_select_action_greedy_random_and_shape_check(agent):
    obs = jnp.arange(3, dtype=jnp.float32)
    stacked = fb.stacked_state(agent.buffer, obs, CONFIG)
    key = jax.random.key(5)
    greedy = iqn.select_action(agent.params, stacked, jnp.float32(0.0), key, CONFIG)
    taus = sample_taus(jax.random.split(key, 3)[2], 1, CONFIG.n_tau_act)  # the taus select_action draws
    assert int(greedy) == int(iqn.greedy_action(agent.params, stacked, taus, CONFIG))
    via_select = iqn.select_action(agent.params, stacked, agent.epsilon, key, CONFIG)
    assert int(iqn.act(agent, obs, key, CONFIG)) == int(via_select)
    explore = [int(iqn.select_action(agent.params, stacked, jnp.float32(1.0), k, CONFIG))
               for k in jax.random.split(jax.random.key(6), 40)]
    assert set(explore) == {0, 1, 2, 3}  # epsilon = 1: uniform over the actions
    with pytest.raises(ValueError, match=r"n_frames \* obs_size\] = \(3 \* 3 = 9,\), got \(3,\)"):
        iqn.select_action(agent.params, obs, jnp.float32(0.0), key, CONFIG)  # a single frame: no silent broadcast


def test_train_step_lowers_the_loss_on_a_fixed_batch(agent, batch):
    params, target, opt_state = agent.params, agent.target_params, agent.opt_state
    key = jax.random.key(7)  # the same taus and noise every step: the loss is a function of params only
    history = []
    for _ in range(30):
        params, target, opt_state, loss = iqn.train_step(params, target, opt_state, batch, key, CONFIG)
        history.append(float(loss))  # the loss before this step's update
    assert history[-1] < 0.85 * history[0]
    # the target moved by the soft update only: target_update_rate = 1e-3 of the way per step
    moved = jax.tree_util.tree_map(lambda t, t0: float(jnp.max(jnp.abs(t - t0))), target, agent.target_params)
    assert 0 < max(jax.tree_util.tree_leaves(moved)) < 0.01
    with pytest.raises(ValueError, match=r"batch.states must have shape \(8, 9\)"):
        iqn.train_step(params, target, opt_state, batch.replace(states=batch.states[:, :6]), key, CONFIG)


def test_the_optimizer_clips_the_global_norm():
    optimizer = iqn.make_optimizer(CONFIG)
    params = {"w": jnp.zeros(4)}
    grads = {"w": jnp.array([30.0, 40.0, 0.0, 0.0])}  # norm 50 -> clipped to norm 1
    clipped, _ = optax.clip_by_global_norm(1.0).update(grads, None)
    np.testing.assert_allclose(optax.tree.norm(clipped), 1.0, rtol=1e-6)
    updates, _ = optimizer.update(grads, optimizer.init(params), params)
    np.testing.assert_allclose(updates["w"][:2], [-1e-3, -1e-3], rtol=1e-4)  # Adam's first step: learning_rate * sign


def dataclass_replace(config: iqn.IQNConfig, **changes) -> iqn.IQNConfig:
    return dataclasses.replace(config, **changes)


def test_soft_and_hard_update():
    local = {"a": jnp.array([1.0, 2.0]), "b": {"c": jnp.array(4.0)}}
    target = {"a": jnp.array([0.0, 0.0]), "b": {"c": jnp.array(2.0)}}
    soft = iqn.soft_update(target, local, 0.25)
    np.testing.assert_allclose(soft["a"], [0.25, 0.5])
    np.testing.assert_allclose(soft["b"]["c"], 2.5)
    hard = iqn.hard_update(local)
    assert jax.tree_util.tree_structure(hard) == jax.tree_util.tree_structure(local)
    np.testing.assert_array_equal(hard["a"], local["a"])


def test_start_epoch_syncs_every_target_sync_epochs_and_adds_empty(agent):
    drifted = agent.replace(params=jax.tree_util.tree_map(lambda p: p + 1.0, agent.params))
    config = dataclass_replace(CONFIG, target_sync_epochs=3)
    for epoch, synced in ((0, True), (1, False), (2, False), (3, True), (6, True)):
        after = iqn.start_epoch(drifted, epoch, config)
        expected = drifted.params if synced else drifted.target_params
        for a, b in zip(jax.tree_util.tree_leaves(after.target_params), jax.tree_util.tree_leaves(expected)):
            np.testing.assert_array_equal(a, b)
        assert int(after.buffer.idx) == (int(drifted.buffer.idx) + 2) % 32 and int(after.buffer.size) == 20


def test_epsilon_schedule():
    config = dataclass_replace(CONFIG, epsilon_decay=0.1, epsilon_end=0.5)
    a = iqn.AgentState(params={}, target_params={}, opt_state=(), buffer=fb.buffer_init(config),
                       epsilon=jnp.float32(1.0))
    seen = []
    for _ in range(8):
        a = iqn.end_epoch(a, config)
        seen.append(float(a.epsilon))
    np.testing.assert_allclose(seen[:6], [0.9**k for k in range(1, 7)], rtol=1e-6)
    assert seen[6:] == [0.5, 0.5]  # 0.9 ** 7 = 0.478 is floored at epsilon_end
    assert a.epsilon.dtype == jnp.float32


def test_config_validation_names_the_field():
    with pytest.raises(ValueError, match=r"IQNConfig.gamma must be a number in \[0, 1\], got 1.5"):
        iqn.IQNConfig(gamma=1.5)
    with pytest.raises(ValueError, match="IQNConfig.n_frames must be an integer >= 1"):
        iqn.IQNConfig(n_frames=0)
    with pytest.raises(ValueError, match="IQNConfig.batch_size must be <= buffer_size - n_frames - 1 = 1018"):
        iqn.IQNConfig(batch_size=1019)
    with pytest.raises(ValueError, match="IQNConfig.batch_size must be <= buffer_size - n_frames - 3 = 1016"):
        iqn.IQNConfig(batch_size=1017, fixed=True)
    with pytest.raises(ValueError, match="IQNConfig.fixed must be a bool"):
        iqn.IQNConfig(fixed=1)
    with pytest.raises(ValueError, match="IQNConfig.learning_rate must be a finite number > 0"):
        iqn.IQNConfig(learning_rate=0.0)
    with pytest.raises(ValueError, match="IQNConfig.epsilon_end must be <= epsilon_start"):
        iqn.IQNConfig(epsilon_start=0.1, epsilon_end=0.2)
    assert iqn.IQNConfig().in_features == 625 and hash(iqn.IQNConfig()) == hash(iqn.IQNConfig())


def test_check_params_shape_names_the_leaf_and_both_shapes(agent):
    iqn.check_params_shape(agent.params, CONFIG)
    with pytest.raises(ValueError, match=r"'head1/kernel' has shape \(9, 16\), but the config expects \(12, 16\)"):
        iqn.check_params_shape(agent.params, dataclass_replace(CONFIG, obs_size=4))
    with pytest.raises(ValueError, match=r"'advantage/bias' has shape \(4,\), but the config expects \(5,\)"):
        iqn.check_params_shape(agent.params, dataclass_replace(CONFIG, n_actions=5))
    missing = {k: v for k, v in agent.params.items() if k != "value"}
    with pytest.raises(ValueError, match="missing leaf 'value/bias'"):
        iqn.check_params_shape(missing, CONFIG)
    with pytest.raises(ValueError, match=r"'advantage/bias' has shape \(4,\), but the config expects \(3, 4\)"):
        iqn.check_params_shape(agent.params, CONFIG, n_agents=3)  # stacked agents expected, one given
    stacked = iqn.stack_agents([agent, agent, agent])
    iqn.check_params_shape(stacked.params, CONFIG, n_agents=3)


def test_device_placement_is_explicit():
    device = jax.devices()[-1]
    a = iqn.init_agent(jax.random.key(0), CONFIG, device=device)
    assert all(leaf.devices() == {device} for leaf in jax.tree_util.tree_leaves(a))
    stacked = iqn.init_agents(jax.random.key(0), CONFIG, N_AGENTS, device=device)
    assert all(leaf.devices() == {device} for leaf in jax.tree_util.tree_leaves(stacked))
    with pytest.raises(ValueError, match="n_agents must be an integer >= 1"):
        iqn.init_agents(jax.random.key(0), CONFIG, 0)


# ----------------------------------------------------------------------------------------------
# vmap over a leading agent axis == each agent alone


@pytest.fixture(scope="module")
def agents() -> iqn.AgentState:
    """Three agents with their own weights and their own experience; agent 2's buffer is too
    small to train (range(max(1, 10 - 4)) = 6 starts < batch 8)."""
    stacked = iqn.init_agents(jax.random.key(10), CONFIG, N_AGENTS)
    agents = [iqn.unstack_agent(stacked, i) for i in range(N_AGENTS)]
    assert not np.allclose(agents[0].params["head1"]["kernel"], agents[1].params["head1"]["kernel"])  # own weights
    agents = [a.replace(buffer=fill(a.buffer, (16, 19, 10)[i], start=5 * i), epsilon=jnp.float32(0.3 * i))
              for i, a in enumerate(agents)]
    return iqn.stack_agents(agents)


def assert_trees_close(a, b, atol=1e-6):
    leaves_a, leaves_b = jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)
    assert len(leaves_a) == len(leaves_b)
    for x, y in zip(leaves_a, leaves_b):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), atol=atol, rtol=1e-6)


def test_vmapped_acting_equals_each_agent_alone(agents):
    obs = jax.random.uniform(jax.random.key(11), (N_AGENTS, 3))
    keys = jax.random.split(jax.random.key(12), N_AGENTS)  # typed keys, one per agent
    stacked = jax.vmap(functools.partial(fb.stacked_state, config=CONFIG))(agents.buffer, obs)
    assert stacked.shape == (N_AGENTS, 9)
    select = jax.vmap(functools.partial(iqn.select_action, config=CONFIG))
    actions = select(agents.params, stacked, agents.epsilon, keys)
    assert actions.shape == (N_AGENTS,)
    for i in range(N_AGENTS):
        alone = iqn.unstack_agent(agents, i)
        np.testing.assert_allclose(stacked[i], fb.stacked_state(alone.buffer, obs[i], CONFIG), atol=1e-6)
        assert int(actions[i]) == int(iqn.select_action(alone.params, stacked[i], alone.epsilon, keys[i], CONFIG))


def test_vmapped_training_equals_each_agent_alone(agents):
    keys = jax.random.split(jax.random.key(14), N_AGENTS)
    sample = jax.jit(jax.vmap(lambda buf, k: fb.gather_batch(buf, fb.sample_indices(k, buf, CONFIG), CONFIG)))
    batches = sample(agents.buffer, keys)
    out = jax.vmap(functools.partial(iqn.train_step, config=CONFIG))(
        agents.params, agents.target_params, agents.opt_state, batches, keys)
    for i in range(N_AGENTS):
        alone = iqn.unstack_agent(agents, i)
        batch = fb.gather_batch(alone.buffer, fb.sample_indices(keys[i], alone.buffer, CONFIG), CONFIG)
        assert_trees_close(jax.tree_util.tree_map(lambda x: x[i], batches), batch)
        single = iqn.train_step(alone.params, alone.target_params, alone.opt_state, batch, keys[i], CONFIG)
        assert_trees_close(jax.tree_util.tree_map(lambda x: x[i], out), single)
    # agents learn on their own: different weights and data give different losses
    assert len({round(float(x), 5) for x in out[3]}) == N_AGENTS


def test_vmapped_learn_trains_each_agent_alone_and_skips_a_small_buffer(agents):
    keys = jax.random.split(jax.random.key(15), N_AGENTS)
    learned, losses = jax.vmap(functools.partial(iqn.learn, config=CONFIG))(agents, keys)
    for i in range(N_AGENTS):
        alone = iqn.unstack_agent(agents, i)
        if i == 2:  # cannot train: unchanged, loss NaN (the original returns None)
            assert not bool(fb.can_train(alone.buffer, CONFIG)) and np.isnan(float(losses[i]))
            assert_trees_close(iqn.unstack_agent(learned, i), alone, atol=0)
            continue
        sample_key, step_key = jax.random.split(keys[i])  # learn's own split
        batch = fb.gather_batch(alone.buffer, fb.sample_indices(sample_key, alone.buffer, CONFIG), CONFIG)
        params, target, opt_state, loss = iqn.train_step(alone.params, alone.target_params, alone.opt_state, batch,
                                                         step_key, CONFIG)
        expected = alone.replace(params=params, target_params=target, opt_state=opt_state)
        assert_trees_close(iqn.unstack_agent(learned, i), expected)
        np.testing.assert_allclose(losses[i], loss, atol=1e-6)


# ----------------------------------------------------------------------------------------------
# The flagged fixed variant


def test_fixed_variant_n_step_returns_and_targets_by_hand():
    fixed = dataclass_replace(CONFIG, fixed=True)  # n_step 3, gamma 0.99
    buf = fill(fb.buffer_init(fixed), 20, done_at=(9,))
    # range(max(1, size - n_frames - n_step)) = range(14): two fewer starts than the faithful 16
    assert int(fb.sample_range(buf, fixed)) == 14 and int(fb.sample_range(buf, CONFIG)) == 16
    assert int(np.asarray(fb.sample_indices(jax.random.key(0), buf, fixed)).max()) <= 13
    b = fb.gather_batch(buf, jnp.array([0, 5, 6, 7]), fixed)  # last rows t = 2, 7, 8, 9
    g = 0.99
    np.testing.assert_allclose(b.rewards[:, 0], [2 + g * 3 + g**2 * 4,   # rows 2, 3, 4
                                                 7 + g * 8 + g**2 * 9,   # rows 7, 8, 9 (done on the last)
                                                 8 + g * 9,              # the return stops at the done on row 9
                                                 9.0], rtol=1e-6)        # done right away
    np.testing.assert_allclose(b.dones[:, 0], [0, 1, 1, 1])
    # the next state starts n_step rows ahead: rows t + 3 - 2 .. t + 3
    np.testing.assert_allclose(b.next_states.reshape(4, 3, 3)[:, :, 0],
                               [[3, 4, 5], [8, 9, 10], [9, 10, 11], [10, 11, 12]])
    np.testing.assert_allclose(b.states.reshape(4, 3, 3)[:, :, 0], [[0, 1, 2], [5, 6, 7], [6, 7, 8], [7, 8, 9]])
    # target = R + gamma^n * Z(s', a*) * (1 - done), as a constant for the gradient
    z = jnp.array([[[1.0, 2.0]], [[3.0, 4.0]], [[5.0, 6.0]], [[7.0, 8.0]]])  # [B, 1, N = 2]
    targets = iqn.quantile_targets(b.rewards, b.dones, z, fixed)
    expected = np.asarray(b.rewards)[:, :, None] + g**3 * np.asarray(z) * (1 - np.asarray(b.dones))[:, :, None]
    np.testing.assert_allclose(targets, expected, rtol=1e-6)
    np.testing.assert_allclose(targets[0, 0], [8.8904 + 0.970299, 8.8904 + 2 * 0.970299], rtol=1e-5)
    grad = jax.grad(lambda z: iqn.quantile_targets(b.rewards, b.dones, z, fixed).sum())(z)
    assert float(jnp.abs(grad).sum()) == 0.0
    grad = jax.grad(lambda z: iqn.quantile_targets(b.rewards, b.dones, z, CONFIG).sum())(z)
    np.testing.assert_allclose(grad[0, 0], [g**3, g**3], rtol=1e-6)  # faithful: a live gradient path
    # faithful mode on the same rows: one-step reward, next state one row ahead, still gamma ** 3
    faithful = fb.gather_batch(buf, jnp.array([0]), CONFIG)
    assert float(faithful.rewards[0, 0]) == 2.0 and float(faithful.next_states[0, 0]) == 1.0
