"""DQN: epsilon-greedy acting and the jitted update. ``DQNConfig`` is defined in
``labcore.agents.dqn.config`` (which imports no JAX) and re-exported here.

Everything here is a pure function of explicit state, so the same code serves
a host loop over gymnasium environments and a fully jitted ``lax.scan`` loop
over gymnax environments:

    config = DQNConfig(env_id="CartPole-v1")
    network = make_q_network(config.network, num_actions, config.hidden_sizes)
    optimizer = make_optimizer(config)
    state = init_train_state(config, network, optimizer, example_obs, key)
    actions = select_action(network, state.params, obs_batch, epsilon, key)   # epsilon_greedy(q_values, ...)
    state, metrics = update(state, batch)           # update = make_update(config, network, optimizer)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import haiku as hk
import jax
import jax.flatten_util
import jax.numpy as jnp
import optax
from flax import struct

from labcore import losses
from labcore.agents.dqn.config import OPTIMIZERS, REPLAY_STORAGES, TD_LOSSES, DQNConfig  # noqa: F401 (core.DQNConfig, as before)
from labcore.nets.q_networks import epsilon_greedy


class Transition(NamedTuple):
    """One step of experience. Shapes for a single transition (a batch adds a leading [B])."""

    obs: jax.Array  # [*obs_shape]
    action: jax.Array  # [] int32
    reward: jax.Array  # [] float32
    next_obs: jax.Array  # [*obs_shape]
    terminated: jax.Array  # [] bool: the episode ended in a terminal state (no bootstrap)


@struct.dataclass
class TrainState:
    """Everything an update changes: a pytree, so it can be jitted, scanned and checkpointed."""

    params: hk.Params
    target_params: hk.Params
    opt_state: optax.OptState
    update_count: jax.Array  # [] int32, updates applied so far


def linear_epsilon(step: jax.Array | int, config: DQNConfig) -> jax.Array:
    """Epsilon at an agent step: linear from start to end over exploration_fraction * total_steps, then flat."""
    duration = max(1, int(config.exploration_fraction * config.total_steps))
    fraction = jnp.clip(jnp.asarray(step, jnp.float32) / duration, 0.0, 1.0)
    return config.epsilon_start + fraction * (config.epsilon_end - config.epsilon_start)


def make_optimizer(config: DQNConfig) -> optax.GradientTransformation:
    """Adam (or the Nature paper's centred RMSProp), after optional global-norm clipping."""
    if config.optimizer == "adam":
        base = optax.adam(config.learning_rate, eps=config.adam_eps)
    else:  # the Nature DQN's RMSProp: centred, decay 0.95, eps 0.01
        base = optax.rmsprop(config.learning_rate, decay=0.95, eps=0.01, centered=True)
    if config.max_grad_norm is None:
        return base
    return optax.chain(optax.clip_by_global_norm(config.max_grad_norm), base)


def init_train_state(
    config: DQNConfig,
    network: hk.Transformed,
    optimizer: optax.GradientTransformation,
    example_obs: jax.Array,
    key: jax.Array,
) -> TrainState:
    """Fresh parameters, an identical target copy and the optimiser state.

    example_obs: one observation [*obs_shape] (a batch axis is added here).
    """
    params = network.init(key, example_obs[None])
    return TrainState(
        params=params,
        # A copy, not the same arrays: a jitted update that donates its input state would
        # otherwise be handed one buffer twice.
        target_params=jax.tree_util.tree_map(jnp.copy, params),
        opt_state=optimizer.init(params),
        update_count=jnp.int32(0),
    )


def select_action(
    network: hk.Transformed, params: hk.Params, obs: jax.Array, epsilon: jax.Array | float, key: jax.Array
) -> jax.Array:
    """Epsilon-greedy on the network's Q-values. obs: [B, *obs_shape] -> actions [B] int32."""
    return epsilon_greedy(network.apply(params, None, obs), epsilon, key)


def make_loss(config: DQNConfig, network: hk.Transformed) -> Callable[..., tuple[jax.Array, dict]]:
    """``loss(params, target_params, batch) -> (mean TD loss, aux)`` for a batch of Transitions.

    The TD loss is 0.5 * td^2 ('mse') or Huber ('huber', gradient = td clipped to +-delta).
    """

    def loss_fn(params: hk.Params, target_params: hk.Params, batch: Transition):
        q = network.apply(params, None, batch.obs)  # [B, A]
        next_q_target = network.apply(target_params, None, batch.next_obs)  # [B, A]
        discount = config.gamma * (1.0 - batch.terminated.astype(jnp.float32))
        if config.double_dqn:
            next_q_online = network.apply(params, None, batch.next_obs)
            target = jax.vmap(losses.double_q_learning_target)(batch.reward, discount, next_q_target, next_q_online)
        else:
            target = jax.vmap(losses.q_learning_target)(batch.reward, discount, next_q_target)
        td = jax.vmap(losses.td_error)(q, batch.action, target)
        if config.td_loss == "huber":
            loss = jnp.mean(losses.huber_loss(td, config.huber_delta))
        else:
            loss = jnp.mean(0.5 * td**2)
        return loss, {"q_mean": jnp.mean(q), "td_abs_mean": jnp.mean(jnp.abs(td))}

    return loss_fn


def make_update(
    config: DQNConfig,
    network: hk.Transformed,
    optimizer: optax.GradientTransformation,
    axis_name: str | None = None,
) -> Callable[[TrainState, Transition], tuple[TrainState, dict[str, jax.Array]]]:
    """A pure ``update(state, batch) -> (state, metrics)``: one gradient step, then the target update.

    The target network moves every ``target_update_frequency / train_frequency`` updates
    (so every ``target_update_frequency`` agent steps): a hard copy when target_update_rate == 1,
    else Polyak averaging ``target <- rate * online + (1 - rate) * target`` with that rate. Jit it
    at the call site.

    axis_name: for data parallelism (``jax.pmap`` / ``jax.shard_map``, see ``labcore.agents.dqn.data_parallel``):
    each replica gets a shard of the batch, and the gradients (and reported metrics) are averaged
    over this named axis with ``lax.pmean`` before the optimiser step, so every replica applies
    the same update: the one a single device would compute on the whole batch.
    """
    loss_fn = make_loss(config, network)
    updates_per_target_update = max(1, config.target_update_frequency // config.train_frequency)

    def update(state: TrainState, batch: Transition):
        (loss, aux), grads = jax.value_and_grad(loss_fn, has_aux=True)(state.params, state.target_params, batch)
        if axis_name is not None:
            # One all-reduce of one flat vector rather than one per leaf: across processes each
            # collective has a fixed latency (gloo on loopback: about 2 ms each on the 2-core reference machine).
            flat, unflatten = jax.flatten_util.ravel_pytree((loss, aux, grads))
            (loss, aux, grads) = unflatten(jax.lax.pmean(flat, axis_name))
        updates, opt_state = optimizer.update(grads, state.opt_state, state.params)
        params = optax.apply_updates(state.params, updates)
        update_count = state.update_count + 1
        # A rate of 1 is a hard copy: pass the online parameters straight through rather than
        # computing 1 * online + 0 * target (the same values, one pass over 1.7M floats less).
        rate = config.target_update_rate
        moved = params if rate == 1.0 else optax.incremental_update(params, state.target_params, rate)
        target_params = optax.periodic_update(moved, state.target_params, update_count, updates_per_target_update)
        metrics = {"loss": loss, "grad_norm": optax.tree.norm(grads), **aux}
        return TrainState(params, target_params, opt_state, update_count), metrics

    return update
