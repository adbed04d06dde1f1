"""The fully jitted DQN: learns CartPole, vmaps over seeds exactly, and refuses bad set-ups."""

import jax
import numpy as np
import pytest

from labcore import envs
from labcore.agents.dqn import core as dqn
from labcore.agents.dqn import scan as dqn_scan
from conftest import assert_same_tree


def small_config(**overrides):
    settings = dict(total_steps=3_000, learning_starts=500, buffer_size=1_000, batch_size=32, eval_episodes=3)
    settings.update(overrides)
    return dqn.DQNConfig(**settings)


def test_vmap_over_seeds_equals_one_seed_at_a_time():
    config = small_config()
    train = dqn_scan.make_train(config)
    keys = jax.random.split(jax.random.key(3), 3)
    together, together_metrics = jax.jit(jax.vmap(train))(keys)
    play = dqn_scan.make_evaluate(config)
    together_returns = jax.jit(jax.vmap(play, in_axes=(0, None)))(dqn_scan.params(together), jax.random.key(9))
    single = jax.jit(train)
    for i, key in enumerate(keys):
        alone, metrics = single(key)
        for a, b in zip(jax.tree_util.tree_leaves(alone.train_state), jax.tree_util.tree_leaves(together.train_state)):
            np.testing.assert_allclose(np.asarray(a), np.asarray(b)[i], rtol=1e-4, atol=1e-5)
        np.testing.assert_array_equal(np.asarray(metrics["episodes"]), np.asarray(together_metrics["episodes"][i]))
        np.testing.assert_allclose(np.asarray(jax.jit(play)(dqn_scan.params(alone), jax.random.key(9))),
                                   np.asarray(together_returns[i]))
    # different seeds really are different runs
    assert not np.array_equal(np.asarray(together_metrics["episodes"][0]), np.asarray(together_metrics["episodes"][1]))


def test_same_key_same_run_and_metrics_are_consistent():
    config = small_config(num_envs=2)
    train = jax.jit(dqn_scan.make_train(config))
    a, b = train(jax.random.key(0)), train(jax.random.key(0))
    assert_same_tree(a, b)
    carry, metrics = a
    warmup, learn = dqn_scan.iteration_counts(config)
    steps = np.asarray(metrics["step"])
    assert steps.shape == (warmup + learn,) and steps[-1] == config.total_steps == int(carry.step)
    assert int(carry.train_state.update_count) == learn
    loss = np.asarray(metrics["loss"])
    assert np.all(loss[:warmup] == 0) and np.all(loss[warmup:] > 0)
    # CartPole pays 1 per step: the returns of finished episodes add up to at most the steps taken
    assert 0 < float(np.sum(metrics["episode_return_sum"])) <= config.total_steps
    # make_train_and_evaluate is this run, then its evaluation episodes, in one program
    played = jax.jit(dqn_scan.make_evaluate_run(config))(dqn_scan.params(carry), jax.random.key(0))
    np.testing.assert_array_equal(np.asarray(jax.jit(dqn_scan.make_train_and_evaluate(config))(jax.random.key(0))),
                                  np.asarray(played))
    assert float(np.asarray(played).mean()) == dqn_scan.evaluate(config, dqn_scan.params(carry), seed=0)["eval_return_mean"]


def test_the_jitted_dqn_learns_cartpole():
    """A short run (about 15 s here) must beat a random policy (about 22 per episode) clearly."""
    config = dqn.DQNConfig(total_steps=40_000, learning_starts=2_000, exploration_fraction=0.3, eval_epsilon=0.0)
    carry, metrics = jax.jit(dqn_scan.make_train(config))(jax.random.key(0))
    evaluation = dqn_scan.evaluate(config, dqn_scan.params(carry), seed=0)
    assert evaluation["eval_return_mean"] > 3 * 22.0, evaluation
    _, curve = dqn_scan.episode_return_curve(metrics, window=100)
    assert np.nanmax(curve[-300:]) > 3 * np.nanmean(curve[:300])


def test_the_driver_in_chunks_gives_one_calls_run_bit_for_bit_and_resumes_exactly(tmp_path):
    """labcore.loop.train cuts the run into chunks that do not stop at the replay warm-up's end (its
    iterations choose to learn inside the compiled program): the parameters, metrics and evaluation
    are those of one call, bit for bit, and a run stopped after a checkpoint and resumed ends the
    same. make_train compiles the warm-up and the learning as two loops instead of one with a
    branch; XLA then rounds a few operations differently (1.9e-8 at most here), nothing more."""
    config = small_config()
    one_call = dqn_scan.train(config, log_every=1, progress=False)
    whole = dqn_scan.train(config, tmp_path / "whole", log_every=1, checkpoint_every=70, progress=False)
    assert_same_tree(one_call.state, whole.state)
    assert whole.metrics == one_call.metrics and [row["update"] for row in whole.metrics] == list(range(1, 301))
    assert whole.summary["eval_return_mean"] == one_call.summary["eval_return_mean"]
    rows = []
    reference, metrics = jax.jit(dqn_scan.make_train(config, callback=rows.append, log_every=100))(jax.random.key(config.seed))
    for a, b in zip(jax.tree_util.tree_leaves(reference.train_state), jax.tree_util.tree_leaves(whole.state.train_state)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal([row["episodes"] for row in whole.metrics], np.asarray(metrics["episodes"]))
    np.testing.assert_array_equal([row["timesteps"] for row in whole.metrics], np.asarray(metrics["step"]))
    # make_train's callback: every 100th iteration's metrics, on the host, as they were computed
    assert [int(row["update"]) for row in rows] == [100, 200, 300]
    assert [int(row["step"]) for row in rows] == [int(metrics["step"][i]) for i in (99, 199, 299)]
    assert whole.summary["eval_return_mean"] == dqn_scan.evaluate(config, dqn_scan.params(whole.state), config.seed)["eval_return_mean"]
    # stopped after 140 updates (a shorter run of the same config cannot be made: total_steps is in
    # the config), by training the first two chunks and keeping their checkpoint
    import shutil

    shutil.copytree(tmp_path / "whole", tmp_path / "stopped")
    from labcore import checkpoint, runs

    program = dqn_scan.make_program(config)
    partial = jax.jit(program.run, static_argnums=1)(program.init(jax.random.key(0)), 140)[0]
    shutil.rmtree(tmp_path / "stopped" / "checkpoints")
    checkpoint.save(tmp_path / "stopped" / "checkpoints", 140, partial, {"config": runs.config_dict(config)})
    resumed = dqn_scan.train(config, tmp_path / "stopped", log_every=1, checkpoint_every=70, resume=True, progress=False)
    assert [row["update"] for row in resumed.metrics] == list(range(141, 301))
    assert_same_tree(whole.state, resumed.state)
    loaded_config, carry = dqn_scan.load_checkpoint(tmp_path / "stopped")
    assert loaded_config == config and int(carry.step) == config.total_steps


def test_episode_return_curve_averages_finished_episodes_over_a_window():
    metrics = {
        "step": np.arange(1, 6) * 10,
        "episodes": np.array([0, 1, 0, 2, 1]),
        "episode_return_sum": np.array([0.0, 10.0, 0.0, 50.0, 5.0]),
    }
    steps, curve = dqn_scan.episode_return_curve(metrics, window=2)
    np.testing.assert_array_equal(steps, [10, 20, 30, 40, 50])
    np.testing.assert_allclose(curve, [np.nan, 10.0, 10.0, 25.0, 55.0 / 3])
    _, batched = dqn_scan.episode_return_curve({k: np.stack([v, v]) for k, v in metrics.items()}, window=2)
    np.testing.assert_allclose(batched[1], curve)


@pytest.mark.parametrize(
    "overrides,message",
    [
        (dict(num_envs=3), "DQNConfig.num_envs must divide train_frequency"),
        (dict(total_steps=1_000, learning_starts=1_000), "DQNConfig.total_steps must exceed learning_starts"),
        (dict(env_id="CartPol-v1"), "DQNConfig.env_id: unknown gymnax environment id 'CartPol-v1'; similar ids: CartPole-v1"),
        (dict(env_id="Pendulum-v1"), "DQNConfig.env_id: .*DQN needs a Discrete one"),
    ],
)
def test_bad_setups_fail_before_tracing(overrides, message):
    with pytest.raises(ValueError, match=message):
        dqn_scan.make_train(small_config(**overrides))


def test_make_evaluate_takes_an_epsilon_of_its_own():
    """make_evaluate(..., epsilon=e) plays at e instead of config.eval_epsilon: at the config's
    own value it is the default evaluation, and uniformly random play (1.0) is another."""
    config = dqn.DQNConfig(eval_episodes=8, eval_epsilon=0.0, hidden_sizes=(16,))
    env, env_params = envs.make_jax_env(config.env_id)
    params = dqn_scan.make_parts(config).init(jax.random.key(0), jax.random.key(1), jax.random.key(2)).train_state.params
    key = jax.random.key(3)
    default = np.asarray(dqn_scan.make_evaluate(config, env, env_params)(params, key))
    same = np.asarray(dqn_scan.make_evaluate(config, env, env_params, epsilon=0.0)(params, key))
    random_play = np.asarray(dqn_scan.make_evaluate(config, env, env_params, epsilon=1.0)(params, key))
    assert default.shape == random_play.shape == (8,)
    np.testing.assert_array_equal(default, same)
    assert not np.array_equal(default, random_play)
