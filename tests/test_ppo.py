"""Masked PPO: the masked policy maths, GAE and losses against references, learning, resume."""

import json
import tempfile
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import rlax

from conftest import assert_same_tree, rollout_step_body

from labcore import checkpoint, devices, envs, logged_scan, loop, losses, truncation
from labcore.logging import read_metrics
from labcore.agents.ppo import core as ppo
from labcore.tools.introspection import count_primitives


def numpy_masked_policy(logits, mask):
    """float64 reference: log-probs over legal actions (-inf elsewhere) and their entropy."""
    logits = np.where(mask, logits.astype(np.float64), -np.inf)
    shifted = logits - logits.max(-1, keepdims=True)
    log_probs = shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))
    probs = np.exp(log_probs)
    entropy = -np.sum(np.where(mask, probs * np.where(mask, log_probs, 0.0), 0.0), -1)
    return log_probs, entropy


def test_masked_sampling_never_picks_an_illegal_action_and_matches_float64():
    rng = np.random.default_rng(0)
    n, actions = 5_000, 13
    logits = rng.normal(scale=rng.uniform(0.1, 20.0, (n, 1)), size=(n, actions)).astype(np.float32)
    mask = rng.random((n, actions)) < rng.uniform(0.05, 0.9, (n, 1))
    mask[np.arange(n), rng.integers(0, actions, n)] = True  # at least one legal action
    masked = losses.masked_logits(jnp.asarray(logits), jnp.asarray(mask))
    for seed in range(3):
        samples = np.asarray(jax.random.categorical(jax.random.key(seed), masked))
        assert mask[np.arange(n), samples].all()
    ref_log_probs, ref_entropy = numpy_masked_policy(logits, mask)
    log_probs = np.asarray(losses.masked_log_probs(jnp.asarray(logits), jnp.asarray(mask)))
    np.testing.assert_allclose(log_probs[mask], ref_log_probs[mask], rtol=1e-5, atol=1e-5)
    assert np.all(log_probs[~mask] < -1e8)
    entropy = np.asarray(losses.masked_entropy(jnp.asarray(logits), jnp.asarray(mask)))
    np.testing.assert_allclose(entropy, ref_entropy, rtol=1e-5, atol=1e-6)
    # the ceiling is log(number of legal actions), reached by equal logits
    uniform = np.asarray(losses.masked_entropy(jnp.zeros((n, actions)), jnp.asarray(mask)))
    np.testing.assert_allclose(uniform, np.log(mask.sum(-1)), rtol=1e-5)
    # the distrax policy PPO acts and learns with agrees with both
    policy = ppo.masked_policy(jnp.asarray(logits), jnp.asarray(mask))
    for seed in range(3):
        samples = np.asarray(policy.sample(seed=jax.random.key(100 + seed)))
        assert mask[np.arange(n), samples].all()
        np.testing.assert_allclose(
            np.asarray(policy.log_prob(samples)), ref_log_probs[np.arange(n), samples], rtol=1e-5, atol=1e-5
        )
    np.testing.assert_allclose(np.asarray(policy.entropy()), ref_entropy, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("gpu", [False, True])
def test_rollout_sampling_draws_what_the_masked_policy_draws(monkeypatch, gpu):
    """ppo.sample_action (the rollout's sampler) gives masked_policy's sample and log_prob, bit for bit,
    in the form it takes on a GPU (one fused log-softmax) and elsewhere."""
    monkeypatch.setattr(devices, "launch_bound", lambda: gpu)
    rng = np.random.default_rng(2)
    n, actions = 2_000, 13
    logits = jnp.asarray(rng.normal(scale=rng.uniform(0.1, 20.0, (n, 1)), size=(n, actions)).astype(np.float32))
    mask = rng.random((n, actions)) < rng.uniform(0.05, 0.9, (n, 1))
    mask[np.arange(n), rng.integers(0, actions, n)] = True

    def with_distrax(key, logits, mask):
        policy = ppo.masked_policy(logits, mask)
        action = policy.sample(seed=key)
        return action, policy.log_prob(action)

    for seed, row_mask in [(0, jnp.asarray(mask)), (1, jnp.asarray(mask)), (2, None)]:
        key = jax.random.key(seed)
        action, log_prob = jax.jit(ppo.sample_action)(key, logits, row_mask)  # both compiled, as in training
        expected_action, expected_log_prob = jax.jit(with_distrax)(key, logits, row_mask)
        np.testing.assert_array_equal(np.asarray(action), np.asarray(expected_action))
        np.testing.assert_array_equal(np.asarray(log_prob), np.asarray(expected_log_prob))
        if row_mask is not None:
            assert mask[np.arange(n), np.asarray(action)].all()


def test_gae_matches_rlax_and_a_float64_loop():
    rng = np.random.default_rng(1)
    steps, envs, gamma, lam = 64, 5, 0.99, 0.95
    rewards = rng.normal(size=(steps, envs)).astype(np.float32)
    values = rng.normal(size=(steps, envs)).astype(np.float32)
    dones = rng.random((steps, envs)) < 0.1
    last_value = rng.normal(size=(envs,)).astype(np.float32)
    advantages, returns = losses.gae_advantages(
        jnp.asarray(rewards), jnp.asarray(values), jnp.asarray(dones), jnp.asarray(last_value), gamma, lam
    )
    expected = np.zeros((steps, envs))
    next_advantage, next_value = np.zeros(envs), last_value.astype(np.float64)
    for t in reversed(range(steps)):
        not_done = 1.0 - dones[t]
        delta = rewards[t] + gamma * next_value * not_done - values[t]
        next_advantage = delta + gamma * lam * not_done * next_advantage
        expected[t], next_value = next_advantage, values[t]
    np.testing.assert_allclose(advantages, expected, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(returns, expected + values, rtol=1e-6, atol=1e-6)
    for e in range(envs):  # rlax: discounts carry the episode ends, values include the bootstrap
        rl = rlax.truncated_generalized_advantage_estimation(
            rewards[:, e], gamma * (1.0 - dones[:, e]), lam, np.append(values[:, e], last_value[e])
        )
        np.testing.assert_allclose(advantages[:, e], rl, rtol=1e-6, atol=1e-6)


def test_ppo_losses_match_float64():
    rng = np.random.default_rng(2)
    n, eps = 257, 0.2
    log_ratio = rng.normal(scale=0.3, size=n).astype(np.float32)
    advantages = rng.normal(size=n).astype(np.float32)
    ratio = np.exp(log_ratio.astype(np.float64))
    expected = -np.mean(np.minimum(ratio * advantages, np.clip(ratio, 1 - eps, 1 + eps) * advantages))
    got = losses.ppo_clipped_objective(jnp.asarray(log_ratio), jnp.asarray(advantages), eps)
    np.testing.assert_allclose(float(got), expected, rtol=1e-6, atol=1e-6)
    values, old, returns = (rng.normal(size=n).astype(np.float32) for _ in range(3))
    clipped = old + np.clip(values - old, -eps, eps)
    expected = 0.5 * np.mean(np.maximum((values - returns) ** 2, (clipped - returns) ** 2))
    got = losses.ppo_value_loss(jnp.asarray(values), jnp.asarray(old), jnp.asarray(returns), eps)
    np.testing.assert_allclose(float(got), expected, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize(
    "field,value",
    [("num_minibatches", 3), ("learning_rate", -1.0), ("gamma", 1.5), ("clip_eps", 0.0), ("total_steps", 10),
     ("activation", "gelu"), ("num_envs", 0), ("max_grad_norm", 0.0), ("env_id", "")],
)  # fmt: skip
def test_bad_config_names_the_field(field, value):
    with pytest.raises(ValueError, match=f"PPOConfig.{field} must be"):
        ppo.PPOConfig(**{"num_envs": 4, "num_steps": 8, "total_steps": 1024, field: value})


def test_unknown_env_fails_before_compiling():
    with pytest.raises(ValueError, match="PPOConfig.env_id: unknown gymnax environment id 'CartPol-v1'.*Vault-v0"):
        ppo.make_ppo(ppo.PPOConfig.cartpole(env_id="CartPol-v1"))


def small_vault(**overrides):
    settings = dict(env_id="Vault-v0", num_envs=8, num_steps=16, total_steps=8 * 16 * 6, hidden_size=32)
    settings.update(overrides)
    return ppo.PPOConfig(**settings)


@pytest.mark.parametrize("bootstrap,mask", [(True, True), (False, False)], ids=["default", "stripped"])
def test_the_rollout_applies_the_network_once_per_step(bootstrap, mask):
    config = small_vault(bootstrap_truncation=bootstrap, mask_actions=mask)
    agent = ppo.make_ppo(config)
    params = agent.network.init(jax.random.key(0))
    obs = jnp.zeros((config.num_envs, agent.env.observation_space(agent.env_params).shape[0]))
    one_pass = count_primitives(jax.make_jaxpr(agent.network.apply)(params, obs), "dot_general")
    assert one_pass == 2 * (config.num_layers + 1)  # actor and critic trunks and heads
    body = rollout_step_body(agent.train, config.num_steps)
    assert count_primitives(body, "dot_general") == one_pass
    # no branch or inner loop per step: on a GPU each reads its predicate back to the host
    assert count_primitives(body, "cond") == 0 and count_primitives(body, "while") == 0


def test_truncation_bootstrap_adds_the_final_observations_value_as_a_per_step_pass_would(monkeypatch):
    monkeypatch.setattr(devices, "launch_bound", lambda: False)  # passes of [E] rows (a GPU takes one pass of [T, E])
    config = small_vault(num_steps=24)
    short = envs.make_masked_env("Vault-v0")[1].replace(max_steps_in_episode=5)  # many cuts a rollout
    agent = ppo.make_ppo(config, env_params=short)
    plain = ppo.make_ppo(small_vault(num_steps=24, bootstrap_truncation=False), env_params=short)
    runner = agent.init(jax.random.key(2))
    _, rollout = jax.jit(agent.collect)(runner)
    _, raw = jax.jit(plain.collect)(runner)
    cut = np.asarray(rollout.truncated)
    assert raw.truncated is None and raw.final_obs is None  # the stripped rollout stores neither
    assert cut.sum() > 2 * config.num_envs  # several passes of one env batch each
    np.testing.assert_array_equal(np.asarray(rollout.action), np.asarray(raw.action))  # bootstrapping never changes acting
    # the critic on each step's [E] final observations, as a pass inside the rollout would run it,
    # beside the passes over the cut steps alone: the same values, bit for bit
    critic = lambda obs: agent.network.apply(runner.params, obs)[1]  # noqa: E731
    per_step = jax.jit(jax.lax.map, static_argnums=0)(critic, rollout.final_obs)
    gathered = jax.jit(truncation.final_values, static_argnums=0)(critic, rollout.final_obs, rollout.truncated)
    np.testing.assert_array_equal(np.asarray(gathered)[cut], np.asarray(per_step)[cut])
    # ... and the reward gets gamma times that value (to rounding: XLA may fuse r + gamma * v differently per program)
    expected = raw.reward + config.gamma * per_step * rollout.truncated
    np.testing.assert_allclose(np.asarray(rollout.reward), np.asarray(expected), rtol=1e-6, atol=1e-7)
    assert np.all(np.abs(np.asarray(rollout.reward) - np.asarray(raw.reward))[cut] > 1e-3)
    np.testing.assert_array_equal(np.asarray(rollout.reward)[~cut], np.asarray(raw.reward)[~cut])


def test_resume_from_a_checkpoint_continues_exactly():
    agent = ppo.make_ppo(small_vault())
    run = jax.jit(agent.run, static_argnums=1)
    straight, straight_metrics = run(agent.init(jax.random.key(0)), 6)
    half, _ = run(agent.init(jax.random.key(0)), 3)
    with tempfile.TemporaryDirectory() as directory:
        checkpoint.save(directory, 3, half, {"config": "small_vault"})
        restored, metadata = checkpoint.restore(directory, like=agent.init(jax.random.key(1)))
    assert metadata["config"] == "small_vault"
    resumed, resumed_metrics = run(restored, 3)
    assert_same_tree(straight, resumed)
    np.testing.assert_array_equal(np.asarray(straight_metrics["entropy"])[3:], np.asarray(resumed_metrics["entropy"]))


def test_a_checkpoint_of_the_linen_layout_restores_into_the_plain_parameter_dicts():
    # Before its network moved to Flax NNX, PPO's parameters (and Adam's moments of them) were one
    # level down, under 'params'. Such a checkpoint still loads; another tree still fails.
    agent = ppo.make_ppo(small_vault())
    runner, _ = jax.jit(agent.run, static_argnums=1)(agent.init(jax.random.key(0)), 1)
    adam = runner.opt_state[1][0]
    assert set(adam.mu) == set(runner.params)  # the moments are dicts shaped like the parameters
    linen_opt_state = (runner.opt_state[0], (adam._replace(mu={"params": adam.mu}, nu={"params": adam.nu}),
                                             *runner.opt_state[1][1:]))
    linen_runner = runner.replace(params={"params": runner.params}, opt_state=linen_opt_state)
    with tempfile.TemporaryDirectory() as directory:
        checkpoint.save(directory, 1, linen_runner, {"config": "small_vault"})
        restored, _ = checkpoint.restore(directory, like=agent.init(jax.random.key(1)))
        assert_same_tree(runner, restored)
        other = ppo.make_ppo(small_vault(hidden_size=16)).init(jax.random.key(1))
        with pytest.raises(ValueError, match="do not match|shape"):
            checkpoint.restore(directory, like=other)


def test_masked_training_never_chooses_illegal_actions_and_reports_through_the_callback():
    seen = []
    agent = ppo.make_ppo(small_vault(), callback=seen.append, log_every=2)
    _, metrics = jax.jit(agent.train)(jax.random.key(0))
    jax.effects_barrier()
    assert np.all(np.asarray(metrics["invalid_action_rate"]) == 0.0)
    assert [int(m["timesteps"]) for m in seen] == [2 * 128, 4 * 128, 6 * 128]
    assert set(ppo.METRIC_NAMES) == set(metrics)
    assert np.all(np.asarray(metrics["entropy"]) <= np.asarray(metrics["max_entropy"]) + 1e-5)
    unmasked = ppo.make_ppo(small_vault(mask_actions=False))
    _, metrics = jax.jit(unmasked.train)(jax.random.key(0))
    assert np.mean(np.asarray(metrics["invalid_action_rate"])) > 0.3  # most of 13 actions are illegal


@pytest.mark.parametrize("gpu", [False, True], ids=["cpu form", "gpu form"])
def test_logged_rows_reach_the_callback_in_bursts_in_order(monkeypatch, gpu):
    """Rows wait on the device and travel a burst at a time; every logged update still reaches the
    callback once, in order, with the numbers train returns, the last partial burst included. The
    GPU's form (scans of a burst's updates, no branch) delivers the same rows."""
    monkeypatch.setattr(devices, "launch_bound", lambda: gpu)
    monkeypatch.setattr(logged_scan, "METRICS_BURST_STEPS", 3 * 128)  # small_vault: 128 steps an update
    seen = []
    agent = ppo.make_ppo(small_vault(total_steps=128 * 7), callback=seen.append, log_every=1)  # bursts of 3, 3, 1
    run = jax.jit(agent.run, static_argnums=1)
    runner, first = run(agent.init(jax.random.key(0)), 4)  # two run calls: the rows of each are delivered by its end
    jax.effects_barrier()
    assert [int(row["timesteps"]) for row in seen] == [128 * u for u in range(1, 5)]
    _, second = run(runner, 3)
    jax.effects_barrier()
    assert [int(row["timesteps"]) for row in seen] == [128 * u for u in range(1, 8)]
    for name in ppo.METRIC_NAMES:
        returned = np.concatenate([np.asarray(first[name]), np.asarray(second[name])])
        np.testing.assert_array_equal(np.stack([row[name] for row in seen]), returned)
        assert all(row[name].shape == () and row[name].dtype == returned.dtype for row in seen)


def test_on_a_gpu_the_default_adds_no_branch_to_the_stripped_program_and_no_number_changes(monkeypatch):
    """A GPU reads every lax.cond predicate and while_loop test back to the host and waits (one
    round trip per update cost about a tenth of a 4-env CartPole run on an H200). Its form of the
    default PPO (mask, truncation bootstrap, metrics callback) holds no cond or while beyond what
    the stripped program holds (jax.random's platform-dependent choices, resolved when compiling),
    and trains to the same numbers as the CPU's form, a time-limit cut included."""
    short = envs.make_masked_env("Vault-v0")[1].replace(max_steps_in_episode=5)  # many cuts a rollout

    def program(config, callback, gpu):
        monkeypatch.setattr(devices, "launch_bound", lambda: gpu)
        train = ppo.make_ppo(config, env_params=short, callback=callback, log_every=2).train
        return jax.make_jaxpr(train)(jax.random.key(0)), jax.jit(train)(jax.random.key(0))

    stripped, _ = program(small_vault(mask_actions=False, bootstrap_truncation=False), None, True)
    rows = {True: [], False: []}
    (gpu_form, (gpu_runner, gpu_metrics)), (_, (cpu_runner, cpu_metrics)) = (
        program(small_vault(), rows[gpu].append, gpu) for gpu in (True, False))
    jax.effects_barrier()
    for name in ("cond", "while"):
        assert count_primitives(gpu_form, name) == count_primitives(stripped, name), name
    for a, b in zip(jax.tree_util.tree_leaves((gpu_runner.params, gpu_metrics)),
                    jax.tree_util.tree_leaves((cpu_runner.params, cpu_metrics))):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6, atol=1e-6)
    assert [int(row["update"]) for row in rows[True]] == [int(row["update"]) for row in rows[False]] == [2, 4, 6]


def test_vmap_over_seeds_equals_seeds_one_at_a_time():
    agent = ppo.make_ppo(small_vault(total_steps=8 * 16 * 2))
    keys = jax.random.split(jax.random.key(4), 3)
    together, _ = jax.jit(jax.vmap(agent.train))(keys)
    for i, key in enumerate(keys):
        alone, _ = jax.jit(agent.train)(key)
        for a, b in zip(jax.tree_util.tree_leaves(alone.params), jax.tree_util.tree_leaves(together.params)):
            np.testing.assert_allclose(np.asarray(a), np.asarray(b)[i], rtol=1e-4, atol=1e-6)


def test_entropy_watch_warns_once_on_early_collapse():
    config = small_vault()
    watch = ppo.EntropyWatch(config)
    healthy = {"timesteps": np.int32(128), "entropy": np.float32(1.0), "max_entropy": np.float32(1.2)}
    collapsed = {"timesteps": np.int32(128), "entropy": np.float32(0.01), "max_entropy": np.float32(1.2)}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        watch(healthy)
    with pytest.warns(RuntimeWarning, match="entropy collapsed early"):
        watch(collapsed)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        watch(collapsed)  # once is enough


def test_ppo_learns_cartpole():
    """Quick: 100k steps of PureJaxRL's CartPole settings must far exceed random play (~22)."""
    train = ppo.make_train(ppo.PPOConfig.cartpole(total_steps=100_000))
    _, metrics = jax.jit(train)(jax.random.key(0))
    returns = np.asarray(metrics["episode_return"])
    assert np.nanmean(returns[:5]) < 40 and np.nanmean(returns[-10:]) > 150, returns


def test_ppo_trains_on_minatar_grids_through_the_flattened_actor_critic():
    """MinAtar's observations are [10, 10, C] grids: the actor-critic flattens them (as Rejax's MLP and labcore's
    MLP Q-network do), so PPO runs on them, and a grid and its flattened copy get the same logits and value."""
    config = ppo.PPOConfig(env_id="Breakout-MinAtar", num_envs=8, num_steps=16, total_steps=2_048, hidden_size=32,
                           num_minibatches=2, update_epochs=1)
    agent = ppo.make_ppo(config)
    runner, metrics = jax.jit(agent.train)(jax.random.key(0))
    assert np.isfinite(np.asarray(metrics["value_loss"])).all() and np.isfinite(np.asarray(metrics["policy_loss"])).all()
    grids = jax.random.uniform(jax.random.key(1), (3, 10, 10, 4))
    for got, want in zip(agent.network.apply(runner.params, grids), agent.network.apply(runner.params, grids.reshape(3, -1))):
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))


@pytest.mark.end_to_end
def test_run_driver_resumes_an_interrupted_run_exactly(tmp_path):
    from labcore.agents.ppo import run as ppo_run

    config = small_vault(eval_episodes=2)  # 6 updates
    # "straight" goes into a folder that holds an earlier run (10 logged rows) and a file of the user's
    earlier = tmp_path / "straight"
    earlier.mkdir()
    (earlier / "metrics.jsonl").write_text('{"update": 1}\n' * 10)
    (earlier / "summary.json").write_text("{}")
    (earlier / "notes.txt").write_text("mine")
    with pytest.raises(FileExistsError, match="holds an earlier run"):
        ppo_run.train(config, earlier, progress=False)
    straight = ppo_run.train(config, earlier, log_every=1, progress=False, evaluate=False, overwrite=True)
    assert len(straight.metrics) == 6 and len(read_metrics(earlier)) == 6  # replaced, not appended
    assert json.loads((earlier / "summary.json").read_text())["timesteps"] == 6 * 128
    assert (earlier / "notes.txt").read_text() == "mine"  # overwrite deletes the run's files, and only those
    interrupted = tmp_path / "interrupted"
    ppo_run.train(config, interrupted, log_every=1, checkpoint_every=4, progress=False, evaluate=False)
    import shutil

    shutil.rmtree(interrupted / "checkpoints" / "6")  # as if killed after the checkpoint at update 4
    resumed = ppo_run.train(config, interrupted, log_every=1, checkpoint_every=4, resume=True, progress=False)
    assert int(resumed.state.update_step) == 6
    assert resumed.summary["timesteps"] == 6 * 128 and "greedy_return_mean" in resumed.summary
    assert "greedy_return_mean" not in straight.summary  # evaluate=False: no evaluation
    assert_same_tree(straight.state, resumed.state)
    assert [row["update"] for row in resumed.metrics] == [5, 6]
    # the folder's rows read as one run: those past the checkpoint at 4 were cut, then logged again
    assert read_metrics(interrupted) == read_metrics(earlier)
    assert resumed.metrics[-1]["entropy"] == straight.metrics[-1]["entropy"]
    config_back, runner_back = ppo_run.load_checkpoint(interrupted)
    assert config_back == config
    assert_same_tree(runner_back, straight.state)
    with pytest.raises(ValueError, match="different config"):
        ppo_run.train(small_vault(eval_episodes=2, seed=1), interrupted, resume=True, progress=False)
    with pytest.raises(FileExistsError, match="holds an earlier run"):
        ppo_run.train(config, earlier, progress=False)  # now it holds the straight run


@pytest.mark.end_to_end
def test_bfloat16_compute_learns_cartpole_with_float32_parameters():
    """compute_dtype='bfloat16': matmuls in bfloat16, parameters, optimizer state and loss in float32."""
    config = ppo.PPOConfig.cartpole(total_steps=100_000, compute_dtype="bfloat16")
    agent = ppo.make_ppo(config)
    runner, metrics = jax.jit(agent.train)(jax.random.key(0))
    returns = np.asarray(metrics["episode_return"])
    assert np.nanmean(returns[:5]) < 40 and np.nanmean(returns[-10:]) > 150, returns
    assert {leaf.dtype for leaf in jax.tree_util.tree_leaves(runner.params)} == {jnp.dtype(jnp.float32)}
    float_state = [leaf for leaf in jax.tree_util.tree_leaves(runner.opt_state) if jnp.issubdtype(leaf.dtype, jnp.floating)]
    assert {leaf.dtype for leaf in float_state} == {jnp.dtype(jnp.float32)}
    # the network computes in bfloat16 inside and hands float32 to the loss
    jaxpr = str(jax.make_jaxpr(lambda p, o: agent.network.apply(p, o))(runner.params, jnp.zeros((3, 4))))
    assert "bf16" in jaxpr
    logits, value = agent.network.apply(runner.params, jnp.zeros((3, 4)))
    assert logits.dtype == value.dtype == jnp.float32
    assert np.isfinite(np.asarray(metrics["value_loss"])).all()


@pytest.mark.parametrize("value", ["float16", "bf16", "", None])
def test_bad_compute_dtype_names_the_field_before_compiling(value):
    with pytest.raises(ValueError, match="PPOConfig.compute_dtype must be one of \\('float32', 'bfloat16'\\)"):
        ppo.PPOConfig.cartpole(compute_dtype=value)
