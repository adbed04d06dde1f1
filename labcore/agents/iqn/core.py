"""Multi-agent iRainbow (IQN + noisy nets + double DQN + frame stacking), a port of sorrel's learner.

This module is the agent: its config (``IQNConfig``, defined in ``labcore.agents.iqn.config``, which
imports no JAX), its state, network and optimiser, acting, the loss and the train step. Its replay
buffer is ``labcore.agents.iqn.frame_buffer``, stored into and sampled from through
``labcore.replay.Buffer``'s interface (``make_buffer``); the experiment that runs many agents in a world is
``labcore.agents.iqn.run``.

Every function is pure (state in, state out; PRNG keys passed explicitly), so one agent's code
serves all the agents of a world at once under ``jax.vmap`` over a leading agent axis:

    config = IQNConfig()                                              # validated, hashable (jit-static)
    agents = init_agents(jax.random.key(0), config, n_agents=5)       # AgentState, leaves [5, ...]
    stacked = jax.vmap(functools.partial(frame_buffer.stacked_state, config=config))(
        agents.buffer, obs)                                                                  # [5, F]
    actions = jax.vmap(functools.partial(select_action, config=config))(
        agents.params, stacked, agents.epsilon, jax.random.split(key, 5))                    # [5] int32
    agents = jax.vmap(functools.partial(remember, config=config))(agents, obs, actions, rewards, dones)
    agents, losses = jax.vmap(functools.partial(learn, config=config))(agents, jax.random.split(key, 5))

F = n_frames * obs_size: an agent's network sees the last n_frames - 1 stored frames plus the
current observation, flattened (``frame_buffer.stacked_state``). The epoch rhythm of the original
is ``start_epoch`` (add_empty + hard target sync every target_sync_epochs epochs), the turns (act,
remember), one ``learn`` per agent, ``end_epoch`` (epsilon decay).

The faithful port reproduces the original's quirks (labcore's PyTorch reference,
``labcore.torch_ref.irainbow``, is tested against it step by step):

* Only one-step rewards are stored, yet the target discounts by gamma ** n_step:
  Q_target = r + gamma ** n_step * Z_target(s', a*) * (1 - done), s' one row ahead.
* The targets carry no stop_gradient. Harmless: they depend on the target parameters and on the
  local net only through an argmax, and ``jax.value_and_grad`` differentiates ``params`` alone.
* Both networks run in training mode (fresh weight noise) inside the loss, as the original calls
  them; acting uses the mean weights (eval mode).
* The buffer samples slot positions 0 .. size - n_frames - 2 as absolute positions, without
  regard to the write pointer (after a wrap-around a window may straddle old and new rows), and
  ``add_empty`` skips n_frames - 1 rows without clearing them (``frame_buffer``).

``IQNConfig(fixed=True)`` is the FLAGGED "fixed" variant, off by default: the batch carries true
n-step returns sum_k gamma^k r_{t+k} (stopping at a done) with the next state n_step rows ahead
(so the sample range shrinks by n_step - 1 rows), and the targets are wrapped in
``jax.lax.stop_gradient``. Everything else is identical.

Devices: nothing here moves data behind your back. ``init_agent(..., device=d)`` (and
``init_agents``) place the whole agent state with ``jax.device_put``; after that every function
keeps its outputs where its inputs live. Feed host observations in with ``jax.device_put`` once
per turn (all agents at once), not once per agent.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax
from flax import struct

from labcore import losses, replay
from labcore.agents.iqn import frame_buffer as fb
from labcore.agents.iqn.config import IQNConfig  # core.IQNConfig, as before
from labcore.agents.iqn.frame_buffer import Batch, FrameBuffer
from labcore.nets.functional import Functional
from labcore.nets.iqn import make_iqn, sample_taus

Params = Any  # a Flax parameter pytree: {'head1': {'kernel', 'bias'}, ..., 'value': {...}}

# Which networks are noisy (training mode) inside the loss. The original puts both in training
# mode for the train step, so the double-DQN argmax, the target quantiles and the expected
# quantiles each see their own fresh weight noise (three independent draws).
LOSS_LOCAL_NOISY = True
LOSS_TARGET_NOISY = True


# ----------------------------------------------------------------------------------------------
# Agent state, network, optimiser.


@struct.dataclass
class AgentState:
    """One agent (or, with a leading axis on every leaf, a stack of agents for jax.vmap)."""

    params: Params
    target_params: Params
    opt_state: optax.OptState
    buffer: FrameBuffer
    epsilon: jax.Array  # [] f32


@functools.cache  # one graph definition per config: the loss's three forwards and acting trace with it
def make_network(config: IQNConfig) -> Functional:
    """The IQN both the local and the target parameters belong to (input width n_frames * obs_size),
    as pure functions of its parameter dict (``labcore.nets.iqn.make_iqn``)."""
    return make_iqn(config.in_features, config.n_actions, config.hidden_size)


@functools.cache  # one bundle per config, as the network
def make_buffer(config: IQNConfig) -> replay.Buffer:
    """The agent's replay buffer as ``labcore.replay.Buffer``'s pure functions (``frame_buffer.replay_buffer``)."""
    return fb.replay_buffer(config)


def make_optimizer(config: IQNConfig) -> optax.GradientTransformation:
    """Clip the global gradient norm to max_grad_norm (torch's clip_grad_norm_), then Adam(learning_rate)."""
    return optax.chain(optax.clip_by_global_norm(config.max_grad_norm), optax.adam(config.learning_rate))


@functools.partial(jax.jit, static_argnames=("config",))
def init_params(key: jax.Array, config: IQNConfig) -> Params:
    """Fresh network parameters, a plain dict (see ``labcore.nets.iqn``)."""
    return make_network(config).init(key)


@functools.partial(jax.jit, static_argnames=("config",))
def _fresh_agent(key: jax.Array, config: IQNConfig) -> AgentState:
    params = init_params(key, config)
    return AgentState(
        params=params,
        target_params=hard_update(params),
        opt_state=make_optimizer(config).init(params),
        buffer=make_buffer(config).init(fb.example_step(config)),
        epsilon=jnp.float32(config.epsilon_start),
    )


def init_agent(key: jax.Array, config: IQNConfig, device: jax.Device | None = None) -> AgentState:
    """A fresh agent: target == local (the original builds both from one seed), empty buffer,
    epsilon = epsilon_start. device: where to place the whole state (jax.device_put), or None to
    leave it on JAX's default device."""
    agent = _fresh_agent(key, config)
    return agent if device is None else jax.device_put(agent, device)


@functools.partial(jax.jit, static_argnames=("config", "n_agents"))
def _fresh_agents(key: jax.Array, config: IQNConfig, n_agents: int) -> AgentState:
    return jax.vmap(functools.partial(_fresh_agent, config=config))(jax.random.split(key, n_agents))


def init_agents(key: jax.Array, config: IQNConfig, n_agents: int, device: jax.Device | None = None) -> AgentState:
    """n_agents independent agents stacked on a leading axis (leaves [n_agents, ...]): agent i is
    ``init_agent(jax.random.split(key, n_agents)[i], config)``. device as in init_agent."""
    if not isinstance(n_agents, int) or isinstance(n_agents, bool) or n_agents < 1:
        raise ValueError(f"n_agents must be an integer >= 1, got {n_agents!r}")
    agents = _fresh_agents(key, config, n_agents)
    return agents if device is None else jax.device_put(agents, device)


def stack_agents(agents: Sequence[AgentState]) -> AgentState:
    """Stack separately built agents into one AgentState with a leading agent axis (for jax.vmap)."""
    if not agents:
        raise ValueError("stack_agents needs at least one agent")
    return jax.tree_util.tree_map(lambda *leaves: jnp.stack(leaves), *agents)


def unstack_agent(agents: AgentState, i: int) -> AgentState:
    """Agent i of a stacked AgentState."""
    return jax.tree_util.tree_map(lambda leaf: leaf[i], agents)


def _path_name(path: tuple) -> str:
    return "/".join(str(getattr(part, "key", getattr(part, "idx", part))) for part in path)


def check_params_shape(params: Params, config: IQNConfig, n_agents: int | None = None) -> None:
    """Raise ValueError unless params (e.g. restored from a checkpoint) fit ``config``'s network.

    n_agents: expect a leading agent axis of this size on every leaf (stacked agents). The
    message names the first offending leaf and both shapes (or the missing / unexpected leaf).
    """
    expected = jax.eval_shape(lambda: init_params(jax.random.key(0), config))
    lead = () if n_agents is None else (n_agents,)
    flatten = jax.tree_util.tree_flatten_with_path
    want = {_path_name(p): (lead + tuple(leaf.shape), leaf.dtype) for p, leaf in flatten(expected)[0]}
    have = {_path_name(p): (tuple(jnp.shape(leaf)), jnp.result_type(leaf)) for p, leaf in flatten(params)[0]}
    for name, (shape, dtype) in want.items():
        if name not in have:
            raise ValueError(f"params are missing leaf {name!r} (expected shape {shape}) for {config}")
        if have[name][0] != shape:
            raise ValueError(f"params leaf {name!r} has shape {have[name][0]}, but the config expects {shape}")
        if have[name][1] != dtype:
            raise ValueError(f"params leaf {name!r} has dtype {have[name][1]}, but the config expects {dtype}")
    extra = sorted(set(have) - set(want))
    if extra:
        raise ValueError(f"params have unexpected leaves {extra} (not in the network for {config})")


# ----------------------------------------------------------------------------------------------
# Acting.


def _check_stacked(stacked: jax.Array, config: IQNConfig) -> None:
    # A wrong-width state would otherwise broadcast or fail deep inside the network with an
    # unrelated message.
    if tuple(stacked.shape) != (config.in_features,):
        raise ValueError(
            f"stacked state must have shape [n_frames * obs_size] = ({config.n_frames} * {config.obs_size} = "
            f"{config.in_features},), got {tuple(stacked.shape)}"
        )


def greedy_action(params: Params, stacked: jax.Array, taus: jax.Array, config: IQNConfig) -> jax.Array:
    """argmax_a of Q(stacked, a) with the mean weights (eval mode) and the given taus [1, n_tau, 1]: i32[]."""
    _check_stacked(stacked, config)
    q = make_network(config).apply(params, stacked[None], taus, method="get_qvalues")
    return jnp.argmax(q[0]).astype(jnp.int32)


@functools.partial(jax.jit, static_argnames=("config",))
def select_action(params: Params, stacked: jax.Array, epsilon: jax.Array, key: jax.Array,
                  config: IQNConfig) -> jax.Array:
    """Epsilon-greedy as the original: greedy when u > epsilon (u ~ U(0, 1)), else uniform: i32[].

    stacked [n_frames * obs_size] (checked at trace time); the greedy action uses eval mode and
    n_tau_act fresh taus. vmap it over a leading agent axis (params, stacked, epsilon, key).
    """
    _check_stacked(stacked, config)
    explore_key, random_key, tau_key = jax.random.split(key, 3)
    greedy = greedy_action(params, stacked, sample_taus(tau_key, 1, config.n_tau_act), config)
    random_action = jax.random.randint(random_key, (), 0, config.n_actions, jnp.int32)
    return jnp.where(jax.random.uniform(explore_key) > epsilon, greedy, random_action)


@functools.partial(jax.jit, static_argnames=("config",))
def act(agent: AgentState, obs: jax.Array, key: jax.Array, config: IQNConfig) -> jax.Array:
    """select_action on the agent's own stacked state (its buffer's frames + obs [obs_size]): i32[]."""
    return select_action(agent.params, fb.stacked_state(agent.buffer, obs, config), agent.epsilon, key, config)


@functools.partial(jax.jit, static_argnames=("config",))
def remember(agent: AgentState, obs: jax.Array, action: jax.Array, reward: jax.Array, done: jax.Array,
             config: IQNConfig) -> AgentState:
    """Store one step (the observation acted on, not the stack) in the agent's buffer."""
    fb.check_obs(obs, config)
    step = fb.Step(*(jnp.asarray(leaf)[None] for leaf in (obs, action, reward, done)))  # leaves [1, ...]
    return agent.replace(buffer=make_buffer(config).add(agent.buffer, step, jnp.zeros(1, bool)))


# ----------------------------------------------------------------------------------------------
# Learning.


class LossRandomness(NamedTuple):
    """Everything random in one loss evaluation: the taus [B, N, 1] and the noise key of each of
    the three forwards (local on next states, target on next states, local on states)."""

    taus_next: jax.Array
    taus_target: jax.Array
    taus_expected: jax.Array
    key_next: jax.Array
    key_target: jax.Array
    key_expected: jax.Array


def loss_randomness(key: jax.Array, batch_size: int, config: IQNConfig) -> LossRandomness:
    """Split key into the taus and noise keys ``loss_fn`` uses (public so tests can replay them)."""
    keys = jax.random.split(key, 6)
    taus = [sample_taus(k, batch_size, config.n_quantiles) for k in keys[:3]]
    return LossRandomness(*taus, *keys[3:])


def _check_batch(batch: Batch, config: IQNConfig) -> None:
    B = batch.states.shape[0]
    expected = {"states": (B, config.in_features), "next_states": (B, config.in_features), "actions": (B, 1),
                "rewards": (B, 1), "dones": (B, 1), "valid": (B, 1)}
    for name, shape in expected.items():
        got = tuple(getattr(batch, name).shape)
        if got != shape:
            raise ValueError(
                f"batch.{name} must have shape {shape} (F = n_frames * obs_size = {config.in_features}), got {got}")


def _forward(params: Params, x: jax.Array, taus: jax.Array, key: jax.Array, noisy: bool,
             config: IQNConfig) -> tuple[jax.Array, dict]:
    """quantiles [B, N, A] and the noise draws used ({} in eval mode: the mean weights)."""
    model = make_network(config).bind(params)
    if not noisy:
        return model(x, taus), {}
    # The draws are a function of the key alone; a training step discards them, and XLA with them.
    return model(x, taus, key), model.noise_draws(key)


def quantile_targets(rewards: jax.Array, dones: jax.Array, next_quantiles: jax.Array, config: IQNConfig) -> jax.Array:
    """r + gamma ** n_step * Z(s', a*) * (1 - done): rewards, dones [B, 1], next_quantiles [B, 1, N] -> [B, 1, N].

    Faithful: one-step rewards with the n-step discount. Fixed: the batch already holds n-step
    returns, and the result is a constant for the gradient (stop_gradient).
    """
    targets = rewards[:, :, None] + config.gamma**config.n_step * next_quantiles * (1.0 - dones[:, :, None])
    return jax.lax.stop_gradient(targets) if config.fixed else targets


def loss_and_draws(params: Params, target_params: Params, batch: Batch, randomness: LossRandomness,
                   config: IQNConfig) -> tuple[jax.Array, dict[str, dict]]:
    """The quantile-Huber loss (a scalar) and the noise draws of its three forwards.

    1. a* = argmax_a mean_tau local(next_states)            (double DQN)
    2. Z_next = target(next_states) at a*, as [B, 1, N]; targets = quantile_targets(...)
    3. Z_expected = local(states) at the stored actions: [B, N, 1]
    4. td = targets - Z_expected [B, N, N]; loss = mean(|tau - 1{td < 0}| * huber_1(td) * valid)
    draws: {'next_local', 'next_target', 'expected'} -> that forward's noise draws (IQN.noise_draws).
    """
    _check_batch(batch, config)
    B = batch.states.shape[0]
    N = randomness.taus_expected.shape[1]
    next_local, draws_next = _forward(params, batch.next_states, randomness.taus_next, randomness.key_next,
                                      LOSS_LOCAL_NOISY, config)
    best = jnp.argmax(next_local.mean(axis=1), axis=-1)  # [B]; an argmax: no gradient flows through it
    next_target, draws_target = _forward(target_params, batch.next_states, randomness.taus_target,
                                         randomness.key_target, LOSS_TARGET_NOISY, config)
    next_quantiles = jnp.take_along_axis(next_target, jnp.broadcast_to(best[:, None, None], (B, N, 1)), axis=2)
    targets = quantile_targets(batch.rewards, batch.dones, next_quantiles.transpose(0, 2, 1), config)  # [B, 1, N]
    expected_all, draws_expected = _forward(params, batch.states, randomness.taus_expected, randomness.key_expected,
                                            LOSS_LOCAL_NOISY, config)
    expected = jnp.take_along_axis(expected_all, jnp.broadcast_to(batch.actions[:, None, :], (B, N, 1)), axis=2)
    td = targets - expected  # [B, N, N]: td[b, i, j] = target_j - expected_i
    huber = losses.huber_loss(td, 1.0) * batch.valid[:, :, None]
    weight = jnp.abs(randomness.taus_expected - (jax.lax.stop_gradient(td) < 0).astype(jnp.float32))
    loss = jnp.mean(weight * huber)
    return loss, {"next_local": draws_next, "next_target": draws_target, "expected": draws_expected}


def loss_fn(params: Params, target_params: Params, batch: Batch, key: jax.Array, config: IQNConfig) -> jax.Array:
    """The loss as a function of the local params (what jax.value_and_grad differentiates): scalar.

    key provides the taus and the noise of the three forwards (``loss_randomness``).
    """
    randomness = loss_randomness(key, batch.states.shape[0], config)
    return loss_and_draws(params, target_params, batch, randomness, config)[0]


def soft_update(target: Params, local: Params, rate: float) -> Params:
    """target <- rate * local + (1 - rate) * target, leaf by leaf (Polyak averaging; rate 1 copies)."""
    return jax.tree_util.tree_map(lambda t, p: rate * p + (1.0 - rate) * t, target, local)


def hard_update(local: Params) -> Params:
    """The new target: an exact copy of local (arrays are immutable, so sharing them is a copy)."""
    return jax.tree_util.tree_map(lambda p: p, local)


@functools.partial(jax.jit, static_argnames=("config",))
def train_step(params: Params, target_params: Params, opt_state: optax.OptState, batch: Batch, key: jax.Array,
               config: IQNConfig) -> tuple[Params, Params, optax.OptState, jax.Array]:
    """One update: gradient of loss_fn, clip to max_grad_norm, Adam, then the soft target update
    at target_update_rate.

    Returns (params, target_params, opt_state, loss before the step). The batch's shapes are
    checked at trace time. vmap it over a leading agent axis.
    """
    loss, grads = jax.value_and_grad(loss_fn)(params, target_params, batch, key, config)
    updates, opt_state = make_optimizer(config).update(grads, opt_state, params)
    params = optax.apply_updates(params, updates)
    return params, soft_update(target_params, params, config.target_update_rate), opt_state, loss


@functools.partial(jax.jit, static_argnames=("config",))
def learn(agent: AgentState, key: jax.Array, config: IQNConfig) -> tuple[AgentState, jax.Array]:
    """The agent's end-of-epoch train step: sample its buffer, train_step, if ``can_train``.

    Returns (agent, loss); the loss is NaN and the agent unchanged when the buffer is too small
    (the original returns None). Under vmap every agent decides for itself.
    """
    sample_key, step_key = jax.random.split(key)
    buffer = make_buffer(config)
    batch = buffer.sample(agent.buffer, sample_key)

    def train(agent: AgentState) -> tuple[AgentState, jax.Array]:
        params, target, opt_state, loss = train_step(agent.params, agent.target_params, agent.opt_state, batch,
                                                     step_key, config)
        return agent.replace(params=params, target_params=target, opt_state=opt_state), loss

    def skip(agent: AgentState) -> tuple[AgentState, jax.Array]:
        return agent, jnp.float32(jnp.nan)

    return jax.lax.cond(buffer.can_sample(agent.buffer), train, skip, agent)


def start_epoch(agent: AgentState, epoch: jax.Array | int, config: IQNConfig) -> AgentState:
    """add_empty, and copy local -> target when epoch % target_sync_epochs == 0 (epoch 0 included)."""
    sync = jnp.asarray(epoch) % config.target_sync_epochs == 0
    target = jax.tree_util.tree_map(lambda p, t: jnp.where(sync, p, t), agent.params, agent.target_params)
    return agent.replace(buffer=fb.buffer_add_empty(agent.buffer, config), target_params=target)


def end_epoch(agent: AgentState, config: IQNConfig) -> AgentState:
    """epsilon <- max(epsilon * (1 - epsilon_decay), epsilon_end)."""
    epsilon = jnp.maximum(agent.epsilon * (1.0 - config.epsilon_decay), config.epsilon_end)
    return agent.replace(epsilon=epsilon.astype(jnp.float32))
