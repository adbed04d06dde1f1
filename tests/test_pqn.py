"""PQN: Q(lambda) targets against a float64 reference, the network, learning, vmap over seeds, resume, CLI."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from conftest import assert_same_tree, rollout_step_body

from labcore import devices, losses
from labcore.course import published
from labcore.__main__ import main as cli
from labcore.agents.pqn import core as pqn
from labcore.logging import read_metrics
from labcore.nets.q_networks import make_q_network
from labcore.tools.introspection import count_primitives


def reference_q_lambda(rewards, terminated, truncated, next_max_q, gamma, lam):
    """float64, by the definition rather than the recursion: the lambda-return is the (1 - lambda)
    lambda^(n-1) weighted mix of the n-step returns G^(n)_t = r_t + ... + gamma^(n-1) r_{t+n-1} +
    gamma^n max Q(s'_{t+n-1}), each n-step return stopping where its episode or the rollout ends
    (the longest one takes the remaining weight). A terminal end adds no bootstrap; a time-limit
    end bootstraps from the episode's last observation (next_max_q at that step)."""
    rewards, next_max_q = np.asarray(rewards, np.float64), np.asarray(next_max_q, np.float64)
    ended = np.asarray(terminated) | np.asarray(truncated)
    steps, envs = rewards.shape
    targets = np.zeros((steps, envs))
    for e in range(envs):
        for t in range(steps):
            n_step_returns, total, discount = [], 0.0, 1.0
            for k in range(t, steps):
                total += discount * rewards[k, e]
                discount *= gamma
                bootstrap = 0.0 if terminated[k, e] else discount * next_max_q[k, e]
                n_step_returns.append(total + bootstrap)
                if ended[k, e]:
                    break
            weights = [(1 - lam) * lam**i for i in range(len(n_step_returns) - 1)]
            weights.append(lam ** (len(n_step_returns) - 1))
            targets[t, e] = float(np.dot(weights, n_step_returns))
    return targets


@pytest.mark.parametrize("lam", [0.0, 0.65, 0.95, 1.0])
def test_q_lambda_targets_match_a_float64_reference(lam):
    rng = np.random.default_rng(int(lam * 100))
    steps, envs, gamma = 24, 6, 0.97
    rewards = rng.normal(size=(steps, envs)).astype(np.float32)
    terminated = rng.random((steps, envs)) < 0.08
    truncated = (rng.random((steps, envs)) < 0.08) & ~terminated
    terminated[-1, 0], truncated[-1, 1] = True, True  # a rollout that ends on an episode end, both kinds
    next_max_q = rng.normal(size=(steps, envs)).astype(np.float32) * 3
    targets = losses.q_lambda_targets(*map(jnp.asarray, (rewards, terminated, truncated, next_max_q)), gamma, lam)
    expected = reference_q_lambda(rewards, terminated, truncated, next_max_q, gamma, lam)
    np.testing.assert_allclose(np.asarray(targets), expected, rtol=2e-5, atol=2e-5)


def test_q_lambda_targets_special_cases():
    rewards = jnp.array([[1.0], [2.0], [3.0]])
    no = jnp.zeros((3, 1), bool)
    next_max_q = jnp.array([[10.0], [20.0], [30.0]])
    # lambda 0: the one-step Q-learning target r + gamma max Q(s')
    one_step = losses.q_lambda_targets(rewards, no, no, next_max_q, 0.5, 0.0)
    np.testing.assert_allclose(np.asarray(one_step)[:, 0], [1 + 5, 2 + 10, 3 + 15])
    # lambda 1: rewards summed to the rollout's end, bootstrapped there only
    monte_carlo = losses.q_lambda_targets(rewards, no, no, next_max_q, 0.5, 1.0)
    np.testing.assert_allclose(np.asarray(monte_carlo)[:, 0], [1 + 1 + 0.75 + 3.75, 2 + 1.5 + 7.5, 3 + 15])
    # a terminal step neither bootstraps nor looks past itself; a truncated one bootstraps from its own next max Q
    ends = jnp.array([[False], [True], [False]])
    terminal = losses.q_lambda_targets(rewards, ends, no, next_max_q, 0.5, 1.0)
    np.testing.assert_allclose(np.asarray(terminal)[:2, 0], [1 + 0.5 * 2, 2])
    truncated = losses.q_lambda_targets(rewards, no, ends, next_max_q, 0.5, 1.0)
    np.testing.assert_allclose(np.asarray(truncated)[:2, 0], [1 + 0.5 * (2 + 10), 2 + 10])
    with pytest.raises(ValueError, match=r"one shape \[T, ...\]"):
        losses.q_lambda_targets(rewards, no, no, next_max_q[:2], 0.5, 0.5)


def test_minatar_network_shapes_and_layer_norm():
    obs = jnp.zeros((5, 10, 10, 4))
    plain = make_q_network("minatar_cnn", 3, (128,))
    normed = make_q_network("minatar_cnn", 3, (128,), layer_norm=True)
    plain_params = plain.init(jax.random.key(0), obs)
    normed_params = normed.init(jax.random.key(0), obs)
    assert plain.apply(plain_params, None, obs).shape == (5, 3)
    assert plain_params["minatar_cnn/conv2_d"]["w"].shape == (3, 3, 4, 16)  # VALID: 8 x 8 x 16 after it
    assert plain_params["minatar_cnn/linear"]["w"].shape == (8 * 8 * 16, 128)
    assert [name for name in normed_params if "layer_norm" in name] == ["minatar_cnn/layer_norm", "minatar_cnn/layer_norm_1"]
    # LayerNorm makes the hidden features scale-free: doubling the input changes nothing
    x = jax.random.uniform(jax.random.key(1), (5, 10, 10, 4))
    np.testing.assert_allclose(
        np.asarray(normed.apply(normed_params, None, 2 * x)), np.asarray(normed.apply(normed_params, None, x)), rtol=1e-3, atol=1e-4
    )


@pytest.mark.parametrize(
    "field,value",
    [("num_minibatches", 3), ("learning_rate", -1.0), ("q_lambda", 1.5), ("gamma", -0.1), ("total_steps", 10),
     ("network", "nature_cnn"), ("hidden_sizes", [64]), ("num_envs", 0), ("optimizer", "sgd"),
     ("exploration_fraction", 0.0), ("max_grad_norm", 0.0), ("env_id", "")],
)  # fmt: skip
def test_bad_config_names_the_field(field, value):
    with pytest.raises(ValueError, match=f"PQNConfig.{field} must be"):
        pqn.PQNConfig(**{"num_envs": 4, "num_steps": 8, "total_steps": 1024, field: value})


def test_unknown_env_and_wrong_network_fail_before_compiling():
    with pytest.raises(ValueError, match="PQNConfig.env_id: unknown gymnax environment id 'Breakout-Minatar'.*Breakout-MinAtar"):
        pqn.make_pqn(pqn.PQNConfig.minatar("Breakout-Minatar"))
    with pytest.raises(ValueError, match="PQNConfig.network 'minatar_cnn' needs"):
        pqn.make_pqn(pqn.PQNConfig(network="minatar_cnn"))


def small_cartpole(**overrides):
    return pqn.PQNConfig(**{"num_envs": 8, "num_steps": 16, "total_steps": 8 * 16 * 6, "num_minibatches": 4,
                            "hidden_sizes": (32, 32), **overrides})


@pytest.mark.parametrize("network,primitive", [("mlp", "dot_general"), ("minatar_cnn", "conv_general_dilated")])
@pytest.mark.parametrize("bootstrap", [True, False], ids=["bootstrap", "no bootstrap"])
def test_the_rollout_applies_the_q_network_once_per_step(network, primitive, bootstrap):
    if network == "mlp":
        config = small_cartpole(bootstrap_truncation=bootstrap)
    else:
        config = pqn.PQNConfig.minatar("Breakout-MinAtar", num_envs=8, num_steps=16, total_steps=8 * 16 * 2,
                                       num_minibatches=4, bootstrap_truncation=bootstrap)
    agent = pqn.make_pqn(config)
    runner = agent.init(jax.random.key(0))
    one_pass = jax.make_jaxpr(lambda obs: agent.network.apply(runner.params, None, obs))(runner.obs)
    body = rollout_step_body(agent.train, config.num_steps, primitive)
    assert count_primitives(one_pass, primitive) >= 1
    assert count_primitives(body, primitive) == count_primitives(one_pass, primitive)
    assert count_primitives(body, "dot_general") == count_primitives(one_pass, "dot_general")
    # no branch or inner loop per step: on a GPU each reads its predicate back to the host
    assert count_primitives(body, "cond") == 0 and count_primitives(body, "while") == 0


@pytest.mark.parametrize("gpu", [False, True], ids=["cpu form", "gpu form"])
def test_callback_metrics_and_vmap_over_seeds_equals_seeds_one_at_a_time(monkeypatch, gpu):
    monkeypatch.setattr(devices, "launch_bound", lambda: gpu)  # the GPU's form logs without a branch per update
    seen = []
    agent = pqn.make_pqn(small_cartpole(), callback=seen.append, log_every=2)
    keys = jax.random.split(jax.random.key(4), 2)
    together, metrics = jax.jit(jax.vmap(agent.train))(keys)
    jax.effects_barrier()
    assert set(metrics) == set(pqn.METRIC_NAMES)
    # every second update, once per seed; the rows travel in bursts (here one per seed, each in order)
    assert [int(m["timesteps"]) for m in seen] == [2 * 128, 4 * 128, 6 * 128] * 2
    assert [int(m["update"]) for m in seen] == [2, 4, 6] * 2
    epsilon = np.asarray(metrics["epsilon"])[0]  # per update, from 1 to 0.05 over the first 20% of the steps
    np.testing.assert_allclose(epsilon, np.maximum(0.05, 1.0 - 0.95 * np.arange(6) * 128 / (0.2 * 768)), rtol=1e-6)
    for i, key in enumerate(keys):
        alone, _ = jax.jit(pqn.make_pqn(small_cartpole()).train)(key)
        for a, b in zip(jax.tree_util.tree_leaves(alone.params), jax.tree_util.tree_leaves(together.params)):
            np.testing.assert_allclose(np.asarray(a), np.asarray(b)[i], rtol=1e-4, atol=1e-6)
    assert not np.allclose(*[np.asarray(leaf) for leaf in jax.tree_util.tree_leaves(together.params)[0]])  # two seeds differ


@pytest.mark.end_to_end
def test_pqn_learns_cartpole():
    """PQN's default CartPole settings: 500k steps (about 10 s here), from random play (~22) to
    a greedy policy that balances for most of the 500-step limit; the training return (epsilon
    0.05 at the end) climbs past 300."""
    agent = pqn.make_pqn(pqn.PQNConfig.cartpole())
    runner, metrics = jax.jit(agent.train)(jax.random.key(0))
    returns = np.asarray(metrics["episode_return"])
    assert np.nanmean(returns[:10]) < 40 and np.nanmean(returns[-20:]) > 300, returns[::20]
    greedy = np.asarray(jax.jit(agent.evaluate)(runner.params, jax.random.key(1)))
    assert greedy.mean() > 400, greedy


def test_targets_of_a_real_rollout_bootstrap_a_time_limit_and_not_a_terminal_state():
    """CartPole capped at 15 steps, rollouts of 40 steps, lambda 0 (one-step targets, to check each
    step against the network by hand): a step that continues bootstraps from the next step's
    observation, a time-limit end from the episode's last observation (or, with
    bootstrap_truncation=False, not at all), a pole that fell not at all."""
    env, params = pqn.envs.make_jax_env("CartPole-v1")
    params = params.replace(max_steps_in_episode=15)
    for bootstrap in (True, False):
        config = small_cartpole(num_envs=16, num_steps=40, total_steps=16 * 40, q_lambda=0.0, gamma=0.9,
                                bootstrap_truncation=bootstrap)
        agent = pqn.make_pqn(config, env, params)
        runner = agent.init(jax.random.key(3))
        after, rollout = jax.jit(agent.collect)(runner, jnp.float32(1.0))  # random actions: some poles fall early
        targets = np.asarray(jax.jit(agent.targets)(runner.params, rollout, after.obs))
        max_q = lambda obs: np.asarray(agent.network.apply(runner.params, None, obs)).max(-1)  # noqa: E731
        next_obs = np.concatenate([np.asarray(rollout.obs)[1:], np.asarray(after.obs)[None]])
        terminated, truncated = np.asarray(rollout.terminated), np.asarray(rollout.truncated)
        assert terminated.any() and (truncated & ~terminated).any()  # a step can be both: terminal wins
        reward = np.asarray(rollout.reward)
        expected = reward + 0.9 * max_q(next_obs.reshape(-1, 4)).reshape(40, 16)
        if bootstrap:
            final = max_q(np.asarray(rollout.final_obs).reshape(-1, 4)).reshape(40, 16)
            expected = np.where(truncated, reward + 0.9 * final, expected)
            assert not np.allclose(final[truncated], max_q(next_obs[truncated]))  # the reset obs would be wrong
        else:
            expected = np.where(truncated, reward, expected)
        expected = np.where(terminated, reward, expected)
        np.testing.assert_allclose(targets, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.end_to_end
def test_run_driver_resumes_an_interrupted_run_exactly(tmp_path):
    from labcore.agents.pqn import run as pqn_run

    config = small_cartpole(eval_episodes=4)  # 6 updates
    straight = pqn_run.train(config, tmp_path / "straight", log_every=1, progress=False)
    assert [row["update"] for row in straight.metrics] == [1, 2, 3, 4, 5, 6]
    assert straight.summary["timesteps"] == 6 * 128 and "eval_return_mean" in straight.summary
    interrupted = tmp_path / "interrupted"
    pqn_run.train(config, interrupted, log_every=1, checkpoint_every=4, progress=False, evaluate=False)
    import shutil

    shutil.rmtree(interrupted / "checkpoints" / "6")  # as if killed after the checkpoint at update 4
    resumed = pqn_run.train(config, interrupted, log_every=1, checkpoint_every=4, resume=True, progress=False)
    assert_same_tree(straight.state, resumed.state)
    assert [row["update"] for row in resumed.metrics] == [5, 6]
    assert read_metrics(interrupted) == read_metrics(tmp_path / "straight")
    config_back, runner_back = pqn_run.load_checkpoint(interrupted)
    assert config_back == config
    assert_same_tree(runner_back, straight.state)
    with pytest.raises(ValueError, match="different config"):
        pqn_run.train(small_cartpole(seed=1), interrupted, resume=True, progress=False)


@pytest.mark.end_to_end
def test_train_pqn_cli_writes_a_results_folder_then_evaluates(tmp_path, capsys):
    run = tmp_path / "run"
    flags = ["--total-steps", "81920", "--log-every", "5", "--checkpoint-every", "20", "--eval-episodes", "8"]
    assert cli(["train", "pqn", *flags, "--run-dir", str(run), "--no-progress", "--auto-tune"]) == 0
    summary = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert summary["timesteps"] == 81920 and summary["eval_return_mean"] > summary["random_return_mean"]
    for name in ("config.json", "metrics.jsonl", "metrics.csv", "metrics.png", "summary.json"):
        assert (run / name).is_file(), name
    assert sorted(int(p.name) for p in (run / "checkpoints").iterdir()) == [20, 40]
    assert cli(["eval", "pqn", "--checkpoint", str(run), "--episodes", "4", "--epsilon", "1.0"]) == 0
    report = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert report["step"] == 40 and report["eval_episodes"] == 4 and report["eval_epsilon"] == 1.0
    assert cli(["train", "pqn", "--q-lambda", "2", "--run-dir", str(tmp_path / "bad"), "--no-progress"]) == 2
    assert "PQNConfig.q_lambda must be" in capsys.readouterr().err and not (tmp_path / "bad").exists()
    assert cli(["train", "pqn", "--preset", "minatar", "--env", "Pong-MinAtar", "--no-progress"]) == 2
    assert "unknown gymnax environment id 'Pong-MinAtar'" in capsys.readouterr().err


def test_published_curves_interpolate_and_never_extrapolate():
    breakout = published.MINATAR_DQN["Breakout-MinAtar"]
    assert published.at(breakout, 1_000_000) == 9.2
    assert published.at(breakout, 750_000) == pytest.approx((8.3 + 9.2) / 2)
    assert published.at(breakout, 250_000) == 6.7
    assert published.at(breakout, 100_000) is None and published.at(breakout, 6_000_000) is None
    assert all(frames % 1_000_000 == 0 for frames, _, _ in published.DOPAMINE_BREAKOUT_DQN)


@pytest.mark.end_to_end
def test_curves_of_the_jitted_dqn_and_pqn_side_by_side():
    """On CartPole (the MinAtar presets run in notebook 12 under nbval; their fields are checked here)."""
    from labcore.course import curves
    from labcore.agents.dqn.core import DQNConfig

    minatar = DQNConfig.minatar(total_steps=900, learning_starts=500)
    assert (minatar.network, minatar.hidden_sizes, minatar.train_frequency, minatar.batch_size) == ("minatar_cnn", (128,), 1, 32)
    assert minatar.exploration_fraction == 1.0 and DQNConfig.minatar().exploration_fraction == 0.02  # 100k steps
    pqn_run = curves.pqn_curve(small_cartpole(total_steps=8 * 128, eval_episodes=2), seeds=2, chunks=4)
    dqn_run = curves.dqn_scan_curve(DQNConfig(total_steps=900, learning_starts=500, eval_episodes=2), seeds=2, chunks=4)
    assert pqn_run.env_steps == [256, 512, 768, 1024]  # 8 updates of 8 x 16 env steps, 4 chunks
    assert dqn_run.env_steps == [600, 700, 800, 900]  # the 500-step replay warm-up, then 4 chunks of 100
    for run in (pqn_run, dqn_run):
        assert run.seeds == 2 and np.array(run.returns).shape == (4, 2)
        assert np.all(np.diff(run.wall_s) > 0) and run.wall_s[0] > 0 and run.compile_s > 0
        assert np.isfinite(run.greedy_return) and all(np.isfinite(run.mean_return))
    assert pqn_run.time_to(-1.0) == (pqn_run.env_steps[0], pqn_run.wall_s[0]) and pqn_run.time_to(1e9) == (None, None)
    assert set(pqn_run.as_dict()) >= {"env_steps", "wall_s", "returns", "mean_return", "greedy_return"}
    stopped = curves.pqn_curve(small_cartpole(total_steps=8 * 128, eval_episodes=2), seeds=1, chunks=2, stop_at=-1.0)
    assert stopped.env_steps == [512]  # stops at the first chunk that reaches the score


def small_atari(**overrides):
    """PQN's Atari preset at a size a test can afford: 4 envs x 8 steps, 6 updates, games of at most 200 steps."""
    return pqn.PQNConfig.atari(**{"num_envs": 4, "num_steps": 8, "total_steps": 4 * 8 * 6, "num_minibatches": 2,
                                  "update_epochs": 1, "eval_episodes": 2, "max_episode_steps": 200, **overrides})


@pytest.mark.parametrize(
    "overrides,field",
    [({"network": "mlp"}, "network"), ({"hidden_sizes": (256,)}, "hidden_sizes"), ({"env_stepping": "gpu"}, "env_stepping"),
     ({"repeat_action_probability": 1.0}, "repeat_action_probability"), ({"max_episode_steps": 0}, "max_episode_steps")],
)  # fmt: skip
def test_bad_atari_config_names_the_field(overrides, field):
    with pytest.raises(ValueError, match=f"PQNConfig.{field} must be"):
        small_atari(**overrides)


@pytest.mark.parametrize("field,value", [("life_loss_terminal", True), ("repeat_action_probability", 0.0),
                                         ("env_stepping", "xla"), ("max_episode_steps", 100)])
def test_atari_settings_are_refused_for_other_envs(field, value):
    with pytest.raises(ValueError, match=f"PQNConfig.{field} must be left at .*not an ALE id"):
        pqn.PQNConfig(**{field: value})


def test_atari_presets_are_purejaxql_and_dopamine_protocols():
    purejaxql, dopamine = pqn.PQNConfig.atari(), pqn.PQNConfig.atari_dopamine()
    assert (purejaxql.num_envs, purejaxql.num_steps, purejaxql.update_epochs, purejaxql.num_minibatches) == (128, 32, 2, 32)
    assert (purejaxql.q_lambda, purejaxql.learning_rate, purejaxql.optimizer, purejaxql.epsilon_end) == (0.65, 2.5e-4, "radam", 0.001)
    assert purejaxql.total_steps * 4 == 10_000_000 and purejaxql.layer_norm and purejaxql.clip_rewards
    assert (purejaxql.life_loss_terminal, purejaxql.repeat_action_probability) == (True, 0.0)
    assert (dopamine.life_loss_terminal, dopamine.repeat_action_probability) == (False, 0.25)
    assert dataclasses_replace_all_but(dopamine, purejaxql, {"life_loss_terminal", "repeat_action_probability"})


def dataclasses_replace_all_but(a, b, fields):
    import dataclasses

    return all(getattr(a, f.name) == getattr(b, f.name) for f in dataclasses.fields(a) if f.name not in fields)


def without_handle(runner):
    """A runner state without the handle of its ALE vector env (each process and run has its own)."""
    return runner.replace(env_state=runner.env_state.replace(handle=None))


@pytest.mark.end_to_end
def test_pqn_on_atari_resumes_exactly_with_evaluations_on_the_way(tmp_path):
    """loop.train over ALE's vector env: an interrupted run resumed from its checkpoint (the games
    replayed into new emulators) ends where the uninterrupted one does, bit for bit, with the same
    rows, evaluations every 3 updates included; the summary names the stepping that ran."""
    from labcore.agents.pqn import run as pqn_run

    config = small_atari()
    straight = pqn_run.train(config, tmp_path / "straight", log_every=1, eval_every=3, progress=False)
    rows = read_metrics(tmp_path / "straight")
    evaluations = [row for row in rows if "eval_return_mean" in row]
    assert [row["update"] for row in evaluations] == [3, 6] and evaluations[0]["timesteps"] == 3 * 32
    assert straight.summary["env_stepping"] in ("xla", "callback") and straight.summary["eval_episodes"] == 2
    assert np.isfinite([row["loss"] for row in rows if "loss" in row]).all()

    interrupted = tmp_path / "interrupted"
    pqn_run.train(config, interrupted, log_every=1, checkpoint_every=3, eval_every=3, progress=False)
    import shutil

    shutil.rmtree(interrupted / "checkpoints" / "6")  # as if killed after the checkpoint at update 3
    resumed = pqn_run.train(config, interrupted, log_every=1, checkpoint_every=3, eval_every=3, resume=True, progress=False)
    assert_same_tree(without_handle(straight.state), without_handle(resumed.state))
    assert read_metrics(interrupted) == rows
    with pytest.raises(ValueError, match="seeds: PQN on Atari runs one seed per process"):
        pqn_run.train(config, None, seeds=2, progress=False)


@pytest.mark.end_to_end
def test_train_pqn_atari_on_the_command_line(tmp_path, capsys):
    run = tmp_path / "run"
    flags = ["--preset", "atari", "--env", "ALE/Breakout-v5", "--num-envs", "4", "--num-steps", "8", "--total-steps", "96",
             "--num-minibatches", "2", "--update-epochs", "1", "--eval-episodes", "2", "--max-episode-steps", "200"]
    assert cli(["train", "pqn", *flags, "--run-dir", str(run), "--no-progress"]) == 0
    summary = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert summary["timesteps"] == 96 and summary["env"] == "ALE/Breakout-v5" and "eval_return_mean" in summary
    assert cli(["eval", "pqn", "--checkpoint", str(run), "--episodes", "2"]) == 0
    assert json.loads(capsys.readouterr().out.splitlines()[-1])["eval_episodes"] == 2
    assert cli(["train", "pqn", "--preset", "atari", "--env", "ALE/Brekout-v5", "--no-progress"]) == 2
    assert "unknown Atari id 'ALE/Brekout-v5'" in capsys.readouterr().err


def test_loop_stops_after_a_time_at_a_checkpoint_and_goes_on(tmp_path):
    """stop_after_s: the run stops at the first checkpoint past the time, writes no summary, and a
    resume finishes it exactly as one run would (a long run cut into calls of limited time)."""
    from labcore.agents.pqn import run as pqn_run

    config = small_cartpole(eval_episodes=2)  # 6 updates
    straight = pqn_run.train(config, tmp_path / "straight", log_every=1, progress=False)
    sliced = tmp_path / "sliced"
    first = pqn_run.train(config, sliced, log_every=1, checkpoint_every=2, stop_after_s=0.0, progress=False)
    assert first.summary["stopped_at_update"] == 2 and not (sliced / "summary.json").exists()
    assert first.summary["updates"] == 2 and first.summary["run_s"] > 0  # this call's times, for a run in slices
    second = pqn_run.train(config, sliced, log_every=1, checkpoint_every=2, stop_after_s=0.0, resume=True, progress=False)
    assert second.summary["stopped_at_update"] == 4
    last = pqn_run.train(config, sliced, log_every=1, checkpoint_every=2, stop_after_s=0.0, resume=True, progress=False)
    assert last.summary["timesteps"] == 6 * 128 and (sliced / "summary.json").exists()
    assert_same_tree(straight.state, last.state)
    assert read_metrics(sliced) == read_metrics(tmp_path / "straight")
    with pytest.raises(ValueError, match="stop_after_s: .*checkpoint_every"):
        pqn_run.train(config, tmp_path / "x", stop_after_s=1.0, progress=False)
