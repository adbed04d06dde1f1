"""Q-networks for DQN, written in Haiku.

Haiku separates a network's definition from its parameters: ``hk.transform``
turns a function that builds modules into a pair of pure functions,
``init(key, obs) -> params`` and ``apply(params, None, obs) -> q_values``, and
the parameters are an ordinary pytree (a dict of dicts of arrays).

    network = make_q_network("nature_cnn", num_actions=4)
    params = network.init(key, dummy_obs)
    q = network.apply(params, None, obs)        # [B, num_actions]
"""

from __future__ import annotations

from collections.abc import Sequence

import haiku as hk
import jax
import jax.numpy as jnp


class NatureCNN(hk.Module):
    """The Nature DQN network (Mnih et al., 2015).

    conv 32 8x8 stride 4 -> conv 64 4x4 stride 2 -> conv 64 3x3 stride 1 -> dense 512 -> Q per action,
    ReLU between. Frames arrive as uint8 and are scaled to [0, 1] inside the network, so the
    replay buffer can store uint8 (4x smaller than float32).

    obs: [B, 4, 84, 84] uint8, the 4 stacked frames first, as gymnasium's FrameStackObservation
    returns them -> [B, num_actions] float32. The frames become channels inside (XLA's CPU and GPU
    convolutions prefer channels last), fused with the uint8 -> float conversion.
    """

    def __init__(self, num_actions: int, name: str | None = None):
        super().__init__(name=name)
        self.num_actions = num_actions

    def __call__(self, obs: jax.Array) -> jax.Array:
        x = jnp.transpose(obs, (0, 2, 3, 1)).astype(jnp.float32) / 255.0
        x = jax.nn.relu(hk.Conv2D(32, kernel_shape=8, stride=4, padding="VALID")(x))
        x = jax.nn.relu(hk.Conv2D(64, kernel_shape=4, stride=2, padding="VALID")(x))
        x = jax.nn.relu(hk.Conv2D(64, kernel_shape=3, stride=1, padding="VALID")(x))
        x = hk.Flatten()(x)
        x = jax.nn.relu(hk.Linear(512)(x))
        return hk.Linear(self.num_actions)(x)


class MLPQNetwork(hk.Module):
    """A fully connected Q-network for vector observations (CartPole and friends).

    obs: [B, D] float -> [B, num_actions] float32.
    """

    def __init__(self, num_actions: int, hidden_sizes: Sequence[int] = (120, 84), name: str | None = None):
        super().__init__(name=name)
        self.num_actions = num_actions
        self.hidden_sizes = tuple(hidden_sizes)

    def __call__(self, obs: jax.Array) -> jax.Array:
        x = obs.astype(jnp.float32)
        for size in self.hidden_sizes:
            x = jax.nn.relu(hk.Linear(size)(x))
        return hk.Linear(self.num_actions)(x)


NETWORKS = ("nature_cnn", "mlp")


def make_q_network(kind: str, num_actions: int, hidden_sizes: Sequence[int] = (120, 84)) -> hk.Transformed:
    """``hk.transform`` of a Q-network: ``init(key, obs)`` and ``apply(params, None, obs)``.

    kind: 'nature_cnn' (Atari frames) or 'mlp' (vector observations).
    """
    if kind not in NETWORKS:
        raise ValueError(f"network kind must be one of {NETWORKS}, got {kind!r}")
    if num_actions < 1:
        raise ValueError(f"num_actions must be >= 1, got {num_actions}")

    def forward(obs: jax.Array) -> jax.Array:
        if kind == "nature_cnn":
            return NatureCNN(num_actions)(obs)
        return MLPQNetwork(num_actions, hidden_sizes)(obs)

    return hk.transform(forward)
