"""Notebook 02's core exercise, ``nnx_dqn_train_step``: DQN's update written the NNX way, an online and a
target Q-network as NNX modules, the bootstrapped target with its terminal mask, the Huber loss,
``nnx.value_and_grad`` and ``nnx.Optimizer``.

The checker builds both networks from one PyTorch checkpoint (``QNetwork``), runs the learner's step a few
times, copying the online network into the target every ``sync_every`` steps as DQN does, and compares
the losses and both networks' Q-values with labcore's own DQN update (``labcore.agents.dqn.core``: Haiku,
``optax``), given the same weights. An answer is held to the algorithm labcore trains with, not to another
NNX program that could share its mistake.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from labcore import losses

TRANSITION = ("obs", "actions", "rewards", "next_obs", "terminated")


class QNetwork(nnx.Module):
    """obs [B, D] -> Q-values [B, A]: Linear, ReLU, Linear, ReLU, Linear (PyTorch's nn.Sequential of them)."""

    def __init__(self, obs_size: int, hidden: tuple[int, int], num_actions: int, *, rngs: nnx.Rngs):
        self.hidden_0 = nnx.Linear(obs_size, hidden[0], rngs=rngs)
        self.hidden_1 = nnx.Linear(hidden[0], hidden[1], rngs=rngs)
        self.q_values = nnx.Linear(hidden[1], num_actions, rngs=rngs)

    def __call__(self, obs):
        return self.q_values(nnx.relu(self.hidden_1(nnx.relu(self.hidden_0(obs)))))

    @classmethod
    def from_torch(cls, state_dict) -> QNetwork:
        """The network of a PyTorch ``nn.Sequential(Linear, ReLU, Linear, ReLU, Linear)``'s state_dict."""
        weights = [state_dict[f"{i}.weight"].numpy() for i in (0, 2, 4)]  # PyTorch: [out, in]
        model = cls(weights[0].shape[1], (weights[0].shape[0], weights[1].shape[0]), weights[2].shape[0],
                    rngs=nnx.Rngs(params=0))
        for layer, index, weight in zip((model.hidden_0, model.hidden_1, model.q_values), (0, 2, 4), weights, strict=True):
            layer.kernel[...] = jnp.asarray(weight.T)  # Flax: [in, out]
            layer.bias[...] = jnp.asarray(state_dict[f"{index}.bias"].numpy())
        return model


def inputs(rng: np.random.Generator) -> tuple:
    """(state_dict of a PyTorch Q-network, obs [B, D], actions [B], rewards [B], next_obs [B, D],
    terminated [B] bool, gamma, learning_rate, steps, sync_every). Every draw has terminal and non-terminal
    transitions, one reward of 50 (a TD error far past the Huber loss's quadratic part: these networks' Q-values
    start below 10 in magnitude), and copies the target at least once."""
    import torch

    obs_size, first, second, num_actions = (int(n) for n in rng.choice(np.arange(2, 12), 4, replace=False))
    model = torch.nn.Sequential(torch.nn.Linear(obs_size, first), torch.nn.ReLU(), torch.nn.Linear(first, second),
                                torch.nn.ReLU(), torch.nn.Linear(second, num_actions))
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.copy_(torch.from_numpy(rng.normal(scale=0.5, size=tuple(parameter.shape)).astype(np.float32)))
    batch = int(rng.integers(6, 33))
    terminated = rng.random(batch) < 0.35
    terminated[:2] = (True, False)  # both kinds, always
    steps = int(rng.integers(3, 7))
    rewards = rng.normal(scale=3.0, size=batch)
    rewards[2] = 50.0
    return (model.state_dict(), jnp.asarray(rng.normal(size=(batch, obs_size)), jnp.float32),
            jnp.asarray(rng.integers(0, num_actions, batch), jnp.int32),
            jnp.asarray(rewards, jnp.float32),
            jnp.asarray(rng.normal(size=(batch, obs_size)), jnp.float32), jnp.asarray(terminated),
            float(rng.choice([0.9, 0.99])), float(rng.choice([1e-3, 1e-2])), steps, int(rng.integers(2, steps + 1)))


def run_steps(train_step):
    """The checker's side of the exercise: ``train_step(model, target_model, optimizer, batch, gamma) ->
    loss`` run ``steps`` times on networks built from the checkpoint, the target copied from the online
    network every ``sync_every`` steps. Returns (losses [steps], online Q [B, A] of obs, target Q [B, A] of
    next_obs), read from the modules themselves: the step must change ``model`` in place."""

    def run(state_dict, obs, actions, rewards, next_obs, terminated, gamma, learning_rate, steps, sync_every):
        model, target = QNetwork.from_torch(state_dict), QNetwork.from_torch(state_dict)
        optimizer = nnx.Optimizer(model, optax.adam(learning_rate), wrt=nnx.Param)
        batch = (obs, actions, rewards, next_obs, terminated)
        history = []
        for step in range(steps):
            history.append(jnp.asarray(train_step(model, target, optimizer, batch, gamma), jnp.float32))
            if (step + 1) % sync_every == 0:
                nnx.update(target, nnx.state(model, nnx.Param))
        return jnp.stack(history), model(obs), target(next_obs)

    return run


def reference(state_dict, obs, actions, rewards, next_obs, terminated, gamma, learning_rate, steps, sync_every):
    """labcore's DQN update (``labcore.agents.dqn.core.make_update``: Huber loss, Adam, a hard target copy
    every ``sync_every`` updates) on the same weights, as Haiku parameters."""
    from labcore.agents.dqn import core as dqn
    from labcore.nets.q_networks import make_q_network

    layers = [(state_dict[f"{i}.weight"].numpy().T, state_dict[f"{i}.bias"].numpy()) for i in (0, 2, 4)]
    config = dqn.DQNConfig(network="mlp", hidden_sizes=(layers[0][0].shape[1], layers[1][0].shape[1]), gamma=gamma,
                           learning_rate=learning_rate, optimizer="adam", td_loss="huber", train_frequency=1,
                           target_update_frequency=sync_every)
    network = make_q_network("mlp", layers[2][0].shape[1], config.hidden_sizes)
    names = sorted(network.init(jax.random.key(0), obs[:1]), key=lambda name: (len(name), name))  # linear, _1, _2
    params = {name: {"w": jnp.asarray(w), "b": jnp.asarray(b)} for name, (w, b) in zip(names, layers, strict=True)}
    optimizer = dqn.make_optimizer(config)
    update = jax.jit(dqn.make_update(config, network, optimizer))
    state = dqn.TrainState(params, params, optimizer.init(params), jnp.int32(0))
    batch = dqn.Transition(obs=obs, action=actions, reward=rewards, next_obs=next_obs, terminated=terminated)
    history = []
    for _ in range(steps):
        state, metrics = update(state, batch)
        history.append(metrics["loss"])
    return (jnp.stack(history), network.apply(state.params, None, obs),
            network.apply(state.target_params, None, next_obs))


# ----------------------------------------------------------------------------------------------
# A worked answer, as a learner writes it, and the classic mistakes.


def nnx_dqn_train_step(model, target_model, optimizer, batch, gamma):
    obs, actions, rewards, next_obs, terminated = batch
    # the target: from the target network, no bootstrap past a terminal state, and no gradient
    next_q = target_model(next_obs).max(axis=-1)  # [B]
    target = jax.lax.stop_gradient(rewards + gamma * (1.0 - terminated) * next_q)

    def dqn_loss(model):
        q = model(obs)  # [B, A]
        q_taken = q[jnp.arange(q.shape[0]), actions]  # the action taken
        return losses.huber_loss(q_taken - target).mean()

    loss, grads = nnx.value_and_grad(dqn_loss)(model)  # with respect to the online network's nnx.Params
    optimizer.update(model, grads)  # Adam's step, written into model
    return loss


def _step(*, mask=True, online_target=False, huber=True, greedy=False, step=True, discount=True, mask_reward=False,
          summed=False):
    def train_step(model, target_model, optimizer, batch, gamma):
        obs, actions, rewards, next_obs, terminated = batch
        next_q = (model if online_target else target_model)(next_obs).max(axis=-1)
        not_done = 1.0 - terminated if mask else 1.0
        target = rewards + (gamma if discount else 1.0) * not_done * next_q
        if mask_reward:
            target = (1.0 - terminated) * (rewards + gamma * next_q)
        target = jax.lax.stop_gradient(target)

        def dqn_loss(model):
            q = model(obs)
            chosen = q.max(axis=-1) if greedy else q[jnp.arange(q.shape[0]), actions]
            error = chosen - target
            per_transition = losses.huber_loss(error) if huber else 0.5 * error**2
            return per_transition.sum() if summed else per_transition.mean()

        loss, grads = nnx.value_and_grad(dqn_loss)(model)
        if step:
            optimizer.update(model, grads)
        return loss

    return train_step


MISTAKES = (
    ("the target bootstraps past a terminal state: (1 - terminated) is missing", _step(mask=False)),
    ("the terminal mask covers the reward too: a terminal transition's target is 0, not its reward",
     _step(mask_reward=True)),
    ("the target comes from the online network, not the target network", _step(online_target=True)),
    ("the target is not discounted: gamma is missing", _step(discount=False)),
    ("the loss fits max_a Q(s, a), not the Q-value of the action taken", _step(greedy=True)),
    ("half the squared error instead of DQN's Huber loss (whose gradient is the error clipped to [-1, 1])",
     _step(huber=False)),
    ("the loss sums over the batch instead of averaging: the step is B times too large", _step(summed=True)),
    ("the gradients are computed but optimizer.update(model, grads) is never called: nothing trains", _step(step=False)),
)
