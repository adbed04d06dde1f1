"""The JAX iRainbow port (labcore.agents.iqn) against the PyTorch reference (labcore.torch_ref.irainbow).

The heart of the port: the same weights (copied by the reference's bridge), the same taus and the
same noise draws (the NNX IQN reports the draws of a noise key; the PyTorch layers replay them
through set_noise) must give the same quantiles, Q-values, loss, gradients, optimiser state and
parameters after clipped Adam steps; the buffers must hold and return the same data after the
same calls; acting, target updates and epsilon must agree. float32 on both sides; tolerances
1e-5 relative to each array's scale.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
import torch

from labcore.agents.iqn import core as iqn
from labcore.agents.iqn import frame_buffer as fb
from labcore.agents.iqn.torch_reference import REFERENCE_NAMES, reference_agent
from labcore.nets.iqn import sample_taus
from labcore.torch_ref import irainbow as ref
from labcore.torch_ref import irainbow_network as ref_net

jax.config.update("jax_default_matmul_precision", "highest")  # true float32 matmuls on GPU/TPU too

# learning_rate and target_update_rate large enough that a wrong update would show; n_step 3
# keeps the gamma ** 3 quirk.
CONFIG = iqn.IQNConfig(obs_size=3, n_actions=4, n_frames=3, hidden_size=16, n_quantiles=4, n_tau_act=8,
                       buffer_size=32, batch_size=8, learning_rate=1e-2, target_update_rate=0.1, target_sync_epochs=3,
                       epsilon_decay=0.1, epsilon_end=0.2)
TOL = 1e-5


def torch_agent(seed: int = 0) -> ref.IRainbowAgent:
    return reference_agent(CONFIG, seed=seed)


def flax_params(net: ref_net.IQN) -> dict:
    """The torch network's weights as a Flax parameter pytree (through the reference's bridge)."""
    return jax.tree_util.tree_map(jnp.asarray, ref_net.iqn_params_to_flax(net))


def as_numpy(tree) -> dict:
    """Writable numpy copies of a JAX pytree (torch.from_numpy warns on read-only JAX buffers)."""
    return jax.tree_util.tree_map(lambda x: np.array(x, np.float32, copy=True), tree)


def torch_tree(net: ref_net.IQN, of=lambda p: p.grad) -> dict:
    """Something per parameter (default its .grad) in the Flax layout: matrices transposed to [in, out]."""
    names = {"kernel": "weight", "bias": "bias", "sigma_kernel": "sigma_weight", "sigma_bias": "sigma_bias"}
    tree = {}
    for layer in ref_net.DENSE_LAYERS + ref_net.NOISY_LAYERS:
        module = getattr(net, layer)
        fields = ("kernel", "bias") if layer in ref_net.DENSE_LAYERS else tuple(names)
        tree[layer] = {}
        for field in fields:
            value = of(getattr(module, names[field])).detach().numpy()
            tree[layer][field] = value.T if field.endswith("kernel") else value
    return tree


def assert_trees_close(actual, expected, tol: float = TOL) -> None:
    """Leaf by leaf, |a - e| <= tol * max(1, max|e|) + tol * |e|: float32 agreement at the array's scale."""
    paths_a = jax.tree_util.tree_flatten_with_path(actual)[0]
    flat_e = dict((jax.tree_util.keystr(p), v) for p, v in jax.tree_util.tree_flatten_with_path(expected)[0])
    assert {jax.tree_util.keystr(p) for p, _ in paths_a} == set(flat_e)
    for path, a in paths_a:
        e = np.asarray(flat_e[jax.tree_util.keystr(path)], np.float64)
        scale = max(1.0, float(np.max(np.abs(e)))) if e.size else 1.0
        np.testing.assert_allclose(np.asarray(a, np.float64), e, rtol=tol, atol=tol * scale,
                                   err_msg=f"leaf {jax.tree_util.keystr(path)}")


_add = jax.jit(fb.buffer_add, static_argnames=("config",))


def fill_both(agent: ref.IRainbowAgent, buf: fb.FrameBuffer, steps: int, rng: np.random.Generator,
              reward_scale: float = 1.0, obs_scale: float = 1.0) -> fb.FrameBuffer:
    """The same random steps added to the torch agent's buffer and to the JAX buffer."""
    for _ in range(steps):
        obs = (obs_scale * rng.normal(size=CONFIG.obs_size)).astype(np.float32)
        action, reward = int(rng.integers(CONFIG.n_actions)), np.float32(reward_scale * rng.normal())
        done = np.float32(rng.random() < 0.1)
        agent.buffer.add(obs, action, reward, done)
        buf = _add(buf, obs, action, reward, done, config=CONFIG)
    return buf


def as_batch(batch: dict) -> fb.Batch:
    return fb.Batch(states=jnp.asarray(batch["states"]), actions=jnp.asarray(batch["actions"], jnp.int32),
                     rewards=jnp.asarray(batch["rewards"]), next_states=jnp.asarray(batch["next_states"]),
                     dones=jnp.asarray(batch["dones"]), valid=jnp.asarray(batch["valid"]))


def queue_noise(agent: ref.IRainbowAgent, draws: dict) -> None:
    """Hand JAX's noise to the torch nets in the order the torch loss runs its forwards."""
    ref_net.iqn_noise_from_flax(draws["next_local"], agent.local)  # local(next_states) first ...
    ref_net.iqn_noise_from_flax(draws["expected"], agent.local)  # ... then local(states)
    ref_net.iqn_noise_from_flax(draws["next_target"], agent.target)


@functools.partial(jax.jit, static_argnames=("config",))
def loss_grads_draws(params, target_params, batch, randomness, config):
    """((loss, noise draws), gradient w.r.t. the local params) of loss_and_draws."""
    return jax.value_and_grad(iqn.loss_and_draws, has_aux=True)(params, target_params, batch, randomness, config)


def adam_moments(opt_state) -> tuple:
    """(mu, nu) of the optax chain (clip_by_global_norm, adam)."""
    adam_state = opt_state[1][0]
    return adam_state.mu, adam_state.nu


# ----------------------------------------------------------------------------------------------


def test_reference_agent_takes_every_setting_under_the_original_names():
    """labcore.agents.iqn.torch_reference maps every IQNConfig field to the reference's own argument."""
    agent = torch_agent(seed=2)
    assert (agent.obs_size, agent.n_actions, agent.n_frames, agent.local.layer_size) == (3, 4, 3, 16)
    assert (agent.n_quantiles, agent.n_tau_act, agent.n_step, agent.gamma, agent.batch_size) == (4, 8, 3, 0.99, 8)
    assert (agent.tau, agent.sync_freq, agent.grad_clip, agent.buffer.capacity) == (0.1, 3, 1.0, 32)
    assert (agent.epsilon, agent.epsilon_decay, agent.epsilon_min) == (1.0, 0.1, 0.2)
    assert agent.optimizer.param_groups[0]["lr"] == 1e-2
    covered = set(REFERENCE_NAMES) | {"obs_size", "n_actions", "fixed", "n_frames", "n_quantiles", "n_tau_act", "n_step",
                                      "gamma", "batch_size", "epsilon_decay"}
    assert covered == {field.name for field in dataclasses.fields(iqn.IQNConfig)}
    with pytest.raises(ValueError, match="faithful variant only"):
        reference_agent(dataclasses.replace(CONFIG, fixed=True))


def test_bridge_round_trips_exactly_and_fits_the_flax_module():
    agent = torch_agent(seed=3)
    params = flax_params(agent.local)
    iqn.check_params_shape(params, CONFIG)  # the bridge's names and shapes are the Flax module's
    fresh = ref_net.IQN(CONFIG.in_features, CONFIG.n_actions, CONFIG.hidden_size)
    ref_net.iqn_params_from_flax(as_numpy(params), fresh)
    assert_trees_close(flax_params(fresh), params, tol=0.0)
    for a, b in zip(agent.local.state_dict().values(), fresh.state_dict().values()):
        assert torch.equal(a, b)
    # and from a Flax initialisation into torch and back, bit for bit
    jax_params = iqn.init_params(jax.random.key(4), CONFIG)
    ref_net.iqn_params_from_flax(as_numpy(jax_params), fresh)
    assert_trees_close(flax_params(fresh), jax_params, tol=0.0)


def test_forward_quantiles_and_q_values_match():
    agent = torch_agent(seed=1)
    params, model = flax_params(agent.local), iqn.make_network(CONFIG)
    x = np.random.default_rng(0).normal(size=(5, CONFIG.in_features)).astype(np.float32)
    taus = np.array(sample_taus(jax.random.key(2), 5, 6))  # a writable copy for torch.from_numpy
    # eval mode: the mean weights
    agent.local.eval()
    with torch.no_grad():
        expected, returned_taus = agent.local(torch.from_numpy(x), 6, torch.from_numpy(taus))
        expected_q = agent.local.get_qvalues(torch.from_numpy(x), 6, torch.from_numpy(taus))
    np.testing.assert_array_equal(returned_taus.numpy(), taus)
    apply = jax.jit(model.apply, static_argnames=("method",))
    assert_trees_close(apply(params, x, taus), expected.numpy())
    assert_trees_close(apply(params, x, taus, method="get_qvalues"), expected_q.numpy())
    # training mode: JAX draws the noise, torch replays it
    agent.local.train()
    quantiles = apply(params, x, taus, jax.random.key(3))
    draws = apply(params, jax.random.key(3), method="noise_draws")
    ref_net.iqn_noise_from_flax(draws, agent.local)
    with torch.no_grad():
        noisy, _ = agent.local(torch.from_numpy(x), 6, torch.from_numpy(taus))
    assert_trees_close(quantiles, noisy.numpy())
    assert not np.allclose(noisy.numpy(), expected.numpy())  # the noise mattered
    for layer in ref_net.NOISY_LAYERS:  # and torch used exactly JAX's draws, transposed
        eps_w, eps_b = getattr(agent.local, layer).last_noise
        np.testing.assert_array_equal(eps_w.numpy().T, draws[layer]["eps_kernel"])
        np.testing.assert_array_equal(eps_b.numpy(), draws[layer]["eps_bias"])


def test_buffers_match_through_adds_add_empty_and_the_wrap():
    agent, buf, rng = torch_agent(), fb.buffer_init(CONFIG), np.random.default_rng(5)
    current = jax.jit(fb.buffer_current_state, static_argnames=("config",))
    gather = jax.jit(fb.gather_batch, static_argnames=("config",))
    sample = jax.jit(fb.sample_indices, static_argnames=("config",))
    stacked = jax.jit(fb.stacked_state, static_argnames=("config",))
    add_empty = jax.jit(fb.buffer_add_empty, static_argnames=("config",))
    key = jax.random.key(6)
    # an epoch-like rhythm: add_empty, then some steps; 4 rounds of 13 rows wrap the 32-row ring
    for round_ in range(4):
        agent.buffer.add_empty()
        buf = add_empty(buf, config=CONFIG)
        np.testing.assert_array_equal(current(buf, config=CONFIG), agent.buffer.current_state())
        buf = fill_both(agent, buf, 13, rng)
        assert (int(buf.idx), int(buf.size)) == (agent.buffer.idx, agent.buffer.size)
        for name in ("states", "actions", "rewards", "dones"):
            np.testing.assert_array_equal(np.asarray(getattr(buf, name)), getattr(agent.buffer, name))
        np.testing.assert_array_equal(current(buf, config=CONFIG), agent.buffer.current_state())
        obs = rng.normal(size=3).astype(np.float32)
        np.testing.assert_array_equal(stacked(buf, obs, config=CONFIG), agent.stacked_state(obs))
        assert bool(fb.can_train(buf, CONFIG)) == agent.can_train()
        if not agent.can_train():
            continue
        # the same start indices give identical batches, whichever side drew them
        key, sample_key = jax.random.split(key)
        for indices in (np.asarray(sample(sample_key, buf, config=CONFIG)),
                        agent.buffer.sample_indices(CONFIG.batch_size, agent.np_rng)):
            assert len(set(indices.tolist())) == CONFIG.batch_size
            assert indices.max() < max(1, agent.buffer.size - CONFIG.n_frames - 1)
            expected, got = agent.buffer.gather(indices), gather(buf, jnp.asarray(indices, jnp.int32), config=CONFIG)
            for name, value in expected.items():
                np.testing.assert_array_equal(np.asarray(getattr(got, name)), value, err_msg=name)
    assert int(buf.size) == 32 and agent.buffer.idx != 0  # wrapped, with add_empty skips along the way


# The quantile Huber loss caps each element's slope at 1, so large rewards alone cannot push the
# gradient norm past the clip: large observations (and rewards) do, through head1's gradient.
@pytest.mark.parametrize("reward_scale, obs_scale, clipped", [(0.01, 1.0, False), (100.0, 30.0, True)])
def test_loss_gradients_and_clipped_adam_steps_match(reward_scale: float, obs_scale: float, clipped: bool):
    agent, rng = torch_agent(seed=7), np.random.default_rng(8)
    with torch.no_grad():  # a target that differs from the local net, so both networks matter
        for p in agent.target.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=torch.Generator().manual_seed(p.numel())))
    buf = fill_both(agent, fb.buffer_init(CONFIG), 24, rng, reward_scale, obs_scale)
    indices = np.asarray(fb.sample_indices(jax.random.key(9), buf, CONFIG))
    torch_batch = agent.buffer.gather(indices)
    batch = as_batch(torch_batch)
    assert_trees_close(batch, fb.gather_batch(buf, jnp.asarray(indices), CONFIG), tol=0.0)

    params, target = flax_params(agent.local), flax_params(agent.target)
    opt_state = iqn.make_optimizer(CONFIG).init(params)
    keys = jax.random.split(jax.random.key(10), 2)
    for step, key in enumerate(keys):  # two steps: the second also checks Adam's moments and the clip's scale
        randomness = iqn.loss_randomness(key, CONFIG.batch_size, CONFIG)
        torch_taus = {name: torch.from_numpy(np.array(getattr(randomness, name)))
                      for name in ("taus_next", "taus_target", "taus_expected")}
        (loss, draws), grads = loss_grads_draws(params, target, batch, randomness, CONFIG)
        # the loss and every gradient leaf
        queue_noise(agent, draws)
        agent.optimizer.zero_grad()
        torch_loss = agent.loss(torch_batch, **torch_taus)
        torch_loss.backward()
        np.testing.assert_allclose(float(loss), torch_loss.item(), rtol=TOL)
        assert_trees_close(grads, torch_tree(agent.local))
        norm = float(optax.tree.norm(grads))
        assert (norm > CONFIG.max_grad_norm) == clipped, norm  # the clip is active exactly in the clipped case
        if step == 0:
            # the faithful targets lack stop_gradient; the fixed variant's have it: the same local
            # gradient either way (the targets never depend on the local params)
            fixed = dataclasses.replace(CONFIG, fixed=True)
            (_, _), fixed_grads = loss_grads_draws(params, target, batch, randomness, fixed)
            assert_trees_close(fixed_grads, grads, tol=1e-6)
        # one clipped Adam step and the soft update, on both sides
        params, target, opt_state, step_loss = iqn.train_step(params, target, opt_state, batch, key, CONFIG)
        queue_noise(agent, draws)
        torch_step_loss = agent.train_step(torch_batch, **torch_taus)
        np.testing.assert_allclose(float(step_loss), torch_step_loss, rtol=TOL)
        assert_trees_close(params, flax_params(agent.local))
        assert_trees_close(target, flax_params(agent.target))
        mu, nu = adam_moments(opt_state)
        state = agent.optimizer.state
        assert_trees_close(mu, torch_tree(agent.local, lambda p: state[p]["exp_avg"]))
        assert_trees_close(nu, torch_tree(agent.local, lambda p: state[p]["exp_avg_sq"]))
        if step == 0:  # Adam's first moment after one step is (1 - beta1) * the gradient AFTER the clip
            scale = min(1.0, CONFIG.max_grad_norm / norm)
            assert_trees_close(mu, jax.tree_util.tree_map(lambda g: 0.1 * scale * g, grads))
            assert float(optax.tree.norm(mu)) == pytest.approx(0.1 * min(norm, CONFIG.max_grad_norm), rel=1e-5)


def test_soft_and_hard_target_updates_and_epoch_rhythm_match():
    agent = torch_agent(seed=11)
    with torch.no_grad():
        for p in agent.local.parameters():
            p.mul_(1.5)  # local != target
    local, target = flax_params(agent.local), flax_params(agent.target)
    agent.soft_update()
    assert_trees_close(iqn.soft_update(target, local, CONFIG.target_update_rate), flax_params(agent.target))
    agent.hard_update()
    assert_trees_close(iqn.hard_update(local), flax_params(agent.target), tol=0.0)
    # start_epoch / end_epoch over a few epochs: hard syncs at epoch % sync_freq == 0, add_empty, epsilon
    jax_agent = iqn.AgentState(params=local, target_params=target, opt_state=iqn.make_optimizer(CONFIG).init(local),
                               buffer=fb.buffer_init(CONFIG), epsilon=jnp.float32(CONFIG.epsilon_start))
    agent = torch_agent(seed=11)
    ref_net.iqn_params_from_flax(as_numpy(local), agent.local)
    ref_net.iqn_params_from_flax(as_numpy(target), agent.target)
    for epoch in range(8):
        agent.start_epoch(epoch)
        jax_agent = iqn.start_epoch(jax_agent, epoch, CONFIG)
        assert_trees_close(jax_agent.target_params, flax_params(agent.target), tol=0.0)
        assert int(jax_agent.buffer.idx) == agent.buffer.idx
        # drift both targets between syncs, as the soft updates of training would
        agent.soft_update()
        drifted = iqn.soft_update(jax_agent.target_params, jax_agent.params, CONFIG.target_update_rate)
        jax_agent = jax_agent.replace(target_params=drifted)
        with torch.no_grad():
            for p in agent.local.parameters():
                p.add_(0.01)
        jax_agent = jax_agent.replace(params=flax_params(agent.local))
        agent.end_epoch()
        jax_agent = iqn.end_epoch(jax_agent, CONFIG)
        np.testing.assert_allclose(float(jax_agent.epsilon), agent.epsilon, rtol=1e-6)
    assert agent.epsilon > CONFIG.epsilon_end  # 0.9 ** 8 = 0.43: not floored yet; 0.9 ** 28 = 0.05 is
    for _ in range(20):
        agent.end_epoch()
        jax_agent = iqn.end_epoch(jax_agent, CONFIG)
    assert float(jax_agent.epsilon) == pytest.approx(agent.epsilon) == CONFIG.epsilon_end


def test_acting_picks_the_same_action():
    agent, rng = torch_agent(seed=12), np.random.default_rng(13)
    buf = fill_both(agent, fb.buffer_init(CONFIG), 6, rng, obs_scale=10.0)
    params = flax_params(agent.local)
    greedy = jax.jit(iqn.greedy_action, static_argnames=("config",))
    stacked_state = jax.jit(fb.stacked_state, static_argnames=("config",))
    agent.epsilon = 0.0  # random() > 0: always greedy
    jax_actions, torch_actions = [], []
    for i in range(12):
        obs = (10.0 * rng.normal(size=3)).astype(np.float32)  # spread-out states: varied greedy actions
        stacked = agent.stacked_state(obs)
        np.testing.assert_array_equal(stacked_state(buf, obs, config=CONFIG), stacked)
        # the taus take_action is about to draw from the agent's torch generator, replayed for JAX
        replay = torch.Generator().set_state(agent.torch_generator.get_state())
        taus = torch.rand(1, CONFIG.n_tau_act, 1, generator=replay)
        agent.local.eval()
        with torch.no_grad():
            q = agent.local.get_qvalues(torch.from_numpy(stacked)[None], CONFIG.n_tau_act, taus)
        agent.local.train()
        jax_q = iqn.make_network(CONFIG).apply(params, jnp.asarray(stacked)[None], jnp.asarray(taus.numpy()),
                                               method="get_qvalues")
        assert_trees_close(jax_q, q.numpy())
        torch_actions.append(agent.take_action(obs))  # eval mode, the taus above
        jax_actions.append(int(greedy(params, jnp.asarray(stacked), jnp.asarray(taus.numpy()), config=CONFIG)))
        assert torch_actions[-1] == int(torch.argmax(q))
        agent.buffer.add(obs, torch_actions[-1], 0.0, 0.0)
        buf = _add(buf, obs, torch_actions[-1], np.float32(0), np.float32(0), config=CONFIG)
    assert jax_actions == torch_actions
    assert len(set(torch_actions)) > 1  # the states led to different choices: a meaningful comparison
