"""What notebook 06's core exercise, ``iqn_train_step``, is checked with: the port's whole update.

The learner writes IQN's update from the network's forward: the three forwards of the loss (the
local network on the next states to choose a*, the target network on the next states for the
quantile targets, the local network on the states at the stored actions), the quantile targets
r + gamma^n (1 - done) Z_target(s', a*), the quantile Huber loss over every (prediction, target)
pair, the clipped Adam step and the soft target update. The checker compares the new parameters,
target parameters, optimiser state and loss with ``labcore.agents.iqn.core.train_step`` for the same
key, on a small IQN (the PyTorch parity tests tie that function to the original).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax


@functools.cache
def small_config(n_quantiles: int, n_step: int):
    from labcore.agents.iqn.core import IQNConfig

    # target_update_rate 0.5: a soft update far from a hard copy or none; lr 0.01: a visible step
    return IQNConfig(obs_size=6, n_actions=3, n_frames=2, hidden_size=16, n_quantiles=n_quantiles, n_tau_act=8,
                     n_step=n_step, gamma=0.9, learning_rate=1e-2, target_update_rate=0.5, buffer_size=64,
                     batch_size=8, max_grad_norm=1.0)


def inputs(rng: np.random.Generator) -> tuple:
    from labcore.agents.iqn import core as iqn
    from labcore.agents.iqn.frame_buffer import Batch

    config = small_config(int(rng.choice([4, 8])), int(rng.choice([1, 3])))
    keys = jax.random.split(jax.random.key(int(rng.integers(1 << 30))), 3)
    params, target_params = iqn.init_params(keys[0], config), iqn.init_params(keys[1], config)
    batch_size, features = int(rng.choice([5, 8])), config.in_features  # few shapes: each compiles

    def column(values, dtype=np.float32):
        return np.asarray(values, dtype).reshape(batch_size, 1)

    batch = Batch(
        states=rng.normal(size=(batch_size, features)).astype(np.float32),
        actions=column(rng.integers(0, config.n_actions, batch_size), np.int32),
        rewards=column(rng.normal(size=batch_size)),
        next_states=rng.normal(size=(batch_size, features)).astype(np.float32),
        dones=column(rng.random(batch_size) < 0.3),
        valid=column(rng.random(batch_size) < 0.8),  # some rows straddle an episode start
    )
    return params, target_params, iqn.make_optimizer(config).init(params), batch, keys[2], config


def reference(params, target_params, opt_state, batch, key, config):
    from labcore.agents.iqn import core as iqn

    return iqn.train_step(params, target_params, opt_state, batch, key, config)


def run_jitted(step):
    """The learner's step under jax.jit, config static (as labcore's train_step)."""
    return jax.jit(step, static_argnames=("config",))


def solution(params, target_params, opt_state, batch, key, config):
    from labcore.agents.iqn import core as iqn

    network = iqn.make_network(config)  # network.apply(params, x [B, F], taus [B, N, 1], noise_key) -> [B, N, A]
    draws = iqn.loss_randomness(key, batch.states.shape[0], config)
    rows = jnp.arange(batch.states.shape[0])

    def loss_fn(params):
        # a*: the LOCAL network's best action in s', by its mean over the quantiles (double DQN)
        next_local = network.apply(params, batch.next_states, draws.taus_next, draws.key_next)
        best = next_local.mean(axis=1).argmax(axis=-1)  # [B]
        # Z(s', a*) from the TARGET network: [B, N], one target per target quantile j
        next_target = network.apply(target_params, batch.next_states, draws.taus_target, draws.key_target)
        z_next = next_target[rows, :, best]
        targets = batch.rewards + config.gamma**config.n_step * z_next * (1.0 - batch.dones)  # [B, N]
        # the predicted quantiles at the stored actions: [B, N], one per tau_i of taus_expected
        predicted = network.apply(params, batch.states, draws.taus_expected, draws.key_expected)
        predicted = predicted[rows, :, batch.actions[:, 0]]
        td = targets[:, None, :] - predicted[:, :, None]  # td[b, i, j] = target_j - predicted_i
        huber = jnp.where(jnp.abs(td) <= 1.0, 0.5 * td**2, jnp.abs(td) - 0.5)
        below = (td < 0).astype(jnp.float32)  # pushes predicted_i down where the target is below it
        weight = jnp.abs(draws.taus_expected - below)  # taus_expected [B, N, 1]: tau_i along the rows
        return jnp.mean(weight * huber * batch.valid[:, :, None])

    loss, grads = jax.value_and_grad(loss_fn)(params)
    updates, opt_state = iqn.make_optimizer(config).update(grads, opt_state, params)  # clip, then Adam
    params = optax.apply_updates(params, updates)
    rate = config.target_update_rate  # Polyak: a small step of the target toward the new parameters
    target_params = jax.tree_util.tree_map(lambda t, p: rate * p + (1.0 - rate) * t, target_params, params)
    return params, target_params, opt_state, loss


def _variant(params, target_params, opt_state, batch, key, config, *, target_chooses=False, transposed=False,
             tau_of_targets=False, no_valid=False, no_done=False, hard_copy=False, sum_over_predictions=False):
    from labcore.agents.iqn import core as iqn

    network = iqn.make_network(config)
    draws = iqn.loss_randomness(key, batch.states.shape[0], config)
    rows = jnp.arange(batch.states.shape[0])

    def loss_fn(params):
        next_target = network.apply(target_params, batch.next_states, draws.taus_target, draws.key_target)
        chooser = next_target if target_chooses else network.apply(params, batch.next_states, draws.taus_next,
                                                                    draws.key_next)
        best = chooser.mean(axis=1).argmax(axis=-1)
        not_done = 1.0 if no_done else 1.0 - batch.dones
        targets = batch.rewards + config.gamma**config.n_step * next_target[rows, :, best] * not_done
        predicted = network.apply(params, batch.states, draws.taus_expected, draws.key_expected)[rows, :, batch.actions[:, 0]]
        td = predicted[:, :, None] - targets[:, None, :] if transposed else targets[:, None, :] - predicted[:, :, None]
        huber = jnp.where(jnp.abs(td) <= 1.0, 0.5 * td**2, jnp.abs(td) - 0.5)
        taus = draws.taus_target.transpose(0, 2, 1) if tau_of_targets else draws.taus_expected
        weighted = jnp.abs(taus - (td < 0)) * huber * (1.0 if no_valid else batch.valid[:, :, None])
        return weighted.sum(axis=1).mean() if sum_over_predictions else weighted.mean()

    loss, grads = jax.value_and_grad(loss_fn)(params)
    updates, opt_state = iqn.make_optimizer(config).update(grads, opt_state, params)
    params = optax.apply_updates(params, updates)
    rate = 1.0 if hard_copy else config.target_update_rate
    return params, jax.tree_util.tree_map(lambda t, p: rate * p + (1.0 - rate) * t, target_params, params), opt_state, loss


def _mistake(**flaw):
    return functools.wraps(solution)(functools.partial(_variant, **flaw))


MISTAKES = (
    ("a* chosen by the target network: the port (and double DQN) chooses with the local network",
     _mistake(target_chooses=True)),
    ("td the wrong way round (predicted - target): every asymmetric weight lands on the other side",
     _mistake(transposed=True)),
    ("the weights use the targets' taus: each prediction i must be weighted by its own tau_i",
     _mistake(tau_of_targets=True)),
    ("valid ignored: rows whose stacked frames straddle two episodes are learned from", _mistake(no_valid=True)),
    ("no (1 - done): a terminal transition bootstraps from the next episode", _mistake(no_done=True)),
    ("a hard copy of the parameters into the target after the step, not the soft update", _mistake(hard_copy=True)),
    ("summed over the predicted quantiles i (the IQN paper's form, N times the port's mean of all N x N terms)",
     _mistake(sum_over_predictions=True)),
)
