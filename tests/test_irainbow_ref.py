"""The PyTorch iRainbow reference (labcore.torch_ref.irainbow, .irainbow_network) against hand-computed values.

The JAX port is tested against this reference elsewhere; here the reference itself is checked:
noisy layers, the IQN forward (against a float64 numpy forward), the frame buffer's quirks, the
loss (against a float64 numpy re-computation), the update schedule and determinism.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from labcore.torch_ref import irainbow as ir
from labcore.torch_ref import irainbow_network as irn

SMALL = dict(n_frames=2, layer_size=8, n_quantiles=5, batch_size=6, memory=32)


def small_agent(seed: int = 0, **overrides) -> ir.IRainbowAgent:
    return ir.IRainbowAgent(4, 3, **{**SMALL, **overrides}, seed=seed)


# ----------------------------------------------------------------------------------------------
# float64 numpy versions of the network and the loss, written from the docstrings of IQN.forward
# (labcore.torch_ref.irainbow_network) and of the quirks in labcore.torch_ref.irainbow


def np_forward(params: dict, x: np.ndarray, taus: np.ndarray, noise: dict | None = None) -> np.ndarray:
    """Quantiles [B, N, A] in float64; ``noise`` {'ff_1': (eps_kernel [in, out], eps_bias)} adds sigma * eps."""
    p = {name: {k: np.asarray(v, np.float64) for k, v in layer.items()} for name, layer in params.items()}

    def noisy(name, z):
        kernel, bias = p[name]["kernel"], p[name]["bias"]
        if noise is not None:
            eps_k, eps_b = noise[name]
            kernel = kernel + p[name]["sigma_kernel"] * eps_k
            bias = bias + p[name]["sigma_bias"] * eps_b
        return z @ kernel + bias

    b, n = taus.shape[:2]
    h = np.maximum(x @ p["head1"]["kernel"] + p["head1"]["bias"], 0.0)
    cos = np.cos(taus.astype(np.float64) * (np.pi * np.arange(1, 65)))
    c = np.maximum(cos @ p["cos_embedding"]["kernel"] + p["cos_embedding"]["bias"], 0.0)
    z = (h[:, None, :] * c).reshape(b * n, -1)
    z = np.maximum(noisy("ff_1", z), 0.0)
    adv, value = noisy("advantage", z), noisy("value", z)
    return (value + adv - adv.mean(axis=1, keepdims=True)).reshape(b, n, -1)


def np_loss(local: dict, target: dict, batch: dict, taus: tuple, gamma_n: float, noise=(None, None, None)) -> float:
    """The loss in float64: double-DQN action, target quantiles with gamma ** n_step, expected
    quantiles, quantile Huber terms times valid, and their mean (quirks 1-3)."""
    taus_next, taus_target, taus_expected = taus
    rows = np.arange(len(batch["actions"]))
    best = np_forward(local, batch["next_states"], taus_next, noise[0]).mean(axis=1).argmax(axis=1)   # [B]
    q_next = np_forward(target, batch["next_states"], taus_target, noise[1])[rows, :, best]            # [B, N] (j)
    q_targets = batch["rewards"] + gamma_n * q_next * (1.0 - batch["dones"])                           # [B, N]
    q_expected = np_forward(local, batch["states"], taus_expected, noise[2])[rows, :, batch["actions"][:, 0]]  # [B, N] (i)
    td = q_targets[:, None, :] - q_expected[:, :, None]                                                # [B, i, j]
    huber = np.where(np.abs(td) <= 1.0, 0.5 * td**2, np.abs(td) - 0.5) * batch["valid"][:, :, None]
    weight = np.abs(taus_expected.astype(np.float64) - (td < 0))
    return float(np.mean(weight * huber))


def filled_buffer_batch(agent: ir.IRainbowAgent, rng: np.random.Generator, rows: int = 20) -> dict:
    """A batch with nonzero rewards, one done row and one invalid stack."""
    for t in range(rows):
        agent.buffer.add(rng.normal(size=agent.obs_size), t % agent.n_actions, rng.normal(), float(t == 7))
    # starts 6 and 7: last row 7 is done (valid); start 7 with n_frames=2: row 7 in the first frame -> invalid
    return agent.buffer.gather(np.array([0, 3, 6, 7, 10, 12]))


# ----------------------------------------------------------------------------------------------
# NoisyLinear


def test_noisy_linear_init_ranges_and_sigma():
    g = torch.Generator().manual_seed(0)
    layer = irn.NoisyLinear(300, 200, generator=g)
    bound = math.sqrt(3 / 300)
    for values in (layer.weight, layer.bias):
        assert float(values.detach().abs().max()) <= bound
        assert float(values.detach().abs().max()) > 0.98 * bound  # spread over the whole interval
    # U(-s, s) has standard deviation s / sqrt(3) = 1 / sqrt(in)
    assert float(layer.weight.detach().std()) == pytest.approx(1 / math.sqrt(300), rel=0.02)
    assert torch.all(layer.sigma_weight == torch.tensor(0.017)) and torch.all(layer.sigma_bias == torch.tensor(0.017))
    assert layer.sigma_weight.shape == (200, 300) and layer.sigma_bias.shape == (200,)
    assert all(p.requires_grad for p in layer.parameters()) and len(list(layer.parameters())) == 4


def test_noisy_linear_eval_is_mean_weights_and_training_noise():
    g = torch.Generator().manual_seed(1)
    layer = irn.NoisyLinear(5, 3, generator=g)
    x = torch.randn(4, 5, generator=g)
    layer.eval()
    assert torch.equal(layer(x), x @ layer.weight.T + layer.bias)
    layer.train()
    first, second = layer(x), layer(x)
    assert not torch.allclose(first, second)                   # fresh noise on every forward
    assert not torch.allclose(first, x @ layer.weight.T + layer.bias)
    eps_w, eps_b = layer.last_noise
    with torch.no_grad():
        expected = x @ (layer.weight + 0.017 * eps_w).T + layer.bias + 0.017 * eps_b
    assert torch.allclose(second, expected, atol=1e-6)


def test_set_noise_is_used_exactly_once_in_order_and_not_by_eval():
    layer = irn.NoisyLinear(5, 3, generator=torch.Generator().manual_seed(2))
    x = torch.randn(4, 5)
    draws = [(torch.randn(3, 5), torch.randn(3)) for _ in range(2)]
    for eps_w, eps_b in draws:
        layer.set_noise(eps_w, eps_b)
    layer.eval()
    layer(x)  # eval forwards leave the queue alone
    layer.train()
    with torch.no_grad():
        for eps_w, eps_b in draws:
            out = layer(x)
            assert torch.equal(layer.last_noise[0], eps_w) and torch.equal(layer.last_noise[1], eps_b)
            assert torch.allclose(out, x @ (layer.weight + layer.sigma_weight * eps_w).T + layer.bias + layer.sigma_bias * eps_b, atol=1e-6)
        layer(x)
        assert not torch.equal(layer.last_noise[0], draws[-1][0])  # queue empty: a fresh draw
    with pytest.raises(ValueError, match="eps_weight must have shape"):
        layer.set_noise(torch.zeros(5, 3), torch.zeros(3))
    with pytest.raises(ValueError, match="5 input features"):
        layer(torch.zeros(2, 4))


# ----------------------------------------------------------------------------------------------
# IQN


def test_iqn_shapes_taus_and_input_checks():
    net = irn.IQN(7, 4, layer_size=16, generator=torch.Generator().manual_seed(3))
    x = torch.randn(3, 7)
    quantiles, taus = net(x, 5)
    assert quantiles.shape == (3, 5, 4) and taus.shape == (3, 5, 1)
    assert float(taus.min()) >= 0.0 and float(taus.max()) < 1.0
    fixed = torch.rand(3, 5, 1)
    net.eval()
    quantiles, taus = net(x, 5, fixed)
    assert torch.equal(taus, fixed)
    assert torch.equal(net.get_qvalues(x, 5, fixed), quantiles.mean(dim=1))
    assert net.get_qvalues(x, 256).shape == (3, 4)
    assert net(x.view(3, 7, 1), 5, fixed)[0].shape == (3, 5, 4)  # any shape that flattens to input_size
    np.testing.assert_array_equal(net.pis.view(-1).numpy(), (np.pi * np.arange(1, 65)).astype(np.float32))
    with pytest.raises(ValueError, match="taus must have shape"):
        net(x, 5, torch.rand(3, 4, 1))
    with pytest.raises(ValueError, match="expects 7 input features"):
        net(torch.randn(3, 6), 5)


def test_iqn_dueling_mean_is_removed():
    net = irn.IQN(6, 5, layer_size=12, generator=torch.Generator().manual_seed(4))
    captured = []
    net.value.register_forward_hook(lambda module, inputs, output: captured.append(output))
    for train in (False, True):
        net.train(train)
        quantiles, _ = net(torch.randn(4, 6), 3)
        value = captured[-1].view(4, 3)
        # out - value = adv - mean(adv): sums to zero over the actions
        assert torch.allclose((quantiles - value[..., None]).sum(dim=-1), torch.zeros(4, 3), atol=1e-5)
        assert not torch.allclose(quantiles, value[..., None].expand_as(quantiles))


def test_iqn_forward_matches_float64_numpy_with_and_without_injected_noise():
    net = irn.IQN(6, 3, layer_size=10, generator=torch.Generator().manual_seed(5))
    rng = np.random.default_rng(0)
    x = rng.normal(size=(4, 6)).astype(np.float32)
    taus = rng.uniform(size=(4, 7, 1)).astype(np.float32)
    params = irn.iqn_params_to_flax(net)
    net.eval()
    with torch.no_grad():
        out = net(torch.from_numpy(x), 7, torch.from_numpy(taus))[0].numpy()
    np.testing.assert_allclose(out, np_forward(params, x, taus), rtol=1e-5, atol=1e-5)
    # training mode with injected draws, given in Flax layout (eps_kernel [in, out]) as the port draws them
    noise = {name: (rng.normal(size=params[name]["kernel"].shape), rng.normal(size=params[name]["bias"].shape))
             for name in irn.NOISY_LAYERS}
    irn.iqn_noise_from_flax({k: {"eps_kernel": (v[0],), "eps_bias": (v[1],)} for k, v in noise.items()}, net)
    net.train()
    with torch.no_grad():
        noisy = net(torch.from_numpy(x), 7, torch.from_numpy(taus))[0].numpy()
    np.testing.assert_allclose(noisy, np_forward(params, x, taus, noise), rtol=1e-5, atol=1e-5)
    assert not np.allclose(noisy, out)


# ----------------------------------------------------------------------------------------------
# FrameBuffer


def frame(t: int) -> np.ndarray:
    return np.array([t, 100 + t], np.float32)


def test_buffer_add_wraps_and_add_empty_skips_without_clearing():
    buf = ir.FrameBuffer(capacity=5, obs_size=2, n_frames=3)
    np.testing.assert_array_equal(buf.current_state(), np.zeros((2, 2)))
    for t in range(3):
        buf.add(frame(t), t, 0.5 * t, 0)
    assert (buf.idx, len(buf)) == (3, 3)
    np.testing.assert_array_equal(buf.current_state(), [frame(1), frame(2)])
    for t in range(3, 7):
        buf.add(frame(t), t, 0.5 * t, 0)
    assert (buf.idx, len(buf)) == (2, 5)                 # 7 writes into 5 rows
    np.testing.assert_array_equal(buf.states[:, 0], [5, 6, 2, 3, 4])
    np.testing.assert_array_equal(buf.actions, [5, 6, 2, 3, 4])
    np.testing.assert_array_equal(buf.current_state(), [frame(5), frame(6)])
    buf.add_empty()
    assert (buf.idx, len(buf)) == (4, 5)                 # skipped n_frames - 1 = 2 rows, size unchanged
    np.testing.assert_array_equal(buf.states[2:4, 0], [2, 3])  # not cleared
    np.testing.assert_array_equal(buf.current_state(), [frame(2), frame(3)])  # stale rows are read
    buf.add(frame(7), 7, 0, 0)
    buf.add_empty()
    assert buf.idx == 2                                   # (0 + 2) % 5
    # across the wrap: rows 0 and 1 before idx 2; at idx 1 -> rows 4 and 0
    buf.idx = 1
    np.testing.assert_array_equal(buf.current_state(), [frame(7), frame(5)])
    with pytest.raises(ValueError, match="2 values"):
        buf.add(np.zeros(3), 0, 0, 0)


def test_buffer_sample_range():
    rng = np.random.default_rng(0)
    buf = ir.FrameBuffer(capacity=16, obs_size=2, n_frames=3)
    for t in range(10):
        buf.add(frame(t), 0, 0, 0)
    # range(max(1, 10 - 3 - 1)) = range(6)
    seen = np.concatenate([buf.sample_indices(3, rng) for _ in range(200)])
    assert set(seen.tolist()) == set(range(6))
    assert sorted(buf.sample_indices(6, rng).tolist()) == list(range(6))  # without replacement
    with pytest.raises(ValueError):
        buf.sample_indices(7, rng)
    small = ir.FrameBuffer(capacity=16, obs_size=2, n_frames=3)
    small.add(frame(0), 0, 0, 0)
    assert small.sample_indices(1, rng).tolist() == [0]  # max(1, ...) keeps row 0 even when too few rows exist


def test_buffer_gather_against_hand_built_batch_and_valid_mask():
    buf = ir.FrameBuffer(capacity=20, obs_size=2, n_frames=3)
    for t in range(12):
        buf.add(frame(t), t % 4, 0.25 * t, float(t == 4))
    batch = buf.gather(np.array([2, 3, 4, 5, 0]))
    expected_states = np.array([np.concatenate([frame(i), frame(i + 1), frame(i + 2)]) for i in (2, 3, 4, 5, 0)])
    np.testing.assert_array_equal(batch["states"], expected_states)
    np.testing.assert_array_equal(batch["next_states"],
                                  np.array([np.concatenate([frame(i + 1), frame(i + 2), frame(i + 3)]) for i in (2, 3, 4, 5, 0)]))
    # the stack's last row: rows 4, 5, 6, 7, 2
    np.testing.assert_array_equal(batch["actions"], [[0], [1], [2], [3], [2]])
    np.testing.assert_array_equal(batch["rewards"], [[1.0], [1.25], [1.5], [1.75], [0.5]])
    np.testing.assert_array_equal(batch["dones"], [[1], [0], [0], [0], [0]])
    # invalid where row 4 is among the first n_frames - 1 rows: starts 3 (rows 3, 4) and 4 (rows 4, 5)
    np.testing.assert_array_equal(batch["valid"], [[1], [0], [0], [1], [1]])
    assert batch["states"].dtype == np.float32 and batch["actions"].dtype == np.int64
    assert batch["valid"].dtype == np.float32 and batch["dones"].shape == (5, 1)
    with pytest.raises(ValueError, match="start indices"):
        buf.gather(np.array([17]))  # rows 17..19 plus the next-state row 20 would leave the array
    sampled = buf.sample(4, np.random.default_rng(1))
    assert sampled["states"].shape == (4, 6) and sampled["next_states"].shape == (4, 6)


# ----------------------------------------------------------------------------------------------
# Agent


def test_agent_config_validation_and_initial_state():
    with pytest.raises(ValueError, match="IRainbowAgent.memory"):
        ir.IRainbowAgent(4, 3, n_frames=5, memory=5)
    with pytest.raises(ValueError, match="IRainbowAgent.gamma"):
        ir.IRainbowAgent(4, 3, gamma=1.5)
    agent = small_agent()
    assert agent.local.training and agent.target.training      # both noisy in the loss, as in sorrel
    for a, b in zip(agent.local.parameters(), agent.target.parameters(), strict=True):
        assert torch.equal(a, b)                                # identical at start
    assert agent.local.generator is agent.target.generator is agent.torch_generator
    assert agent.local.head1.weight.shape == (8, 8)             # n_frames * obs_size inputs


def test_can_train_threshold_is_exact():
    agent = small_agent(n_frames=3, batch_size=4)
    for t in range(7):
        agent.buffer.add(np.zeros(4), 0, 0, 0)
    assert not agent.can_train()                                # max(1, 7 - 4) = 3 < 4
    assert agent.train_step() is None
    agent.buffer.add(np.zeros(4), 0, 0, 0)
    assert agent.can_train()                                    # max(1, 8 - 4) = 4
    assert isinstance(agent.train_step(), float)
    assert small_agent(batch_size=1).can_train()                # max(1, ...) >= 1 even when empty


def test_quantile_huber_by_hand():
    td = torch.tensor([[[0.5, -2.0], [-0.5, 3.0]]])              # [b, i, j]
    taus = torch.tensor([[[0.25], [0.75]]])
    terms = ir.quantile_huber_terms(td, taus, torch.ones(1, 1))
    # 0.25 * 0.125, 0.75 * 1.5, 0.25 * 0.125, 0.75 * 2.5
    np.testing.assert_allclose(terms.numpy(), [[[0.03125, 1.125], [0.03125, 1.875]]])
    assert float(terms.mean()) == pytest.approx(3.0625 / 4)
    assert float(ir.quantile_huber_terms(td, taus, torch.zeros(1, 1)).abs().sum()) == 0.0


def test_loss_matches_float64_numpy_eval_mode():
    agent = small_agent(seed=3)
    with torch.no_grad():  # a target that differs from the local net, so the roles are not interchangeable
        for p in agent.target.parameters():
            p.add_(0.3 * torch.randn(p.shape, generator=torch.Generator().manual_seed(p.numel())))
    rng = np.random.default_rng(7)
    batch = filled_buffer_batch(agent, rng)
    assert batch["valid"].min() == 0.0 and batch["dones"].max() == 1.0
    taus = tuple(rng.uniform(size=(6, 5, 1)).astype(np.float32) for _ in range(3))
    agent.local.eval()
    agent.target.eval()
    loss = agent.loss(batch, *(torch.from_numpy(t) for t in taus))
    expected = np_loss(irn.iqn_params_to_flax(agent.local), irn.iqn_params_to_flax(agent.target), batch, taus, 0.99**3)
    assert loss.item() == pytest.approx(expected, rel=1e-5)
    # gamma ** n_step on one-step rewards matters: with n_step = 1 the value differs
    agent.n_step = 1
    assert agent.loss(batch, *(torch.from_numpy(t) for t in taus)).item() != pytest.approx(expected, rel=1e-5)


def test_loss_training_mode_uses_injected_noise_in_forward_order():
    """local(next_states), target(next_states), local(states): the draws queued for each net, in order."""
    agent = small_agent(seed=4)
    rng = np.random.default_rng(8)
    batch = filled_buffer_batch(agent, rng)
    taus = tuple(rng.uniform(size=(6, 5, 1)).astype(np.float32) for _ in range(3))
    local, target = irn.iqn_params_to_flax(agent.local), irn.iqn_params_to_flax(agent.target)

    def draws():
        return {name: (rng.normal(size=local[name]["kernel"].shape), rng.normal(size=local[name]["bias"].shape))
                for name in irn.NOISY_LAYERS}

    noise = (draws(), draws(), draws())
    for net, queued in ((agent.local, noise[0]), (agent.target, noise[1]), (agent.local, noise[2])):
        irn.iqn_noise_from_flax({k: {"eps_kernel": v[0], "eps_bias": v[1]} for k, v in queued.items()}, net)
    loss = agent.loss(batch, *(torch.from_numpy(t) for t in taus))
    assert loss.item() == pytest.approx(np_loss(local, target, batch, taus, 0.99**3, noise), rel=1e-5)
    loss.backward()  # targets are not detached: gradients reach the target net too
    assert agent.target.head1.weight.grad is not None and agent.local.head1.weight.grad is not None


def test_train_step_reduces_loss_on_a_fixed_batch():
    agent = small_agent(seed=5, lr=3e-3)
    rng = np.random.default_rng(9)
    batch = filled_buffer_batch(agent, rng)
    taus = tuple(torch.from_numpy(rng.uniform(size=(6, 5, 1)).astype(np.float32)) for _ in range(3))
    agent.local.eval()
    agent.target.eval()
    losses = [agent.train_step(batch, *taus) for _ in range(40)]
    assert losses[-1] < 0.5 * losses[0]
    assert all(p.grad is None for p in agent.target.parameters())  # cleared after each step


def test_train_step_clips_local_gradient_then_soft_updates(monkeypatch):
    agent = small_agent(seed=6)
    batch = filled_buffer_batch(agent, np.random.default_rng(10))
    calls = []
    original = torch.nn.utils.clip_grad_norm_

    def spy(parameters, max_norm, *args, **kwargs):
        parameters = list(parameters)
        calls.append((len(parameters), max_norm))
        return original(parameters, max_norm, *args, **kwargs)

    monkeypatch.setattr(torch.nn.utils, "clip_grad_norm_", spy)
    before = [p.detach().clone() for p in agent.target.parameters()]
    agent.train_step(batch)
    assert calls == [(len(list(agent.local.parameters())), 1.0)]
    for old, new, local in zip(before, agent.target.parameters(), agent.local.parameters(), strict=True):
        assert torch.allclose(new, 1e-3 * local + (1 - 1e-3) * old, atol=1e-7)  # after Adam, with the new local


def test_soft_update_formula():
    agent = small_agent(seed=7, tau=0.25)
    with torch.no_grad():
        for i, (t, l) in enumerate(zip(agent.target.parameters(), agent.local.parameters(), strict=True)):
            t.fill_(float(i))
            l.fill_(4.0 * i + 1.0)
    agent.soft_update()
    for i, t in enumerate(agent.target.parameters()):
        assert torch.all(t == 0.25 * (4.0 * i + 1.0) + 0.75 * i)   # sigma parameters included


def test_start_epoch_hard_syncs_at_zero_and_every_sync_freq_and_skips_rows():
    agent = small_agent(seed=8, sync_freq=3, n_frames=3)

    def perturb_local():
        with torch.no_grad():
            for p in agent.local.parameters():
                p.add_(1.0)

    def synced() -> bool:
        return all(torch.equal(a, b) for a, b in zip(agent.local.parameters(), agent.target.parameters(), strict=True))

    perturb_local()
    assert not synced()
    history = []
    for epoch in range(7):
        idx = agent.buffer.idx
        agent.start_epoch(epoch)
        assert agent.buffer.idx == (idx + 2) % agent.buffer.capacity and len(agent.buffer) == 0
        history.append(synced())
        perturb_local()
    assert history == [True, False, False, True, False, False, True]


def test_epsilon_decays_once_per_epoch_with_floor():
    agent = small_agent(epsilon=1.0, epsilon_decay=0.1, epsilon_min=0.5)
    values = []
    for _ in range(8):
        agent.end_epoch()
        values.append(agent.epsilon)
    np.testing.assert_allclose(values, [max(0.9**k, 0.5) for k in range(1, 9)])
    assert values[-1] == 0.5


def test_take_action_greedy_uses_eval_mode_and_256_taus_and_random_otherwise():
    agent = small_agent(seed=9, epsilon=0.0)
    rng = np.random.default_rng(11)
    for t in range(3):
        agent.buffer.add(rng.normal(size=4), 0, 0, 0)
    obs = rng.normal(size=4).astype(np.float32)
    stacked = agent.stacked_state(obs)
    np.testing.assert_array_equal(stacked, np.concatenate([agent.buffer.states[2], obs]))  # n_frames - 1 = 1 stored frame
    state = agent.torch_generator.get_state()
    action = agent.take_action(obs)
    assert agent.local.training                                     # back in training mode after acting
    replay = torch.Generator()
    replay.set_state(state)
    taus = torch.rand(1, 256, 1, generator=replay)                 # the taus take_action drew
    agent.local.eval()
    with torch.no_grad():
        q = agent.local.get_qvalues(torch.from_numpy(stacked)[None], 256, taus)
    assert action == int(q.argmax())
    random_agent = small_agent(seed=9, epsilon=1.0)
    before = random_agent.torch_generator.get_state()
    actions = {random_agent.take_action(obs) for _ in range(60)}
    assert actions == {0, 1, 2}
    assert torch.equal(random_agent.torch_generator.get_state(), before)   # no network call when exploring


def run_script(seed: int) -> tuple[list, list, list]:
    torch.manual_seed(seed + 1000)  # the global generator must not matter
    np.random.seed(seed + 1000)
    agent = small_agent(seed=seed, epsilon=0.5, batch_size=4)
    rng = np.random.default_rng(12)  # the environment's draws, the same for every agent
    actions, losses = [], []
    for epoch in range(3):
        agent.start_epoch(epoch)
        for t in range(8):
            obs = rng.normal(size=4).astype(np.float32)
            action = agent.take_action(obs)
            actions.append(action)
            agent.buffer.add(obs, action, float(rng.normal()), 0.0)
        losses.append(agent.train_step())
        agent.end_epoch()
    return actions, losses, [p.detach().clone() for p in agent.local.parameters()]


def test_same_seed_is_deterministic_and_seeds_differ():
    first, second = run_script(0), run_script(0)
    assert first[0] == second[0] and first[1] == second[1]
    assert all(isinstance(loss, float) for loss in first[1][1:])
    assert all(torch.equal(a, b) for a, b in zip(first[2], second[2], strict=True))
    other = small_agent(seed=1)
    assert not torch.equal(other.local.head1.weight, small_agent(seed=0).local.head1.weight)


# ----------------------------------------------------------------------------------------------
# Bridge


def test_flax_bridge_names_layout_round_trip_and_copies():
    net = irn.IQN(10, 4, layer_size=6, generator=torch.Generator().manual_seed(13))
    params = irn.iqn_params_to_flax(net)
    assert set(params) == {"head1", "cos_embedding", "ff_1", "advantage", "value"}
    assert set(params["head1"]) == set(params["cos_embedding"]) == {"kernel", "bias"}
    for name in irn.NOISY_LAYERS:
        assert set(params[name]) == {"kernel", "bias", "sigma_kernel", "sigma_bias"}
    assert params["head1"]["kernel"].shape == (10, 6) and params["cos_embedding"]["kernel"].shape == (64, 6)
    assert params["advantage"]["sigma_kernel"].shape == (6, 4) and params["value"]["bias"].shape == (1,)
    np.testing.assert_array_equal(params["ff_1"]["kernel"], net.ff_1.weight.detach().numpy().T)
    assert all(v.dtype == np.float32 for layer in params.values() for v in layer.values())
    params["head1"]["kernel"][0, 0] += 1.0                            # a copy, not a view
    assert net.head1.weight[0, 0] != torch.tensor(params["head1"]["kernel"][0, 0])
    other = irn.IQN(10, 4, layer_size=6, generator=torch.Generator().manual_seed(14))
    irn.iqn_params_from_flax(irn.iqn_params_to_flax(net), other)
    for (name, a), b in zip(net.named_parameters(), other.parameters(), strict=True):
        assert torch.equal(a, b), name
    broken = irn.iqn_params_to_flax(net)
    broken["value"]["sigma_kernel"] = broken["value"]["sigma_kernel"].T
    with pytest.raises(ValueError, match="value/sigma_kernel: expected shape"):
        irn.iqn_params_from_flax(broken, other)
    del broken["ff_1"]
    with pytest.raises(ValueError, match="ff_1"):
        irn.iqn_params_from_flax(broken, other)
