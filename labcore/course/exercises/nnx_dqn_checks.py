"""Notebook 02's core exercise, ``nnx_dqn_fit``: a DQN Q-network written in NNX, its weights copied from a
PyTorch ``nn.Sequential``, and its train step (``nnx.value_and_grad``, ``nnx.Optimizer``) run a few times.

The reference is written without NNX, on plain arrays: the same network as matrix products, labcore's
Huber loss (``labcore.losses.huber_loss``, the Nature DQN's) and optax's Adam, so that an answer is
checked against the arithmetic, not against another NNX program that could share its mistake.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from labcore import losses


def q_network_inputs(rng: np.random.Generator) -> tuple:
    """(state_dict of a PyTorch Q-network nn.Sequential(Linear, ReLU, Linear, ReLU, Linear), obs [B, D],
    actions [B], targets [B], learning_rate, steps). Neighbouring sizes differ, so a kernel left [out, in]
    has the wrong shape; targets spread past the Huber loss's quadratic part."""
    import torch

    obs_size, first, second, num_actions = (int(n) for n in rng.choice(np.arange(2, 12), 4, replace=False))
    model = torch.nn.Sequential(torch.nn.Linear(obs_size, first), torch.nn.ReLU(), torch.nn.Linear(first, second),
                                torch.nn.ReLU(), torch.nn.Linear(second, num_actions))
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.copy_(torch.from_numpy(rng.normal(scale=0.5, size=tuple(parameter.shape)).astype(np.float32)))
    batch = int(rng.integers(4, 33))
    obs = jnp.asarray(rng.normal(size=(batch, obs_size)), jnp.float32)
    actions = jnp.asarray(rng.integers(0, num_actions, batch), jnp.int32)
    targets = jnp.asarray(rng.normal(scale=3.0, size=batch), jnp.float32)
    return model.state_dict(), obs, actions, targets, float(rng.choice([1e-3, 1e-2])), int(rng.integers(2, 6))


def _layers(state_dict) -> list[tuple[np.ndarray, np.ndarray]]:
    """(kernel [in, out], bias [out]) of each Linear, in the Sequential's order."""
    indices = sorted({int(name.split(".")[0]) for name in state_dict})
    return [(state_dict[f"{i}.weight"].numpy().T, state_dict[f"{i}.bias"].numpy()) for i in indices]


def q_network_reference(state_dict, obs, actions, targets, learning_rate, steps):
    """(losses [steps], each measured before its step; Q-values [B, A] after the last step)."""
    params = [(jnp.asarray(kernel), jnp.asarray(bias)) for kernel, bias in _layers(state_dict)]

    def q_values(params, obs):
        x = obs
        for i, (kernel, bias) in enumerate(params):
            x = jnp.dot(x, kernel, precision=jax.lax.Precision.HIGHEST) + bias
            x = jax.nn.relu(x) if i < len(params) - 1 else x
        return x

    def loss(params):
        q_taken = jnp.take_along_axis(q_values(params, obs), actions[:, None], axis=-1)[:, 0]
        return jnp.mean(losses.huber_loss(q_taken - targets))

    adam = optax.adam(learning_rate)
    opt_state = adam.init(params)
    history = []
    for _ in range(steps):
        value, grads = jax.value_and_grad(loss)(params)
        updates, opt_state = adam.update(grads, opt_state, params)
        params = optax.apply_updates(params, updates)
        history.append(value)
    return jnp.stack(history), q_values(params, obs)


# ----------------------------------------------------------------------------------------------
# A worked answer, as a learner writes it, and the classic mistakes.


class QNetwork(nnx.Module):
    """obs [B, D] -> Q-values [B, A]: Linear, ReLU, Linear, ReLU, Linear."""

    def __init__(self, obs_size: int, hidden: tuple[int, int], num_actions: int, *, rngs: nnx.Rngs):
        self.hidden_0 = nnx.Linear(obs_size, hidden[0], rngs=rngs)
        self.hidden_1 = nnx.Linear(hidden[0], hidden[1], rngs=rngs)
        self.q_values = nnx.Linear(hidden[1], num_actions, rngs=rngs)

    def __call__(self, obs):
        return self.q_values(nnx.relu(self.hidden_1(nnx.relu(self.hidden_0(obs)))))


def _copied_network(state_dict, copy_biases: bool = True) -> QNetwork:
    weights = [state_dict[f"{i}.weight"].numpy() for i in (0, 2, 4)]  # PyTorch: [out, in]
    model = QNetwork(weights[0].shape[1], (weights[0].shape[0], weights[1].shape[0]), weights[2].shape[0],
                     rngs=nnx.Rngs(params=0))
    for layer, index, weight in zip((model.hidden_0, model.hidden_1, model.q_values), (0, 2, 4), weights, strict=True):
        layer.kernel[...] = jnp.asarray(weight.T)  # Flax: [in, out]
        if copy_biases:
            layer.bias[...] = jnp.asarray(state_dict[f"{index}.bias"].numpy())
    return model


def _fit(state_dict, obs, actions, targets, learning_rate, steps, *, copy_biases=True, greedy=False, huber=True,
         apply_updates=True, fresh_optimizer=False):
    model = _copied_network(state_dict, copy_biases)

    def dqn_loss(model):
        q = model(obs)
        chosen = q.max(axis=-1) if greedy else q[jnp.arange(q.shape[0]), actions]
        error = chosen - targets
        return jnp.mean(losses.huber_loss(error)) if huber else jnp.mean(0.5 * error**2)

    optimizer = nnx.Optimizer(model, optax.adam(learning_rate), wrt=nnx.Param)

    @nnx.jit
    def train_step(model, optimizer):
        loss, grads = nnx.value_and_grad(dqn_loss)(model)
        if apply_updates:
            optimizer.update(model, grads)
        return loss

    history = []
    for _ in range(steps):
        if fresh_optimizer:
            optimizer = nnx.Optimizer(model, optax.adam(learning_rate), wrt=nnx.Param)
        history.append(train_step(model, optimizer))
    return jnp.stack(history), model(obs)


def nnx_dqn_fit(state_dict, obs, actions, targets, learning_rate, steps):
    class QNetwork(nnx.Module):  # obs [B, D] -> Q-values [B, A]
        def __init__(self, sizes, *, rngs):  # sizes [D, H1, H2, A]
            self.hidden_0 = nnx.Linear(sizes[0], sizes[1], rngs=rngs)
            self.hidden_1 = nnx.Linear(sizes[1], sizes[2], rngs=rngs)
            self.q_values = nnx.Linear(sizes[2], sizes[3], rngs=rngs)

        def __call__(self, obs):
            return self.q_values(nnx.relu(self.hidden_1(nnx.relu(self.hidden_0(obs)))))

    weights = [state_dict[f"{i}.weight"].numpy() for i in (0, 2, 4)]  # PyTorch's [out, in]
    model = QNetwork([weights[0].shape[1]] + [w.shape[0] for w in weights], rngs=nnx.Rngs(params=0))
    for layer, index in zip((model.hidden_0, model.hidden_1, model.q_values), (0, 2, 4)):
        layer.kernel[...] = jnp.asarray(state_dict[f"{index}.weight"].numpy().T)  # Flax's [in, out]
        layer.bias[...] = jnp.asarray(state_dict[f"{index}.bias"].numpy())
    optimizer = nnx.Optimizer(model, optax.adam(learning_rate), wrt=nnx.Param)

    def dqn_loss(model):
        q = model(obs)
        q_taken = q[jnp.arange(q.shape[0]), actions]  # the action taken, not the greedy one
        return losses.huber_loss(q_taken - targets).mean()

    @nnx.jit
    def train_step(model, optimizer):
        loss, grads = nnx.value_and_grad(dqn_loss)(model)  # with respect to the model's nnx.Params
        optimizer.update(model, grads)  # Adam's step, in place
        return loss

    step_losses = [train_step(model, optimizer) for _ in range(steps)]
    return jnp.stack(step_losses), model(obs)


def fit_without_biases(*args):
    return _fit(*args, copy_biases=False)


def fit_greedy_action(*args):
    return _fit(*args, greedy=True)


def fit_squared_error(*args):
    return _fit(*args, huber=False)


def fit_never_stepping(*args):
    return _fit(*args, apply_updates=False)


def fit_optimizer_restarted(*args):
    return _fit(*args, fresh_optimizer=True)
